"""Several replicas share the branch writers through Leases; a lost replica loses nothing.

Real control plane, real Redis (resume cursors), a real bare remote. Every target uses the
`OnEvent` prune mode, so what the new owner of a branch writes after a failover comes from the
saved cursors (a watch resumed from the last pushed resourceVersion), not from a sweep.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.redis import RedisServer
from tests.manifests import configmap, provider, target, watch_rule
from tests.support import Operator, manifest, record_figure, wait_for

pytestmark = pytest.mark.controlplane

BRANCHES = [f"shard-{i}" for i in range(6)]


@pytest.fixture
def replicas(
    crds: ControlPlane, tmp_path: Path, namespace: str, redis_server: RedisServer
) -> Iterator[Callable[[str], Operator]]:
    started: list[Operator] = []

    def start(replica: str) -> Operator:
        op = Operator(
            crds,
            tmp_path / replica,
            f"--replica-id={replica}",
            f"--lease-namespace={namespace}",
            f"--redis-url={redis_server.url}",
        ).start()
        started.append(op)
        return op

    yield start
    for op in started:
        op.stop()
    crds.kubectl(
        "delete", "gitproviders,gittargets,watchrules", "--all", "-n", namespace, check=False
    )


def sees_all(ops: dict[str, Operator]) -> bool:
    """Every replica counts every other as live (so none takes a writer it would hand over)."""
    for op in ops.values():
        lines = [x for x in op.metrics().splitlines() if x.startswith("kubescribe_live_replicas ")]
        if not lines or float(lines[0].split()[1]) != len(ops):
            return False
    return True


def writer_owners(cp: ControlPlane, ns: str) -> dict[str, str]:
    """branch -> holder of its writer Lease, for the writers of this namespace's targets (the
    replicas also write what earlier tests left in other namespaces of the control plane)."""
    leases = cp.get_json("leases", "-n", ns, "-l", "kubescribe.io/lease=writer")["items"]
    out = {}
    for lease in leases:
        namespace, *_, branch = lease["metadata"]["annotations"]["kubescribe.io/writer"].split(" ")
        if namespace == ns:
            out[branch] = lease["spec"].get("holderIdentity") or ""
    return out


def members(cp: ControlPlane, ns: str) -> set[str]:
    leases = cp.get_json("leases", "-n", ns, "-l", "kubescribe.io/lease=member")["items"]
    return {lease["spec"].get("holderIdentity") or "" for lease in leases}


def shard_targets(ns: str, url: str) -> str:
    docs: list[dict[str, Any]] = [provider("git", ns, url)]
    for branch in BRANCHES:
        docs.append(target(branch, ns, "git", "mirror", branch=branch, prune={"mode": "OnEvent"}))
        rule = {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "labelSelector": {"matchLabels": {"shard": branch}},
        }
        docs.append(watch_rule(branch, ns, branch, rule))
    return manifest(*docs)


def live(cp: ControlPlane, ns: str, branch: str) -> dict[str, Any]:
    items = cp.get_json("configmaps", "-n", ns, "-l", f"shard={branch}")["items"]
    return {i["metadata"]["name"]: i.get("data") or {} for i in items}


def mirrored(remote: BareRemote, ns: str, branch: str) -> dict[str, Any]:
    if remote.tip(branch) is None:
        return {}
    prefix = f"mirror/{ns}/core/configmaps/"
    out = {}
    for path in remote.files(branch):
        if path.startswith(prefix):
            doc = yaml.safe_load(remote.read(path, branch))
            out[doc["metadata"]["name"]] = doc.get("data") or {}
    return out


def assert_converged(cp: ControlPlane, remote: BareRemote, ns: str, timeout: float = 60) -> None:
    for branch in BRANCHES:
        wait_for(
            lambda b=branch: mirrored(remote, ns, b) == live(cp, ns, b),  # type: ignore[misc]
            timeout=timeout,
            interval=0.5,
            what=f"branch {branch} converged",
        )


def assert_clean_history(remote: BareRemote) -> None:
    for branch in BRANCHES:
        merges = git("rev-list", "--min-parents=2", branch, cwd=remote.path).strip()
        assert merges == "", f"{branch} has merges"
        # A change applied twice would be a commit that changes nothing.
        for line in git("log", "--format=%H %T %P", branch, cwd=remote.path).splitlines():
            sha, tree, *parents = line.split()
            if parents:
                parent_tree = git("rev-parse", f"{parents[0]}^{{tree}}", cwd=remote.path).strip()
                assert parent_tree != tree, f"{branch}: empty commit {sha[:12]}"


def pushes_by_replica(ops: dict[str, Operator]) -> dict[str, str]:
    """commit sha -> the replica that pushed it (from each replica's structured log)."""
    out: dict[str, str] = {}
    for name, op in ops.items():
        for line in op.logs().splitlines():
            if '"target.pushed"' in line:
                sha = line.split('"commit": "')[1].split('"')[0]
                assert out.get(sha, name) == name, f"{sha} pushed by {out[sha]} and {name}"
                out[sha] = name
    return out


def burst(cp: ControlPlane, ns: str, rounds: int, stop: threading.Event | None = None) -> None:
    for r in range(rounds):
        if stop is not None and stop.is_set():
            return
        docs = [
            configmap(f"cm-{i}", ns, {"round": str(r)}, shard=branch)
            for branch in BRANCHES
            for i in range(2)
        ]
        cp.apply(manifest(*docs))


# Each SIGTERMs every replica in turn: 12 SIGTERMs in a row (KUBESCRIBE_ROLLING_RESTARTS=10 for
# the long run in the closing notes of #29).
ROLLING_RESTARTS = int(os.environ.get("KUBESCRIBE_ROLLING_RESTARTS", "4"))


def churn(cp: ControlPlane, ns: str, stop: threading.Event) -> None:
    """Create and delete ConfigMaps on every branch until `stop`: each round creates new names
    and deletes those of two rounds ago, so no name is ever created again once deleted."""
    r = 0
    while not stop.is_set():
        cp.apply(
            manifest(
                *(
                    configmap(f"churn-{r}-{i}-{branch}", ns, {"v": "1"}, shard=branch, round=str(r))
                    for branch in BRANCHES
                    for i in range(2)
                )
            )
        )
        if r >= 2:
            cp.kubectl("delete", "configmap", "-n", ns, "-l", f"round={r - 2}", "--wait=false")
        r += 1


def assert_no_resurrection(remote: BareRemote, prefix: str) -> None:
    """No commit adds a file an earlier commit of the branch deleted, among the ConfigMaps
    whose names start with `prefix` (names the test never creates again once deleted; `burst`
    moves its ConfigMaps between branches, so they do come back)."""
    for branch in BRANCHES:
        deleted: set[str] = set()
        log = git("log", "--reverse", "--format=@%H", "--name-status", branch, cwd=remote.path)
        sha = ""
        for line in log.splitlines():
            if line.startswith("@"):
                sha = line[1:13]
            elif line:
                status, path = line.split("\t", 1)
                if not path.rpartition("/")[2].startswith(prefix):
                    continue
                if status == "D":
                    deleted.add(path)
                elif status == "A":
                    assert path not in deleted, f"{branch}: {sha} brings back {path}"


def assert_released(cp: ControlPlane, ns: str, op: Operator, name: str) -> None:
    """It exited 0 (not the watchdog's overrun code) and gave its Leases back on the way out:
    none still names it, as an expired one would."""
    assert op.proc is not None
    overran = [line for line in op.logs().splitlines() if "operator.stop_overran" in line]
    assert op.proc.returncode == 0, f"{name} exited {op.proc.returncode}: {overran}"
    assert not overran, overran
    assert name not in writer_owners(cp, ns).values(), f"{name} left a writer Lease to expire"
    assert name not in members(cp, ns)


def test_a_killed_replica_is_replaced_and_nothing_is_lost(
    crds: ControlPlane,
    namespace: str,
    replicas: Callable[[str], Operator],
    tmp_path: Path,
) -> None:
    cp, ns = crds, namespace
    remote = BareRemote.create(tmp_path / "remote.git")
    ops = {name: replicas(name) for name in ("r1", "r2", "r3")}
    wait_for(lambda: members(cp, ns) == set(ops), timeout=30, what="three members")
    wait_for(lambda: sees_all(ops), timeout=30, what="every replica sees the others")
    cp.apply(shard_targets(ns, remote.url))
    wait_for(lambda: len(writer_owners(cp, ns)) == 6, timeout=60, what="six writer Leases")
    owners = wait_for(lambda: (o := writer_owners(cp, ns)) and all(o.values()) and o, timeout=30)
    assert set(owners.values()) <= set(ops)
    burst(cp, ns, 2)
    assert_converged(cp, remote, ns)

    # The replica with the most branches dies in the middle of a burst, with deletes queued
    # right after: nobody owns its branches until the Leases expire.
    victim = max(ops, key=lambda r: sum(1 for o in owners.values() if o == r))
    victim_branches = [b for b, o in owners.items() if o == victim]
    doomed = [configmap(f"doomed-{b}", ns, {"v": "1"}, shard=b) for b in victim_branches]
    cp.apply(manifest(*doomed))
    wait_for(
        lambda: all(f"doomed-{b}" in mirrored(remote, ns, b) for b in victim_branches),
        timeout=30,
        what="doomed ConfigMaps mirrored",
    )
    writer = threading.Thread(target=burst, args=(cp, ns, 6))
    writer.start()
    time.sleep(0.3)  # the burst is under way (not a wait for a result)
    ops[victim].kill()
    for b in victim_branches:
        cp.kubectl("delete", "configmap", f"doomed-{b}", "-n", ns)
    writer.join()

    def taken_over() -> bool:
        current = writer_owners(cp, ns)
        return all(current[b] not in ("", victim) for b in victim_branches)

    # Taken over once the Leases expire (10 s) plus a renewal; the time is bench/ material.
    wait_for(taken_over, timeout=60, interval=0.2, what="branches taken over")
    assert_converged(cp, remote, ns)
    for b in victim_branches:  # deleted while no replica owned the branch (OnEvent)
        assert f"doomed-{b}" not in mirrored(remote, ns, b)
    assert_clean_history(remote)
    assert_no_resurrection(remote, "doomed-")
    pushed = pushes_by_replica(ops)
    for branch in BRANCHES:
        commits = git("rev-list", "--reverse", branch, cwd=remote.path).split()[1:]
        writers = [pushed[c] for c in commits if c in pushed]
        runs = [w for i, w in enumerate(writers) if i == 0 or writers[i - 1] != w]
        assert len(runs) <= 2, f"{branch} written by {runs}"  # the owner, then its successor


@pytest.mark.timeout(1800)  # up to 30 restarts, each a process start and a rejoin
def test_rolling_restarts_during_a_stream_exit_cleanly_and_echo_nothing(
    crds: ControlPlane,
    namespace: str,
    replicas: Callable[[str], Operator],
    tmp_path: Path,
) -> None:
    cp, ns = crds, namespace
    remote = BareRemote.create(tmp_path / "remote.git")
    ops = {name: replicas(name) for name in ("r1", "r2", "r3")}
    wait_for(lambda: members(cp, ns) == set(ops), timeout=30, what="three members")
    cp.apply(shard_targets(ns, remote.url))
    wait_for(lambda: len(writer_owners(cp, ns)) == 6, timeout=60, what="six writer Leases")
    stop = threading.Event()
    writer = threading.Thread(target=churn, args=(cp, ns, stop))
    writer.start()
    slowest = 0.0
    try:
        for _ in range(ROLLING_RESTARTS):
            for name in list(ops):
                started = time.monotonic()
                ops[name].stop()  # SIGTERM: flush, push, save cursors, release the Leases
                slowest = max(slowest, time.monotonic() - started)
                assert_released(cp, ns, ops[name], name)
                ops[name] = replicas(name)
                wait_for(lambda: members(cp, ns) == set(ops), timeout=30, what="rejoined")
    finally:
        stop.set()
        writer.join()
    record_figure("slowest_sigterm_to_exit", slowest, "replicas")
    assert_converged(cp, remote, ns, timeout=90)
    assert_clean_history(remote)
    assert_no_resurrection(remote, "churn-")
