"""kubescribe as a Pod: the single-node test cluster, the image built from the Dockerfile, the
Helm chart (with the audit receiver wired into kube-apiserver), an SSH Git server the Pod
reaches, a few changes made by a user, and the resulting `git log` with their author.

    sudo bash hack/cluster-demo.sh [--keep]     # --keep: stay up until Ctrl-C
"""

from __future__ import annotations

import base64
import json
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import click
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from kubescribe_devenv.cluster import (
    NODE_IP,
    Cluster,
    ClusterTools,
    cluster_tools,
    missing_requirements,
)
from kubescribe_devenv.controlplane import REPO_ROOT
from kubescribe_devenv.gitremote import git
from kubescribe_devenv.sshgit import SshGitServer

NS = "demo"
RELEASE = "kubescribe"
SYSTEM = "kubescribe-system"


def _wait(check: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except Exception:  # not there yet
            pass
        time.sleep(0.2)
    raise click.ClickException(f"timed out waiting for {what}")


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _objects(url: str, private_key: str, known_hosts: str) -> str:
    api = "kubescribe.io/v1alpha1"
    docs = [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "git", "namespace": NS},
            "data": {"ssh-privatekey": _b64(private_key), "known_hosts": _b64(known_hosts)},
        },
        {
            "apiVersion": api,
            "kind": "GitProvider",
            "metadata": {"name": "repo", "namespace": NS},
            "spec": {
                "url": url,
                "secretRef": {"name": "git"},
                "push": {"commitWindow": "2s"},
                "attribution": {"mode": "attributed-author"},
            },
        },
        {
            "apiVersion": api,
            "kind": "GitTarget",
            "metadata": {"name": "cluster-mirror", "namespace": NS},
            "spec": {"providerRef": {"name": "repo"}, "branch": "main", "path": "clusters/dev"},
        },
        {
            "apiVersion": api,
            "kind": "WatchRule",
            "metadata": {"name": "apps", "namespace": NS},
            "spec": {
                "targetRef": {"name": "cluster-mirror"},
                "rules": [{"apiGroups": ["", "apps"], "resources": ["configmaps", "deployments"]}],
            },
        },
    ]
    return "\n---\n".join(json.dumps(d) for d in docs)


@click.command()
@click.option("--keep", is_flag=True, help="Stay up (print the kubeconfig) until Ctrl-C.")
def main(keep: bool) -> None:
    """Run kubescribe as a Pod in a local single-node cluster and show what it commits."""
    if missing := missing_requirements():
        raise click.ClickException(f"needs {', '.join(missing)} (run hack/setup.sh as root)")
    t0 = time.monotonic()
    tools = cluster_tools()
    built = subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / "build-image.sh")],
        capture_output=True,
        text=True,
        check=True,
    )
    archive, ref = built.stdout.split()[-2:]
    click.echo(f"image {ref} ({Path(archive).stat().st_size >> 20} MB archive)")
    work = Path(tempfile.mkdtemp(prefix="kubescribe-cluster-demo-"))
    try:
        _run(tools, Path(archive), ref, work, keep, t0)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _run(tools: ClusterTools, archive: Path, ref: str, work: Path, keep: bool, t0: float) -> None:
    with Cluster(images=[archive], tools=tools, workdir=work / "cluster") as cluster, \
            SshGitServer(work / "sshd") as server:  # fmt: skip
        click.echo(f"cluster up in {cluster.timings['start']:.1f}s")
        cluster.expose_host_port(server.port)
        key = ed25519.Ed25519PrivateKey.generate()
        private = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ).decode()
        server.authorize(
            key.public_key()
            .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
            .decode()
        )
        remote = server.create_repo("mirror")
        confdir = work / "apiserver"
        repository, tag = ref.rsplit(":", 1)
        values = [
            f"image.repository={repository}", f"image.tag={tag}", "image.pullPolicy=Never",
            f"rbac.secretNamespaces={{{NS}}}", "audit.enabled=true", "audit.hostPort=9443",
            f"audit.url=https://{NODE_IP}:9443/audit-webhook/local",
            f"certificates.extraSANs={{{NODE_IP}}}", f"apiserverConfigDir={confdir}",
        ]  # fmt: skip
        cluster.kubectl("create", "namespace", NS)
        installed = cluster.helm(
            "install", RELEASE, str(REPO_ROOT / "charts" / "kubescribe"), "-n", SYSTEM,
            "--create-namespace", "--wait", "--timeout=120s", *[f"--set={v}" for v in values],
        )  # fmt: skip
        click.echo(installed.stdout.split("NOTES:")[0].strip())
        # The administrator's part: kube-apiserver gets the chart's audit configuration.
        secret = cluster.get_json("secret", f"{RELEASE}-apiserver-config", "-n", SYSTEM)
        confdir.mkdir()
        for name, value in secret["data"].items():
            (confdir / name).write_bytes(base64.b64decode(value))
        cluster.restart_apiserver(
            f"--audit-policy-file={confdir}/audit-policy.yaml",
            f"--audit-webhook-config-file={confdir}/audit-webhook.kubeconfig",
            "--audit-webhook-batch-max-wait=1s",
        )
        known_hosts = f"[{NODE_IP}]:{server.port} {server.host_public_key}\n"
        url = f"ssh://{server.user}@{NODE_IP}:{server.port}{remote.path}"
        cluster.kubectl("apply", "-f", "-", input=_objects(url, private, known_hosts))
        ready = "jsonpath={.status.conditions[?(@.type=='Ready')].status}"
        _wait(
            lambda: (
                cluster.kubectl(
                    "get", "gittarget", "cluster-mirror", "-n", NS, "-o", ready
                ).stdout.strip()
                == "True"
            ),
            "the GitTarget to be Ready",
        )
        alice = cluster.user_kubeconfig("alice")
        cluster.kubectl("create", "role", "editor", "-n", NS, "--verb=*",
                        "--resource=configmaps,deployments.apps")  # fmt: skip
        cluster.kubectl("create", "rolebinding", "alice", "-n", NS, "--role=editor", "--user=alice")
        assert cluster.tools is not None

        def as_alice(*args: str) -> None:
            subprocess.run(
                [str(cluster.tools.kubectl), f"--kubeconfig={alice}", "-n", NS, *args],  # type: ignore[union-attr]
                check=True, capture_output=True,
            )  # fmt: skip

        as_alice("create", "configmap", "settings", "--from-literal=color=blue")
        as_alice("create", "deployment", "web", "--image=localhost/kubescribe/pause:local")
        cluster.kubectl("create", "configmap", "by-admin", "-n", NS, "--from-literal=a=1")
        _wait(
            lambda: len(git("rev-list", "main", cwd=remote.path).split()) >= 3,
            "the commits of the changes",
        )
        _wait(lambda: "by-admin" in git("log", "-1", "--stat", "main", cwd=remote.path), "push")
        click.echo("\n$ git log --stat   (the remote, pushed by the Pod over SSH)")
        click.echo(git("log", "--stat", "--format=%h %an <%ae>%n    %s", "main", cwd=remote.path))
        click.echo("$ kubectl get pods,gittargets -A")
        click.echo(cluster.kubectl("get", "pods,gittargets", "-A").stdout)
        click.echo(f"done in {time.monotonic() - t0:.0f}s")
        if keep:
            click.echo(f"\nexport KUBECONFIG={cluster.kubeconfig}   (Ctrl-C tears it all down)")
            stop = threading.Event()
            signal.signal(signal.SIGINT, lambda *_: stop.set())
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
            stop.wait()


if __name__ == "__main__":
    main()
