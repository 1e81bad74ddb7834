"""Mirror benchmarks (docs/performance.md has the bar of each): latency, backfill, burst, memory.

Real control plane, bare remote over file://, the operator as a separate process with no commit
window and prune Always. The clock watches the remote's branch (see `Remote.wait`), so every
figure includes the push. Prints one JSON object per workload. Shared 2-core machines are noisy:
compare within a run, report the spread.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from kubescribe.api.crds import render_crds
from kubescribe.kube.client import KubeClient
from kubescribe.mirror.sanitize import sanitize
from kubescribe.mirror.yamlfmt import dump_yaml, order_document
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from kubescribe_devenv.operator import OperatorProcess, compile_bytecode
from kubescribe_devenv.redis import RedisServer

NS = "bench"
FOLDER = "mirror"


def blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def cm(name: str, value: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS, "labels": {"bench": "yes"}},
        "data": {"v": value},
    }


def expected_oid(name: str, value: str) -> str:
    return blob_oid(dump_yaml(order_document(sanitize(cm(name, value)))).encode())


class Remote:
    def __init__(self, remote: BareRemote) -> None:
        self.remote = remote
        self.dir = f"{FOLDER}/{NS}/core/configmaps/"

    def tip(self) -> str:
        """The branch tip as the remote's ref file has it (a read, no process to start)."""
        try:
            return (self.remote.path / "refs" / "heads" / "main").read_text().strip()
        except FileNotFoundError:
            return self.remote.tip() or ""

    def tree(self, commit: str = "main") -> dict[str, str]:
        """name -> blob oid of the mirrored ConfigMaps at `commit` (the branch tip)."""
        done = subprocess.run(
            ["git", "ls-tree", commit, self.dir],
            cwd=self.remote.path,
            capture_output=True,
            text=True,
            check=False,
        )
        out: dict[str, str] = {}
        for line in done.stdout.splitlines():
            meta, path = line.split("\t", 1)
            out[path.rsplit("/", 1)[1].removesuffix(".yaml")] = meta.split()[2]
        return out

    def wait(
        self, check: Callable[[dict[str, str]], bool], timeout: float, every: float = 0.0005
    ) -> float:
        """When the branch first pointed at a commit whose tree passes `check`: the ref file is
        read every `every` seconds, and each new tip's tree is listed once. (Listing the tip
        with git every 5 ms instead added up to 8 ms to each figure, and took a core.)"""
        deadline = time.monotonic() + timeout
        checked = None
        while time.monotonic() < deadline:
            tip = self.tip()
            if tip != checked:
                moved = time.monotonic()
                if tip and check(self.tree(tip)):
                    return moved
                checked = tip
            time.sleep(every)
        raise TimeoutError("the remote did not converge in time")

    def commits(self) -> int:
        out = subprocess.run(
            ["git", "rev-list", "--count", "main"],
            cwd=self.remote.path,
            capture_output=True,
            text=True,
            check=True,
        )
        return int(out.stdout)


class Setup:
    """Control plane, remote, kubescribe objects; the operator started on demand."""

    def __init__(self, workdir: Path, content: str = "Owned") -> None:
        self.workdir = workdir
        self.content = content
        (workdir / "cp").mkdir()
        self.cp = ControlPlane(workdir=workdir / "cp")
        self.cp.start()
        self.remote = Remote(BareRemote.create(workdir / "remote.git"))
        self.cp.apply(render_crds())
        self.cp.kubectl("wait", "--for=condition=Established", "crd/gittargets.kubescribe.io")
        self.cp.kubectl("create", "namespace", NS)
        self.operator: OperatorProcess | None = None

    def mirror_objects(self) -> None:
        api = "kubescribe.io/v1alpha1"
        docs = [
            {
                "apiVersion": api,
                "kind": "GitProvider",
                "metadata": {"name": "git", "namespace": NS},
                "spec": {"url": self.remote.remote.url, "push": {"commitWindow": "0s"}},
            },
            {
                "apiVersion": api,
                "kind": "GitTarget",
                "metadata": {"name": "mirror", "namespace": NS},
                "spec": {
                    "providerRef": {"name": "git"},
                    "branch": "main",
                    "path": FOLDER,
                    "prune": {"mode": "Always"},
                    "content": {"mode": self.content},
                },
            },
            {
                "apiVersion": api,
                "kind": "WatchRule",
                "metadata": {"name": "cms", "namespace": NS},
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
        self.cp.apply("\n---\n".join(json.dumps(d) for d in docs))

    def start_operator(self, *extra: str) -> float:
        started = time.monotonic()
        self.operator = OperatorProcess(
            self.cp.kubeconfig, self.workdir, "--log-level", "warning", *extra
        )
        self.operator.start()
        return started

    def rss_mb(self, field: str = "VmRSS") -> float:
        assert self.operator is not None
        return self.operator.rss_mb(field)

    def close(self) -> None:
        if self.operator is not None:
            self.operator.stop(timeout=60)
        self.cp.stop()


async def create_many(
    kubeconfig: Path, names: list[str], value: str, concurrency: int = 32
) -> None:
    client = await KubeClient.connect(kubeconfig)
    queue = list(names)

    async def one() -> None:
        while queue:
            await client.request(
                "POST", f"/api/v1/namespaces/{NS}/configmaps", body=cm(queue.pop(), value)
            )

    try:
        await asyncio.gather(*(one() for _ in range(concurrency)))
    finally:
        await client.close()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def kustomize_folder(setup: Setup, listed: int = 200) -> None:
    """Make the target folder a kustomization: `namespace:`, an `images:` entry and `listed`
    Services (a type the bench does not watch) in its `resources:`."""
    scratch = setup.workdir / "seed"
    subprocess.run(["git", "clone", "-q", str(setup.remote.remote.path), str(scratch)], check=True)
    services = scratch / FOLDER / "services"
    services.mkdir(parents=True)
    entries = []
    for i in range(listed):
        svc = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"svc-{i:04d}"},
            "spec": {"ports": [{"port": 80}]},
        }
        (services / f"svc-{i:04d}.yaml").write_text(dump_yaml(order_document(svc)))
        entries.append(f"  - services/svc-{i:04d}.yaml  # a service\n")
    (scratch / FOLDER / "kustomization.yaml").write_text(
        "# the bench folder\nnamespace: bench\nimages:\n  - name: nginx\n    newTag: '1'\n"
        "resources:\n" + "".join(entries)
    )
    for args in (["add", "."], ["commit", "-qm", "kustomization"], ["push", "-q"]):
        subprocess.run(["git", *args], cwd=scratch, check=True)


def latency(
    setup: Setup,
    samples: int,
    pause_after: float,
    *,
    isolated: bool,
    kustomized: bool = False,
) -> dict[str, Any]:
    if kustomized:
        kustomize_folder(setup)
    setup.mirror_objects()
    setup.start_operator()
    asyncio.run(create_many(setup.cp.kubeconfig, ["warm-up"], "1"))
    setup.remote.wait(lambda t: "warm-up" in t, 60)
    commits_before = setup.remote.commits()

    async def measure() -> list[float]:
        client = await KubeClient.connect(setup.cp.kubeconfig)
        lat = []
        try:
            for i in range(samples):
                name = f"lat-{i}"
                await client.request(
                    "POST", f"/api/v1/namespaces/{NS}/configmaps", body=cm(name, "1")
                )
                done = time.monotonic()
                seen = setup.remote.wait(lambda t, n=name: n in t, 30)
                lat.append((seen - done) * 1000)
                await asyncio.sleep(pause_after)
        finally:
            await client.close()
        return lat

    lat = asyncio.run(measure())
    commits = setup.remote.commits() - commits_before
    return {
        "workload": ("latency_isolated" if isolated else "latency_stream")
        + ("_kustomized" if kustomized else ""),
        "samples": samples,
        "p50_ms": round(statistics.median(lat), 1),
        "p99_ms": round(percentile(lat, 0.99), 1),
        "max_ms": round(max(lat), 1),
        "commits_per_change": round(commits / samples, 2),
    }


def backfill(setup: Setup, n: int) -> dict[str, Any]:
    names = [f"bf-{i:06d}" for i in range(n)]
    t0 = time.monotonic()
    asyncio.run(create_many(setup.cp.kubeconfig, names, "1"))
    created = time.monotonic() - t0
    setup.mirror_objects()
    started = setup.start_operator()
    seen = setup.remote.wait(lambda t: len(t) >= n, 1800, every=0.05)
    return {
        "workload": f"backfill_{n}",
        "objects": n,
        "seconds": round(seen - started, 2),
        "rss_mb": setup.rss_mb(),
        "peak_rss_mb": setup.rss_mb("VmHWM"),
        "create_seconds": round(created, 1),
        "commits": setup.remote.commits() - 1,
    }


def hand_formatted(name: str, value: str) -> str:
    """A ConfigMap as a person writes it: a comment, another key order, double quotes, four
    spaces of indentation."""
    return (
        f"# {name}: kept by hand\n"
        f"kind: ConfigMap\napiVersion: v1\nmetadata:\n    namespace: {NS}\n    name: {name}\n"
        f'    labels: {{bench: "yes"}}\ndata:\n    v: "{value}"   # the value\n'
    )


def seed_repository(setup: Setup, names: list[str]) -> str:
    """One foreign commit with a hand-formatted file per object (a third of the objects in
    two-document files, half of the rest as `.yml`); returns the commit."""
    work = setup.workdir / "seed"
    remote = setup.remote.remote
    subprocess.run(["git", "clone", "-q", str(remote.path), str(work)], check=True)
    folder = work / FOLDER / "team"
    folder.mkdir(parents=True)
    third = len(names) // 3
    pairs, singles = names[: third - third % 2], names[third - third % 2 :]
    for a, b in zip(pairs[::2], pairs[1::2], strict=True):
        text = hand_formatted(a, "1") + "---\n" + hand_formatted(b, "1")
        (folder / f"{a}-and-{b}.yaml").write_text(text)
    for i, name in enumerate(singles):
        (folder / f"{name}.{'yml' if i % 2 else 'yaml'}").write_text(hand_formatted(name, "1"))
    git = ["git", "-c", "user.name=people", "-c", "user.email=people@example.invalid"]
    subprocess.run([*git, "add", "-A"], cwd=work, check=True)
    subprocess.run([*git, "commit", "-qm", "Hand-kept manifests"], cwd=work, check=True)
    subprocess.run([*git, "push", "-q", "origin", "HEAD:main"], cwd=work, check=True)
    tip = remote.tip()
    assert tip is not None
    return tip


def adopt(setup: Setup, n: int) -> dict[str, Any]:
    """First start on a repository that already holds every object, hand-formatted: how long
    until the target is converged (Ready, every document indexed), and what it committed."""
    names = [f"ad-{i:06d}" for i in range(n)]
    asyncio.run(create_many(setup.cp.kubeconfig, names, "1"))
    seeded = seed_repository(setup, names)
    setup.mirror_objects()
    started = setup.start_operator()

    def converged() -> bool:
        status = setup.cp.get_json("gittarget", "mirror", "-n", NS).get("status") or {}
        ready = [c for c in status.get("conditions", []) if c["type"] == "Ready"]
        return bool(ready) and ready[0]["status"] == "True" and status.get("documents") == n

    deadline = time.monotonic() + 600
    while not converged():
        if time.monotonic() > deadline:
            raise TimeoutError("the target did not converge in time")
        time.sleep(0.1)
    seen = time.monotonic()
    tip = setup.remote.remote.tip()
    changed = subprocess.run(
        ["git", "diff", "--name-only", seeded, "main"],
        cwd=setup.remote.remote.path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return {
        "workload": f"adopt_{n}",
        "objects": n,
        "files": len(setup.remote.remote.files()),
        "converged_seconds": round(seen - started, 2),
        "commits": int(
            subprocess.run(
                ["git", "rev-list", "--count", f"{seeded}..{tip}"],
                cwd=setup.remote.remote.path,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        ),
        "changed_files": len(changed),
        "rss_mb": setup.rss_mb(),
    }


def crash(setup: Setup, n: int) -> dict[str, Any]:
    """kill -9 in the middle of a backfill; the next start must converge to all N objects."""
    names = [f"cr-{i:06d}" for i in range(n)]
    asyncio.run(create_many(setup.cp.kubeconfig, names, "1"))
    setup.mirror_objects()
    setup.start_operator()
    time.sleep(1.5)  # the benchmark's point: die while the snapshot is being built
    assert setup.operator is not None
    setup.operator.kill()
    files_after_kill = len(setup.remote.tree())
    restarted = setup.start_operator()
    seen = setup.remote.wait(lambda t: len(t) >= n, 600, every=0.05)
    return {
        "workload": f"crash_{n}",
        "objects": n,
        "files_after_kill": files_after_kill,
        "converged_after_restart_s": round(seen - restarted, 2),
        "files": len(setup.remote.tree()),
    }


def metric_total(operator: OperatorProcess, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in operator.metrics().splitlines()
        if line.startswith(name)
    )


def cpu_seconds(operator: OperatorProcess) -> float:
    """User and system CPU time the operator (all its threads) has used so far."""
    assert operator.proc is not None
    stat = Path(f"/proc/{operator.proc.pid}/stat").read_text()
    fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_serving(operator: OperatorProcess, timeout: float) -> float:
    """When `/healthz` first answered: the operator serves it just before `operator.started`,
    once its imports, API client and attribution are up and before the first watch."""
    url = f"http://127.0.0.1:{operator.metrics_port}/healthz"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=1):
            return time.monotonic()
        time.sleep(0.01)
    raise TimeoutError("the operator did not serve /healthz in time")


@contextlib.contextmanager
def cpu_hogs(count: int) -> Iterator[None]:
    """`count` processes that each keep a core busy, for figures on a loaded machine."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def wait_metric(setup: Setup, name: str, at_least: float, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            assert setup.operator is not None
            if metric_total(setup.operator, name) >= at_least:
                return
        time.sleep(0.05)
    raise TimeoutError(f"{name} did not reach {at_least}")


def warm_restart(
    setup: Setup, n: int, changed: int = 10, deleted: int = 5, restarts: int = 1
) -> dict[str, Any]:
    """A replica with saved resume cursors restarts after changes made while it was down:
    it watches from the saved resourceVersion instead of listing N objects again. Each of
    `restarts` rounds changes and deletes other objects; the figures are the median round's,
    with every round's in `*_each_s`. The operator's CPU seconds until it caught up tell
    its own work from waiting for a busy machine; SIGTERM to exit is the other half of a
    rolling restart."""
    names = [f"wr-{i:06d}" for i in range(n)]
    asyncio.run(create_many(setup.cp.kubeconfig, names, "1"))
    serving, caught_up, cpu, events, stops = [], [], [], [], []
    with tempfile.TemporaryDirectory(prefix="kubescribe-bench-redis-") as tmp:
        redis = RedisServer(Path(tmp))
        redis.start()
        try:
            flags = ("--replica-id", "bench-1", "--lease-namespace", NS, "--redis-url", redis.url)
            setup.mirror_objects()
            setup.start_operator(*flags)
            setup.remote.wait(lambda t: len(t) >= n, 600, every=0.05)
            for round_ in range(restarts):
                wait_metric(setup, 'kubescribe_cursor_saves_total{result="ok"}', 1, 60)
                assert setup.operator is not None
                stopping = time.perf_counter()
                setup.operator.stop(timeout=60)
                stops.append(time.perf_counter() - stopping)
                first = round_ * (changed + deleted)
                value = str(round_ + 2)
                patch = json.dumps({"data": {"v": value}})
                for name in names[first : first + changed]:
                    setup.cp.kubectl("patch", "configmap", name, "-n", NS, "-p", patch)
                gone = set(names[first + changed : first + changed + deleted])
                for name in sorted(gone):
                    setup.cp.kubectl("delete", "configmap", name, "-n", NS)
                want = {name: expected_oid(name, value) for name in names[first : first + changed]}
                restarted = setup.start_operator(*flags)
                serving.append(wait_serving(setup.operator, 60) - restarted)
                seen = setup.remote.wait(
                    lambda t, want=want, gone=gone: (
                        all(t.get(k) == v for k, v in want.items()) and not gone & set(t)
                    ),
                    600,
                    every=0.02,
                )
                cpu.append(cpu_seconds(setup.operator))
                caught_up.append(seen - restarted)
                events.append(metric_total(setup.operator, "kubescribe_watch_events_total"))
        finally:
            if setup.operator is not None:
                setup.operator.stop(timeout=60)  # before Redis goes
            redis.stop()
    median = sorted(range(restarts), key=caught_up.__getitem__)[restarts // 2]
    return {
        "workload": f"warm_restart_{n}",
        "objects": n,
        "changed_while_down": changed,
        "deleted_while_down": deleted,
        "restarts": restarts,
        "serving_after_restart_s": round(serving[median], 2),
        "caught_up_after_restart_s": round(caught_up[median], 2),
        "cpu_until_caught_up_s": round(cpu[median], 2),
        "sigterm_to_exit_s": round(statistics.median(stops), 2),
        "watch_events_after_restart": int(events[median]),
        "serving_each_s": [round(v, 2) for v in serving],
        "caught_up_each_s": [round(v, 2) for v in caught_up],
        "cpu_each_s": [round(v, 2) for v in cpu],
        "sigterm_to_exit_each_s": [round(v, 2) for v in stops],
    }


def burst(setup: Setup, objects: int, patches: int, writers: int) -> dict[str, Any]:
    setup.mirror_objects()
    setup.start_operator()
    names = [f"burst-{i:03d}" for i in range(objects)]
    asyncio.run(create_many(setup.cp.kubeconfig, names, "0"))
    setup.remote.wait(lambda t: len(t) >= objects, 60)
    commits_before = setup.remote.commits()
    final: dict[str, str] = {}

    async def patch_all() -> float:
        client = await KubeClient.connect(setup.cp.kubeconfig)
        counter = iter(range(patches))

        async def writer() -> None:
            for i in counter:
                name = names[i % objects]
                value = f"{i}"
                await client.merge_patch(
                    f"/api/v1/namespaces/{NS}/configmaps/{name}", {"data": {"v": value}}
                )
                final[name] = value

        t0 = time.monotonic()
        try:
            await asyncio.gather(*(writer() for _ in range(writers)))
        finally:
            await client.close()
        return t0

    t0 = asyncio.run(patch_all())
    last_write = time.monotonic()
    want = {n: expected_oid(n, v) for n, v in final.items()}
    converged = setup.remote.wait(lambda t: all(t.get(n) == oid for n, oid in want.items()), 120)
    return {
        "workload": "burst",
        "objects": objects,
        "patches": patches,
        "writes_per_second": round(patches / (last_write - t0), 1),
        "converged_after_last_write_s": round(converged - last_write, 3),
        "end_to_end_changes_per_second": round(patches / (converged - t0), 1),
        "commits": setup.remote.commits() - commits_before,
        "lost": 0,
    }


def slope_per_hour(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, value) samples, per hour."""
    n = len(samples)
    mean_t = sum(t for t, _ in samples) / n
    mean_v = sum(v for _, v in samples) / n
    var = sum((t - mean_t) ** 2 for t, _ in samples)
    cov = sum((t - mean_t) * (v - mean_v) for t, v in samples)
    return cov / var * 3600 if var else 0.0


class ServerMaintenance:
    """`git gc --auto` on the remote every `every` seconds, as git's receive-pack runs it
    after each push. libgit2's file:// push never does, so without this the remote gains a
    pack per push for good: each push then opens every pack (75 ms per push after 3,000) and
    the operator's memory and open files grow with the remote's pile, not with its own state.
    A real SSH or HTTPS server keeps its packs few in this way."""

    def __init__(self, path: Path, every: float = 2.0) -> None:
        self.path = path
        self.every = every
        self.stopped = threading.Event()
        self.runs = 0
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> ServerMaintenance:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopped.set()
        self.thread.join()

    def _loop(self) -> None:
        while not self.stopped.wait(self.every):
            subprocess.run(["git", "-C", str(self.path), "gc", "--auto", "--quiet"], check=False)
            self.runs += 1


def soak(setup: Setup, minutes: float, rate: float = 1.0, objects: int = 100) -> dict[str, Any]:
    """`rate` changes per second for `minutes`; RSS and open files sampled each minute. The
    slope is taken after a warm-up of a fifth of the run (at least one minute). The remote is
    maintained as a server maintains it (`ServerMaintenance`)."""
    setup.mirror_objects()
    setup.start_operator()
    assert setup.operator is not None
    names = [f"soak-{i:03d}" for i in range(objects)]
    asyncio.run(create_many(setup.cp.kubeconfig, names, "0"))
    setup.remote.wait(lambda t: len(t) >= objects, 60)
    commits_before = setup.remote.commits()
    rss: list[tuple[float, float]] = []
    anon: list[tuple[float, float]] = []  # RSS less the mapped pack files (page cache)
    fds: list[tuple[float, float]] = []

    async def drive() -> int:
        client = await KubeClient.connect(setup.cp.kubeconfig)
        start = time.monotonic()
        changes = 0
        try:
            while (elapsed := time.monotonic() - start) < minutes * 60:
                name = names[changes % objects]
                await client.merge_patch(
                    f"/api/v1/namespaces/{NS}/configmaps/{name}", {"data": {"v": str(changes)}}
                )
                changes += 1
                if len(rss) <= elapsed // 60:
                    assert setup.operator is not None
                    rss.append((elapsed, setup.rss_mb()))
                    anon.append((elapsed, setup.rss_mb("RssAnon")))
                    fds.append((elapsed, float(setup.operator.open_files())))
                await asyncio.sleep(max(0.0, start + changes / rate - time.monotonic()))
        finally:
            await client.close()
        return changes

    with ServerMaintenance(setup.remote.remote.path):
        changes = asyncio.run(drive())
    last = changes - 1
    want = expected_oid(names[last % objects], str(last))
    setup.remote.wait(lambda t: t.get(names[last % objects]) == want, 60)
    warm = max(1, len(rss) // 5)
    return {
        "workload": "soak",
        "minutes": minutes,
        "rate": rate,
        "changes": changes,
        "commits": setup.remote.commits() - commits_before,
        "rss_mb_first_last": [rss[warm][1], rss[-1][1]] if len(rss) > warm else None,
        "rss_mb_per_hour": round(slope_per_hour(rss[warm:]), 2) if len(rss) > warm + 1 else None,
        "anon_rss_mb_first_last": [anon[warm][1], anon[-1][1]] if len(anon) > warm else None,
        "anon_rss_mb_per_hour": round(slope_per_hour(anon[warm:]), 2)
        if len(anon) > warm + 1
        else None,
        "open_files_first_last": [fds[warm][1], fds[-1][1]] if len(fds) > warm else None,
        "open_files_per_hour": round(slope_per_hour(fds[warm:]), 2)
        if len(fds) > warm + 1
        else None,
        "cache_packs": int(metric_total(setup.operator, "kubescribe_cache_packs")),
        "libgit2_cached_mb": round(
            metric_total(setup.operator, "kubescribe_libgit2_cached_bytes") / 2**20, 1
        ),
        "cache_tidies": int(metric_total(setup.operator, "kubescribe_cache_repacks_total")),
        "remote_packs": len(list((setup.remote.remote.path / "objects" / "pack").glob("*.idx"))),
        "anon_rss_mb_each_minute": [round(v, 1) for _, v in anon],
    }


Run = Callable[[Setup], dict[str, Any]]


def _workloads(
    samples: int, sizes: str, soak_minutes: float, soak_rate: float, restarts: int
) -> dict[str, list[tuple[str, Run]]]:
    """Each workload's runs (named as their figures are), in the order they run."""
    return {
        "latency_isolated": [
            ("latency_isolated", lambda s: latency(s, samples, 6.0, isolated=True))
        ],
        "latency_stream": [("latency_stream", lambda s: latency(s, samples, 0.3, isolated=False))],
        "latency_stream_kustomized": [
            (
                "latency_stream_kustomized",
                lambda s: latency(s, samples, 0.3, isolated=False, kustomized=True),
            )
        ],
        "backfill": [
            (f"backfill_{n}", lambda s, n=n: backfill(s, n))
            for n in (int(x) for x in sizes.split(",") if x)
        ],
        "crash": [("crash", lambda s: crash(s, 10000))],
        "burst": [("burst", lambda s: burst(s, 100, 2000, 16))],
        "warm_restart": [("warm_restart", lambda s: warm_restart(s, 10000, restarts=restarts))],
        "adopt": [("adopt", lambda s: adopt(s, 10000))],
        "soak": [("soak", lambda s: soak(s, soak_minutes, soak_rate))],
    }


@click.command()
@click.argument("workloads", nargs=-1)
@click.option("--samples", default=20, show_default=True)
@click.option("--backfill", "sizes", default="1000,10000", show_default=True)
@click.option(
    "--content",
    "contents",
    default="Owned",
    show_default=True,
    help="GitTarget content mode(s), comma-separated (Owned,Full): each workload runs once per"
    " mode, alternating.",
)
@click.option("--soak-minutes", default=30.0, show_default=True)
@click.option("--soak-rate", default=1.0, show_default=True, help="changes per second")
@click.option(
    "--hog",
    default=0,
    show_default=True,
    help="Busy processes (one core each) running beside every workload: figures on a loaded "
    "machine.",
)
@click.option(
    "--restarts",
    default=1,
    show_default=True,
    help="warm_restart: restarts in a row on one setup (figures: the median restart's).",
)
def main(
    workloads: tuple[str, ...],
    samples: int,
    sizes: str,
    contents: str,
    soak_minutes: float,
    soak_rate: float,
    hog: int,
    restarts: int,
) -> None:
    """WORKLOADS: any of latency_isolated latency_stream latency_stream_kustomized backfill
    burst crash warm_restart adopt soak (default: all but soak; backfill 50000 and soak are
    the long-run workloads: --backfill 50000, soak --soak-minutes 30)."""
    chosen = workloads or (
        "latency_isolated",
        "latency_stream",
        "latency_stream_kustomized",
        "backfill",
        "burst",
        "crash",
        "warm_restart",
        "adopt",
    )
    table = _workloads(samples, sizes, soak_minutes, soak_rate, restarts)
    runs = [run for name, named in table.items() if name in chosen for run in named]
    modes = [m for m in contents.split(",") if m]
    compile_bytecode()  # start from bytecode, as the image does
    for _, run in runs:
        for mode in modes:
            with tempfile.TemporaryDirectory(prefix="kubescribe-bench-") as tmp:
                setup = Setup(Path(tmp), mode)
                try:
                    with cpu_hogs(hog):
                        figures = run(setup)
                    click.echo(json.dumps({**figures, "content": mode, "hog": hog}), nl=True)
                finally:
                    setup.close()


if __name__ == "__main__":
    main()
