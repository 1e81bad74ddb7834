"""The README's first command: a local control plane whose audit webhook points at the
operator, a local bare Git remote, the operator, a few resources applied and changed by two
users, the resulting `git log` (each change authored by whoever made it), and `kubescribe
history` and `blame` of the ConfigMap both users changed."""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import click

from kubescribe.api.crds import render_crds
from kubescribe_devenv.controlplane import AuditWebhook, ControlPlane, free_port
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.operator import OperatorProcess
from kubescribe_devenv.pki import webhook_certs

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
            "spec": {
                "url": remote_url,
                "allowedBranches": ["main"],
                "attribution": {"mode": "attributed-author"},
            },
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


MASTERS = ("--as-group=system:masters",)


def _audit(keep: Path) -> tuple[list[str], AuditWebhook]:
    """Certificates for the audit receiver, its flags, and the control plane's audit webhook."""
    certs = webhook_certs(keep / "certs")
    port = free_port()
    flags = [
        f"--audit-addr=127.0.0.1:{port}",
        f"--audit-tls-cert={certs.path('tls.crt')}",
        f"--audit-tls-key={certs.path('tls.key')}",
        f"--audit-client-ca={certs.path('client-ca.crt')}",
    ]
    hook = AuditWebhook(
        url=f"https://127.0.0.1:{port}/audit-webhook/local",
        ca_pem=certs.ca.cert_pem,
        client=certs.client("kubescribe-audit-local"),
    )
    return flags, hook


def _streams_running(cp: ControlPlane) -> bool:
    target = cp.get_json("gittarget", "cluster-mirror", "-n", NS)
    conditions = (target.get("status") or {}).get("conditions") or []
    return any(c["type"] == "StreamsRunning" and c["status"] == "True" for c in conditions)


def _history(remote: BareRemote) -> None:
    """`kubescribe history` and `blame` of the ConfigMap both users changed."""
    from kubescribe.history.commands import blame_text, history_text  # noqa: PLC0415
    from kubescribe.history.index import History  # noqa: PLC0415
    from kubescribe.history.source import open_local  # noqa: PLC0415

    source = open_local(remote.path, "main", "clusters/dev")
    history = History(source.repo, source.tip, source.folder, None)
    try:
        where = f"--repo {remote.path} --path clusters/dev"
        click.echo(f"$ kubescribe history configmap/app-settings -n {NS} {where}\n")
        click.echo(history_text(history, "configmap/app-settings", NS, None, None, None, "table"))
        click.echo(f"\n$ kubescribe blame configmap/app-settings -n {NS} {where}\n")
        click.echo(blame_text(history, "configmap/app-settings", NS) + "\n")
    finally:
        history.close()


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
    audit_flags, hook = _audit(keep)
    with ControlPlane(audit=hook, workdir=Path(tempfile.mkdtemp(prefix="kubescribe-demo-"))) as cp:
        click.echo(f"control plane up at {cp.server} (audit webhook -> the operator)")
        cp.apply(render_crds())
        cp.wait_established()
        operator = OperatorProcess(cp.kubeconfig, keep, *audit_flags).start()
        try:
            cp.apply(_objects(remote.url))
            click.echo(
                "operator running; GitProvider, GitTarget and WatchRule applied in namespace demo"
            )
            _wait(lambda: _streams_running(cp), "the watch streams")
            alice, bob = ("--as=alice", *MASTERS), ("--as=bob", *MASTERS)
            cp.kubectl(
                "create",
                "configmap",
                "app-settings",
                "-n",
                NS,
                "--from-literal=LOG_LEVEL=info",
                "--from-literal=FEATURE_X=on",
                *alice,
            )
            cp.kubectl(
                "create",
                "deployment",
                "web",
                "-n",
                NS,
                "--image=nginx:1.27",
                "--replicas=2",
                *alice,
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
                *bob,
            )
            _wait(lambda: "debug" in remote.read(path), "the update in Git")
            cp.kubectl("create", "configmap", "scratch", "-n", NS, "--from-literal=tmp=1", *bob)
            scratch = "clusters/dev/demo/core/configmaps/scratch.yaml"
            _wait(lambda: scratch in remote.files(), "the second ConfigMap in Git")
            cp.kubectl("delete", "configmap", "scratch", "-n", NS, *alice)
            _wait(lambda: scratch not in remote.files(), "the delete in Git")
            click.echo("\n$ git log --stat (remote)\n")
            click.echo(git("log", "--stat", "--format=%h %an <%ae>%n    %s", cwd=remote.path))
            click.echo(f"$ git show main:{path}\n")
            click.echo(remote.read(path))
            status = cp.kubectl("get", "gittargets,gitproviders,watchrules", "-n", NS).stdout
            click.echo(f"$ kubectl get gittargets,gitproviders,watchrules -n {NS}\n{status}")
            _history(remote)
            click.echo(f"The remote stays at {remote.url} ; operator log: {operator.log_path}")
        finally:
            operator.stop()


if __name__ == "__main__":
    main()
