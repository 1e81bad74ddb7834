"""kubescribe as a Pod: the image built by hack/build-image.sh, installed by its Helm chart into
a real single-node cluster (kubelet + containerd + runc, devenv.cluster), mirroring into an SSH
Git server on the host that the Pods reach at 10.77.0.2. Root only; skipped otherwise.

Like the control plane, each pytest worker that runs one of these tests starts one cluster for
its session (about 0.8 GiB; several side by side work)."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubescribe.devenv.cluster import (
    NODE_IP,
    Cluster,
    ClusterTools,
    cluster_tools,
    missing_requirements,
)
from kubescribe.devenv.controlplane import REPO_ROOT
from kubescribe.devenv.gitremote import BareRemote, git
from kubescribe.devenv.sshgit import SshGitServer, sshd_binary
from tests.manifests import CM_RULE, cm_path, keypair, provider, secret, target, watch_rule
from tests.support import manifest, wait_for

pytestmark = pytest.mark.cluster
NAMESPACE = "kubescribe-system"
WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")
FIGURES = REPO_ROOT / ".devenv" / f"cluster-figures-{WORKER}.json"


def record(name: str, value: float) -> None:
    """Keep a measured figure (seconds, or the unit its name gives) in
    .devenv/cluster-figures-<worker>.json (notes)."""
    FIGURES.parent.mkdir(exist_ok=True)
    figures = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    figures[name] = round(value, 2)
    FIGURES.write_text(json.dumps(figures, indent=1, sort_keys=True) + "\n")


@pytest.fixture(scope="session")
def tools() -> ClusterTools:
    if missing := missing_requirements():
        pytest.skip(f"the test cluster needs {', '.join(missing)}")
    return cluster_tools()


@dataclass(frozen=True)
class Image:
    archive: Path
    ref: str

    @property
    def repository(self) -> str:
        return self.ref.rsplit(":", 1)[0]

    @property
    def tag(self) -> str:
        return self.ref.rsplit(":", 1)[1]


@pytest.fixture(scope="session")
def image(tools: ClusterTools) -> Image:
    """The operator image, built from the Dockerfile by the documented command (cached)."""
    t0 = time.monotonic()
    done = subprocess.run(
        ["bash", str(REPO_ROOT / "hack" / "build-image.sh")],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "KUBESCRIBE_CLUSTER_DIR": str(tools.root)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    archive, ref = done.stdout.split()[-2:]
    record("image build (cached when unchanged)", time.monotonic() - t0)
    return Image(Path(archive), ref)


@pytest.fixture(scope="session")
def cluster(
    tools: ClusterTools, image: Image, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Cluster]:
    c = Cluster(images=[image.archive], tools=tools, workdir=tmp_path_factory.mktemp("cluster"))
    c.start()
    record("cluster start", c.timings["start"])
    try:
        yield c
    finally:
        c.stop()
        record("cluster stop", c.timings["stop"])


@pytest.fixture(scope="session")
def ssh_git(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshGitServer]:
    if sshd_binary() is None:
        pytest.skip("openssh-server is not installed")
    with SshGitServer(tmp_path_factory.mktemp("sshd")) as server:
        cluster.expose_host_port(server.port)
        yield server


@dataclass
class Repo:
    """A repository on the SSH server and the objects that make a namespace mirror into it."""

    server: SshGitServer
    remote: BareRemote
    private_key: str

    @property
    def url(self) -> str:  # as the Pods reach it
        return f"ssh://{self.server.user}@{NODE_IP}:{self.server.port}{self.remote.path}"

    def mirror(self, ns: str, *rules: dict[str, Any], branch: str = "main", **spec: Any) -> str:
        known_hosts = f"[{NODE_IP}]:{self.server.port} {self.server.host_public_key}\n"
        creds = secret("git", ns, {"ssh-privatekey": self.private_key, "known_hosts": known_hosts})
        return manifest(
            creds,
            provider("repo", ns, self.url, secretRef={"name": "git"}, **spec),
            target("mirror", ns, "repo", "mirror", branch=branch),
            watch_rule("rule", ns, "mirror", *(rules or (CM_RULE,))),
        )


@pytest.fixture
def repo(ssh_git: SshGitServer, request: pytest.FixtureRequest) -> Repo:
    private, public = keypair()
    ssh_git.authorize(public)
    name = request.node.name.replace("_", "-")[:40]
    return Repo(ssh_git, ssh_git.create_repo(name), private)


@dataclass
class Release:
    cluster: Cluster
    name: str
    values: list[str] = field(default_factory=list)

    @property
    def service_account(self) -> str:
        return f"{self.name}-kubescribe"

    def pods(self, *, terminating: bool = False) -> list[dict[str, Any]]:
        selector = f"app.kubernetes.io/instance={self.name}"
        items = self.cluster.get_json("pods", "-n", NAMESPACE, "-l", selector)["items"]
        return [p for p in items if terminating or not p["metadata"].get("deletionTimestamp")]

    def ready_pods(self) -> list[str]:
        return [
            p["metadata"]["name"]
            for p in self.pods()
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p.get("status", {}).get("conditions") or []
            )
        ]

    def logs(self) -> str:
        out = []
        for pod in self.pods():
            name = pod["metadata"]["name"]
            got = self.cluster.kubectl("logs", "-n", NAMESPACE, name, "--tail=60", check=False)
            out.append(f"--- {name}\n{got.stdout}{got.stderr}")
        return "\n".join(out)

    def delete_pod_timed(self, name: str) -> tuple[float, int]:
        """Delete a Pod (SIGTERM to its container) and return the seconds until the container
        exited (its `finishedAt` as kubelet reports it, 1 s resolution, minus the delete) and its
        exit code: 0 when it stopped by itself, 137 when the kubelet killed it after the grace
        period."""
        watch = subprocess.Popen(
            [str(self.cluster.tools.kubectl), f"--kubeconfig={self.cluster.kubeconfig}",  # type: ignore[union-attr]
             "get", "pod", name, "-n", NAMESPACE, "--watch", "-o", "json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        try:
            started = time.time()
            self.cluster.kubectl("delete", "pod", name, "-n", NAMESPACE, "--wait=false")
            decoder, buffer = json.JSONDecoder(), ""
            assert watch.stdout is not None
            while line := watch.stdout.readline():
                buffer += line
                try:
                    pod, _ = decoder.raw_decode(buffer.strip())
                except ValueError:
                    continue
                buffer = ""
                for status in (pod.get("status") or {}).get("containerStatuses") or []:
                    done = (status.get("state") or {}).get("terminated")
                    if done and done.get("finishedAt"):
                        finished = datetime.fromisoformat(done["finishedAt"].replace("Z", "+00:00"))
                        return max(0.0, finished.timestamp() - started), int(done["exitCode"])
            raise AssertionError("the Pod's container never reported its exit")
        finally:
            watch.kill()
            watch.wait()

    def writer_holders(self) -> dict[str, str]:
        """writer (namespace url branch) -> holder identity, of the writer Leases."""
        leases = self.cluster.get_json("lease", "-n", NAMESPACE, "-l", "kubescribe.io/lease=writer")
        return {
            lease["metadata"]["annotations"]["kubescribe.io/writer"]: lease["spec"].get(
                "holderIdentity"
            )
            or ""
            for lease in leases["items"]
        }


@pytest.fixture
def install(cluster: Cluster, image: Image) -> Iterator[Callable[..., Release]]:
    """helm install --wait of the chart (its own ServiceAccount; uninstalled afterwards)."""
    releases: list[Release] = []

    def run(name: str, *values: str, wait: bool = True) -> Release:
        rel = Release(cluster, name)
        rel.values = [
            f"image.repository={image.repository}",
            f"image.tag={image.tag}",
            "image.pullPolicy=Never",
            "logLevel=debug",
            *values,
        ]
        args = [f"--set={v}" for v in rel.values]
        t0 = time.monotonic()
        releases.append(rel)
        done = cluster.helm(
            "install", name, str(REPO_ROOT / "charts" / "kubescribe"), "-n", NAMESPACE,
            "--create-namespace", *(["--wait", "--timeout=120s"] if wait else []), *args,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{done.stderr}\n{rel.logs()}"
        record("helm install --wait", time.monotonic() - t0)
        return rel

    yield run
    for rel in releases:
        cluster.helm("uninstall", rel.name, "-n", NAMESPACE, "--wait", "--timeout=60s", check=False)
        wait_for(functools.partial(_gone, rel), timeout=60, what="Pods gone")


def _gone(release: Release) -> bool:
    return not release.pods(terminating=True)


def data_of(repo: Repo, ns: str, name: str) -> dict[str, str] | None:
    try:
        return dict(yaml.safe_load(repo.remote.read(cm_path(ns, name)))["data"])
    except Exception:
        return None


def assert_linear_without_empty_commits(repo: Repo) -> list[str]:
    path = repo.remote.path
    assert git("rev-list", "--min-parents=2", "main", cwd=path).strip() == ""
    shas = git("rev-list", "main", cwd=path).split()
    for sha in shas:
        parents = git("rev-list", "--parents", "-n1", sha, cwd=path).split()[1:]
        if parents:
            changed = git("diff-tree", "--name-only", "-r", parents[0], sha, cwd=path).strip()
            assert changed, f"commit {sha[:12]} changes nothing"
    return shas
