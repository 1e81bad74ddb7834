"""Many tenants on one operator (issue #35): each tenant is a namespace with its own GitProvider
(a bare remote over file://), GitTarget, WatchRule and `--objects` ConfigMaps, as a platform team
that gives every team its own mirror sets it up.

Per tenant count prints one JSON object: the time from the operator's start until every tenant's
remote holds all of its objects, the operator's RSS, threads, open files and connections to the
API server once converged, and the latency of one change in a quiet tenant (API write returned
-> the commit on its remote), alone and while another tenant bursts `--burst` changes. Shared
2-core machines are noisy: compare within a run.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import click
import pygit2

from kubescribe.api.crds import render_crds
from kubescribe.kube.client import KubeClient
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.operator import OperatorProcess, compile_bytecode

API = "kubescribe.io/v1alpha1"
FOLDER = "mirror"


def tenant(i: int) -> str:
    return f"tenant-{i:04d}"


class TenantRemote:
    """A tenant's bare remote: one seed commit on main; read through its ref file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        repo = pygit2.init_repository(str(path), bare=True, initial_head="main")
        sig = pygit2.Signature("seed", "seed@example.invalid")
        tree = repo.TreeBuilder().write()
        self.seed = str(repo.create_commit("refs/heads/main", sig, sig, "Initial commit", tree, []))

    def tip(self) -> str:
        try:
            return (self.path / "refs" / "heads" / "main").read_text().strip()
        except FileNotFoundError:  # packed by a gc
            return str(pygit2.Repository(str(self.path)).references["refs/heads/main"].target)

    def names(self, ns: str) -> set[str]:
        """The ConfigMaps mirrored at the tip."""
        repo = pygit2.Repository(str(self.path))
        tree = repo.revparse_single("main").peel(pygit2.Tree)
        try:
            folder = tree / FOLDER / ns / "core" / "configmaps"
        except KeyError:
            return set()
        return {entry.name.removesuffix(".yaml") for entry in folder.peel(pygit2.Tree)}


def tenant_objects(ns: str, url: str) -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        {
            "apiVersion": API,
            "kind": "GitProvider",
            "metadata": {"name": "git", "namespace": ns},
            "spec": {"url": url, "push": {"commitWindow": "0s"}},
        },
        {
            "apiVersion": API,
            "kind": "GitTarget",
            "metadata": {"name": "mirror", "namespace": ns},
            "spec": {"providerRef": {"name": "git"}, "branch": "main", "path": FOLDER},
        },
        {
            "apiVersion": API,
            "kind": "WatchRule",
            "metadata": {"name": "cms", "namespace": ns},
            "spec": {
                "targetRef": {"name": "mirror"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["configmaps"],
                        "labelSelector": {"matchLabels": {"bench": "yes"}},
                    }
                ],
            },
        },
    ]


def configmap(ns: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {"bench": "yes"}},
        "data": {"v": "1"},
    }


_PATHS = {
    "Namespace": "/api/v1/namespaces",
    "ConfigMap": "/api/v1/namespaces/{ns}/configmaps",
    "GitProvider": "/apis/kubescribe.io/v1alpha1/namespaces/{ns}/gitproviders",
    "GitTarget": "/apis/kubescribe.io/v1alpha1/namespaces/{ns}/gittargets",
    "WatchRule": "/apis/kubescribe.io/v1alpha1/namespaces/{ns}/watchrules",
}


async def create_all(
    kubeconfig: Path, docs: Iterable[dict[str, Any]], concurrency: int = 32
) -> None:
    """POST every document, `concurrency` at a time, in the order given per worker."""
    client = await KubeClient.connect(kubeconfig)
    queue = list(docs)
    queue.reverse()

    async def one() -> None:
        while queue:
            doc = queue.pop()
            ns = doc["metadata"].get("namespace", "")
            await client.request("POST", _PATHS[doc["kind"]].format(ns=ns), body=doc)

    try:
        await asyncio.gather(*(one() for _ in range(concurrency)))
    finally:
        await client.close()


def api_connections(pid: int, port: int) -> int:
    """The process's established TCP connections to the API server's port (from /proc)."""
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = fd.readlink().as_posix()
        except OSError:
            continue
        if target.startswith("socket:["):
            sockets.add(target[8:-1])
    count = 0
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if fields[3] == "01" and remote_port == port and fields[9] in sockets:
                count += 1
    return count


def proc_status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return 0


def wait_converged(remotes: dict[str, TenantRemote], objects: int, timeout: float) -> float:
    """When every tenant's remote first held all its objects."""
    pending = dict(remotes)
    checked: dict[str, str] = {}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for ns, remote in list(pending.items()):
            tip = remote.tip()
            if tip != checked.get(ns) and tip != remote.seed:
                checked[ns] = tip
                if len(remote.names(ns)) >= objects:
                    del pending[ns]
        time.sleep(0.05)
    if pending:
        raise TimeoutError(f"{len(pending)} tenants did not converge (e.g. {next(iter(pending))})")
    return time.monotonic()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def one_change_latencies(
    kubeconfig: Path, ns: str, remote: TenantRemote, samples: int, prefix: str
) -> list[float]:
    client = await KubeClient.connect(kubeconfig)
    out = []
    try:
        for i in range(samples):
            name = f"{prefix}-{i}"
            await client.request(
                "POST", f"/api/v1/namespaces/{ns}/configmaps", body=configmap(ns, name)
            )
            written = time.monotonic()
            deadline = written + 120
            while name not in remote.names(ns):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} never reached {ns}'s remote")
                await asyncio.sleep(0.001)
            out.append((time.monotonic() - written) * 1000)
            await asyncio.sleep(0.2)
    finally:
        await client.close()
    return out


def summary(lat: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(statistics.median(lat), 1),
        "p99_ms": round(percentile(lat, 0.99), 1),
    }


def run_tenants(
    workdir: Path, tenants: int, objects: int, samples: int, burst: int
) -> dict[str, Any]:
    cp = ControlPlane(workdir=workdir / "cp")
    (workdir / "cp").mkdir()
    cp.start()
    operator: OperatorProcess | None = None
    try:
        cp.apply(render_crds())
        cp.kubectl("wait", "--for=condition=Established", "crd/gittargets.kubescribe.io")
        t0 = time.monotonic()
        remotes = {
            tenant(i): TenantRemote(workdir / "remotes" / f"{tenant(i)}.git")
            for i in range(tenants)
        }
        setup_docs: list[dict[str, Any]] = []
        for ns, remote in remotes.items():
            setup_docs += tenant_objects(ns, remote.path.resolve().as_uri())
        asyncio.run(create_all(cp.kubeconfig, [d for d in setup_docs if d["kind"] == "Namespace"]))
        asyncio.run(create_all(cp.kubeconfig, [d for d in setup_docs if d["kind"] != "Namespace"]))
        cms = [configmap(ns, f"cm-{j:03d}") for ns in remotes for j in range(objects)]
        asyncio.run(create_all(cp.kubeconfig, cms))
        setup_seconds = time.monotonic() - t0

        operator = OperatorProcess(cp.kubeconfig, workdir, "--log-level", "warning")
        started = time.monotonic()
        operator.start()
        assert operator.proc is not None
        pid = operator.proc.pid
        converged = wait_converged(remotes, objects, timeout=1800)
        port = int(cp.server.rsplit(":", 1)[1])
        figures: dict[str, Any] = {
            "workload": f"tenants_{tenants}",
            "tenants": tenants,
            "objects_per_tenant": objects,
            "setup_seconds": round(setup_seconds, 1),
            "converge_seconds": round(converged - started, 2),
            "rss_mb": operator.rss_mb(),
            "peak_rss_converge_mb": operator.rss_mb("VmHWM"),
            "threads": proc_status(pid, "Threads"),
            "open_files": operator.open_files(),
            "api_connections": api_connections(pid, port),
        }
        quiet = tenant(0)
        alone = asyncio.run(
            one_change_latencies(cp.kubeconfig, quiet, remotes[quiet], samples, "alone")
        )
        figures["one_change_quiet"] = summary(alone)
        if tenants > 1 and burst:
            busy = tenant(1)
            names = [configmap(busy, f"burst-{k:05d}") for k in range(burst)]
            bursting = threading.Thread(
                target=lambda: asyncio.run(create_all(cp.kubeconfig, names, concurrency=8))
            )
            bursting.start()
            during = asyncio.run(
                one_change_latencies(cp.kubeconfig, quiet, remotes[quiet], samples, "during")
            )
            bursting.join()
            figures["one_change_during_burst"] = summary(during)
            figures["burst"] = burst
        figures["peak_rss_mb"] = operator.rss_mb("VmHWM")
        figures["threads_after"] = proc_status(pid, "Threads")
        return figures
    finally:
        if operator is not None:
            operator.stop(timeout=120)
        cp.stop()


@click.command()
@click.option(
    "--tenants", default="50,200", show_default=True, help="Tenant counts, comma-separated."
)
@click.option("--objects", default=20, show_default=True, help="ConfigMaps per tenant.")
@click.option("--samples", default=20, show_default=True)
@click.option("--burst", default=2000, show_default=True, help="Changes of the busy tenant.")
def main(tenants: str, objects: int, samples: int, burst: int) -> None:
    compile_bytecode()
    for count in (int(n) for n in tenants.split(",")):
        with tempfile.TemporaryDirectory(prefix="kubescribe-tenants-") as tmp:
            print(json.dumps(run_tenants(Path(tmp), count, objects, samples, burst)), flush=True)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
