"""kubescribe as a Pod: the image built by hack/build-image.sh, installed by its Helm chart into
a real single-node cluster (kubelet + containerd + runc, devenv.cluster), mirroring into an SSH
Git server on the host that the Pods reach at 10.77.0.2. Root only; skipped otherwise.

Like the control plane, each pytest worker that runs one of these tests starts one cluster for
its session (about 0.8 GiB; several side by side work)."""

from __future__ import annotations

import base64
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

from kubescribe_devenv.cluster import (
    NODE_IP,
    Cluster,
    ClusterTools,
    cluster_tools,
    missing_requirements,
)
from kubescribe_devenv.controlplane import REPO_ROOT
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.sshgit import SshGitServer, sshd_binary
from tests.cluster.published import Published, publish
from tests.manifests import CM_RULE, cm_path, keypair, provider, secret, target, watch_rule
from tests.support import manifest, record_figure, wait_for

pytestmark = pytest.mark.cluster
NAMESPACE = "kubescribe-system"


def record(name: str, value: float) -> None:
    """Keep a measured figure (seconds, or the unit its name gives) in
    .devenv/cluster-figures-<worker>.json (notes)."""
    record_figure(name, value, "cluster")


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


_REIMPORTED: set[Path] = set()


def ensure_imported(cluster: Cluster, image: Image) -> None:
    """Import the image once more before a cluster's first install from it. The cluster imports
    its images while containerd's CRI service may still be starting; twice in CI a Pod then
    found the image absent (ErrImageNeverPull) although `ctr` listed it. A second import, once
    the node runs, is seen by the CRI service. An image missing from the listing later is
    written to .devenv/cluster-image-misses-<worker>.txt and imported again."""
    names = cluster.image_names()
    if cluster.workdir in _REIMPORTED and image.ref in names:
        return
    if image.ref not in names:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        misses = REPO_ROOT / ".devenv" / f"cluster-image-misses-{worker}.txt"
        misses.parent.mkdir(exist_ok=True)
        with misses.open("a") as out:
            out.write(f"{datetime.now().isoformat()} {image.ref} missing; listed: {names}\n")
    cluster.import_image(image.archive)
    _REIMPORTED.add(cluster.workdir)


@pytest.fixture(scope="session")
def published(
    cluster: Cluster, tools: ClusterTools, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Published]:
    """The release of this version on a loopback registry (tests using it share the
    `xdist_group("release")`, so one worker publishes once)."""
    with publish(cluster, tools, tmp_path_factory.mktemp("release")) as release:
        yield release


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

    def run(
        name: str,
        *values: str,
        wait: bool = True,
        files: dict[str, Path] | None = None,
        chart: str = "",
        helm_args: tuple[str, ...] = (),
    ) -> Release:
        """Installs the chart of the worktree with the image built here (never pulled), or
        `chart` (`oci://...`; `helm_args` such as `--version`) with the image its values name;
        `files` are --set-file values."""
        rel = Release(cluster, name)
        local_image = [
            f"image.repository={image.repository}",
            f"image.tag={image.tag}",
            "image.pullPolicy=Never",
        ]
        rel.values = [*([] if chart else local_image), "logLevel=debug", *values]
        if not chart:
            ensure_imported(cluster, image)
        args = [f"--set={v}" for v in rel.values]
        args += [f"--set-file={key}={path}" for key, path in (files or {}).items()]
        t0 = time.monotonic()
        releases.append(rel)
        done = cluster.helm(
            "install", name, chart or str(REPO_ROOT / "charts" / "kubescribe"),
            *helm_args, "-n", NAMESPACE,
            # The CRDs an earlier release left (crds.keep) are adopted by this one.
            "--create-namespace", "--take-ownership",
            *(["--wait", "--timeout=120s"] if wait else []), *args,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{done.stderr}\n{rel.logs()}"
        record("helm install --wait", time.monotonic() - t0)
        return rel

    yield run
    for rel in releases:
        cluster.helm("uninstall", rel.name, "-n", NAMESPACE, "--wait", "--timeout=60s", check=False)
        wait_for(functools.partial(_gone, rel), timeout=120, what="Pods gone")


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


def get_secret(cluster: Cluster, name: str) -> dict[str, Any] | None:
    """The Secret `name` of the release namespace, or None."""
    done = cluster.kubectl("get", "secret", name, "-n", NAMESPACE, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def attribution_values(name: str, ns: str, confdir: Path, source: str = "operator") -> list[str]:
    """Values of a release `name` whose audit receiver and admission webhook kube-apiserver
    reaches at the node address (hostPort), its apiserver files to go to `confdir`."""
    return [
        f"rbac.secretNamespaces={{{ns}}}", "audit.enabled=true", "admission.enabled=true",
        "audit.hostPort=9443", "admission.hostPort=9444", f"certificates.extraSANs={{{NODE_IP}}}",
        f"audit.url=https://{NODE_IP}:9443/audit-webhook/local",
        f"admission.url=https://{NODE_IP}:9444/validate-commitrequests",
        f"apiserverConfigDir={confdir}", f"certificates.source={source}",
    ]  # fmt: skip


def wire_apiserver(cluster: Cluster, name: str, confdir: Path) -> None:
    """The cluster administrator's part, as the chart's NOTES tell it: the files of the Secret
    <name>-kubescribe-apiserver-config into `confdir`, kube-apiserver restarted with them."""
    files = wait_for(
        lambda: get_secret(cluster, f"{name}-kubescribe-apiserver-config"),
        timeout=60,
        what="the apiserver-config Secret",
    )
    assert files is not None
    confdir.mkdir()
    for file, value in files["data"].items():
        (confdir / file).write_bytes(base64.b64decode(value))
    cluster.restart_apiserver(
        f"--audit-policy-file={confdir}/audit-policy.yaml",
        f"--audit-webhook-config-file={confdir}/audit-webhook.kubeconfig",
        "--audit-webhook-batch-max-wait=1s",
        f"--admission-control-config-file={confdir}/admission-configuration.yaml",
    )


@dataclass
class User:
    """A user of the cluster (client certificate, no group), with Roles granted per namespace."""

    cluster: Cluster
    name: str

    def __post_init__(self) -> None:
        self.kubeconfig = self.cluster.user_kubeconfig(self.name)

    def grant(self, ns: str, verbs: str, resource: str) -> None:
        role = f"{self.name}-{resource.split('.', maxsplit=1)[0]}"
        self.cluster.kubectl(
            "create", "role", role, "-n", ns, f"--verb={verbs}", f"--resource={resource}"
        )
        self.cluster.kubectl(
            "create", "rolebinding", role, "-n", ns, f"--role={role}", f"--user={self.name}"
        )

    def kubectl(self, *args: str, stdin: str | None = None) -> None:
        assert self.cluster.tools is not None
        subprocess.run(
            [str(self.cluster.tools.kubectl), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin, text=True, capture_output=True, check=True,
        )  # fmt: skip


def commit_mentioning(repo: Repo, text: str, timeout: float = 60) -> dict[str, str]:
    """The first commit of the remote whose message mentions `text` (waits for it)."""

    def find() -> dict[str, str] | None:
        return next((c for c in repo.remote.log() if text in c["message"]), None)

    found: dict[str, str] = wait_for(find, timeout=timeout, what=f"a commit mentioning {text}")
    return found
