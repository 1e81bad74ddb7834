"""The README's first command: a local control plane, a local bare Git remote, the operator,
a few resources applied and changed, and the resulting `git log`."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import click

from kubescribe.api.crds import render_crds
from kubescribe.devenv.controlplane import ControlPlane
from kubescribe.devenv.gitremote import BareRemote, git
from kubescribe.devenv.operator import OperatorProcess

NS = "demo"


def _wait(check: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise click.ClickException(f"timed out waiting for {what}")


def _objects(remote_url: str) -> str:
    docs = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {
            "apiVersion": "kubescribe.io/v1alpha1",
            "kind": "GitProvider",
            "metadata": {"name": "local", "namespace": NS},
            "spec": {"url": remote_url, "allowedBranches": ["main"]},
        },
        {
            "apiVersion": "kubescribe.io/v1alpha1",
            "kind": "GitTarget",
            "metadata": {"name": "cluster-mirror", "namespace": NS},
            "spec": {"providerRef": {"name": "local"}, "branch": "main", "path": "clusters/dev"},
        },
        {
            "apiVersion": "kubescribe.io/v1alpha1",
            "kind": "WatchRule",
            "metadata": {"name": "apps", "namespace": NS},
            "spec": {
                "targetRef": {"name": "cluster-mirror"},
                "rules": [
                    {
                        "apiGroups": ["", "apps"],
                        "resources": ["configmaps", "deployments", "services"],
                    }
                ],
            },
        },
    ]
    return "\n---\n".join(json.dumps(d) for d in docs)


@click.command()
@click.option(
    "--keep",
    type=click.Path(path_type=Path),
    default=Path(".devenv/demo"),
    show_default=True,
    help="Where the demo's bare remote and logs are kept.",
)
def main(keep: Path) -> None:
    """Run the mirror end to end on a local control plane and show the Git history."""
    keep = keep.resolve()
    shutil.rmtree(keep, ignore_errors=True)
    keep.mkdir(parents=True)
    remote = BareRemote.create(keep / "remote.git")
    with ControlPlane(workdir=Path(tempfile.mkdtemp(prefix="kubescribe-demo-"))) as cp:
        click.echo(f"control plane up at {cp.server}")
        cp.apply(render_crds())
        for plural in ("gitproviders", "gittargets", "watchrules", "clusterwatchrules"):
            cp.kubectl("wait", "--for=condition=Established", f"crd/{plural}.kubescribe.io")
        operator = OperatorProcess(cp.kubeconfig, keep).start()
        try:
            cp.apply(_objects(remote.url))
            click.echo(
                "operator running; GitProvider, GitTarget and WatchRule applied in namespace demo"
            )
            cp.kubectl(
                "create",
                "configmap",
                "app-settings",
                "-n",
                NS,
                "--from-literal=LOG_LEVEL=info",
                "--from-literal=FEATURE_X=on",
            )
            cp.kubectl(
                "create", "deployment", "web", "-n", NS, "--image=nginx:1.27", "--replicas=2"
            )
            path = "clusters/dev/demo/core/configmaps/app-settings.yaml"
            _wait(lambda: path in remote.files(), "the ConfigMap in Git")
            cp.kubectl(
                "patch",
                "configmap",
                "app-settings",
                "-n",
                NS,
                "-p",
                '{"data":{"LOG_LEVEL":"debug"}}',
            )
            _wait(lambda: "debug" in remote.read(path), "the update in Git")
            cp.kubectl("create", "configmap", "scratch", "-n", NS, "--from-literal=tmp=1")
            scratch = "clusters/dev/demo/core/configmaps/scratch.yaml"
            _wait(lambda: scratch in remote.files(), "the second ConfigMap in Git")
            cp.kubectl("delete", "configmap", "scratch", "-n", NS)
            _wait(lambda: scratch not in remote.files(), "the delete in Git")
            click.echo("\n$ git log --stat (remote)\n")
            click.echo(git("log", "--stat", "--format=%h %an <%ae>%n    %s", cwd=remote.path))
            click.echo(f"$ git show main:{path}\n")
            click.echo(remote.read(path))
            status = cp.kubectl("get", "gittargets,gitproviders,watchrules", "-n", NS).stdout
            click.echo(f"$ kubectl get gittargets,gitproviders,watchrules -n {NS}\n{status}")
            click.echo(f"The remote stays at {remote.url} ; operator log: {operator.log_path}")
        finally:
            operator.stop()


if __name__ == "__main__":
    main()
