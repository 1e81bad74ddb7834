"""What an operator of kubescribe sees: per-target series that only the replica writing a target
exports (gone after a hand-over or a deletion, so sums over replicas count each target once),
and Kubernetes Events on the GitTarget for a hand-over, a refused document and a push after an
outage. Real control plane, real operator processes, a real bare remote."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kubescribe.api import events as ev
from kubescribe.controller.plan import WorkerKey
from kubescribe.controller.sharding import rendezvous_owner
from kubescribe.controller.shards import worker_name
from kubescribe.net.urls import normalize
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.manifests import CM_RULE, cm_path, configmap, secret
from tests.support import Operator, manifest, setup_mirror, wait_condition, wait_for

pytestmark = pytest.mark.controlplane

PER_TARGET = (
    "kubescribe_target_documents",
    "kubescribe_target_retained_documents",
    "kubescribe_target_refused_documents",
    "kubescribe_target_oldest_pending_change_seconds",
    "kubescribe_duplicate_documents",
    "kubescribe_oversized_files",
)


def series(op: Operator, target: str) -> dict[str, float]:
    """name -> value of the operator's series labelled `target="<target>"`."""
    found = {}
    for line in op.metrics().splitlines():
        match = re.match(r'^(\w+)\{target="([^"]*)"\} (\S+)$', line)
        if match and match.group(2) == target:
            found[match.group(1)] = float(match.group(3))
    return found


def events(cp: ControlPlane, ns: str, name: str = "mirror") -> list[dict[str, Any]]:
    return list(
        cp.get_json("events", "-n", ns, "--field-selector", f"involvedObject.name={name}")["items"]
    )


def event(cp: ControlPlane, ns: str, reason: str) -> dict[str, Any]:
    return wait_for(
        lambda: next((e for e in events(cp, ns) if e["reason"] == reason), None),
        timeout=30,
        what=f"a {reason} Event on the GitTarget",
    )


def taker(ns: str, url: str, first: str) -> str:
    """A replica name that the rendezvous choice gives the branch `main` of `ns` over `first`."""
    name = worker_name(WorkerKey(ns, normalize(url), "main"))
    return next(
        f"replica-{i}"
        for i in range(100)
        if rendezvous_owner(name, {first, f"replica-{i}"}) == f"replica-{i}"
    )


def test_a_hand_over_moves_the_targets_series_and_tells_the_target(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    cp, ns = crds, namespace
    target = f"{ns}/mirror"
    lease = f"--lease-namespace={ns}"
    first = operator("--replica-id=replica-first", lease, "--lease-duration=4")
    cp.apply(manifest(configmap("a", ns, {"v": "1"}), configmap("b", ns, {"v": "1"})))
    setup_mirror(cp, ns, remote, CM_RULE)
    wait_for(lambda: cm_path(ns, "b") in remote.files(), timeout=60, what="first files")
    got = wait_for(
        lambda: (s := series(first, target)).get("kubescribe_target_documents") == 2 and s,
        timeout=30,
        what="the first replica's series of the target",
    )
    assert set(PER_TARGET) <= set(got)
    assert got["kubescribe_target_refused_documents"] == 0
    assert got["kubescribe_target_last_push_timestamp_seconds"] > 0
    assert event(cp, ns, ev.WRITER_ACQUIRED)["reportingInstance"] == "replica-first"

    name = taker(ns, remote.url, "replica-first")
    second = operator(f"--replica-id={name}", lease, "--lease-duration=4")
    moved = wait_for(
        lambda: (s := series(second, target)).get("kubescribe_target_documents") == 2 and s,
        timeout=60,
        what="the second replica's series of the target",
    )
    assert set(PER_TARGET) <= set(moved)
    # The first replica exports nothing of the target any more: a sum counts it once.
    wait_for(
        lambda: series(first, target) == {}, timeout=30, what="the first replica's series gone"
    )
    handed = event(cp, ns, ev.WRITER_HANDED_OVER)
    assert handed["reportingInstance"] == "replica-first"
    assert handed["type"] == "Normal"
    assert any(
        e["reason"] == ev.WRITER_ACQUIRED and e["reportingInstance"] == name for e in events(cp, ns)
    )
    assert "kubescribe_build_info{" in second.metrics()
    assert "process_resident_memory_bytes " in second.metrics()

    # A deleted target leaves no series behind on the replica that wrote it.
    cp.kubectl("delete", "gittarget", "mirror", "-n", ns)
    wait_for(
        lambda: series(second, target) == {}, timeout=30, what="the deleted target's series gone"
    )


def test_a_refused_document_and_a_push_after_an_outage_are_events(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
) -> None:
    cp, ns = crds, namespace
    target = f"{ns}/mirror"
    op = operator()
    setup_mirror(cp, ns, remote, CM_RULE, {"apiGroups": [""], "resources": ["secrets"]})
    cp.apply(manifest(secret("db", ns, {"password": "x"}), configmap("a", ns, {"v": "1"})))
    refused = event(cp, ns, ev.DOCUMENT_REFUSED)
    assert refused["type"] == "Warning"
    assert f"Secret {ns}/db" in refused["message"]
    assert "EncryptionMissing" in refused["message"]
    wait_for(
        lambda: series(op, target).get("kubescribe_target_refused_documents") == 1,
        timeout=30,
        what="the refused document counted",
    )

    # The remote goes away: the change waits (its age grows), then is pushed once it is back.
    wait_for(lambda: cm_path(ns, "a") in remote.files(), timeout=30, what="the ConfigMap")
    away = remote.path.with_name("away.git")
    remote.path.rename(away)
    cp.kubectl("patch", "configmap", "a", "-n", ns, "-p", '{"data":{"v":"2"}}')
    wait_condition(cp, "gittarget", "mirror", ns, "Pushed", "False", "RemoteUnreachable")
    wait_for(
        lambda: series(op, target).get("kubescribe_target_oldest_pending_change_seconds", 0) > 0,
        timeout=30,
        what="a pending change's age",
    )
    away.rename(remote.path)
    recovered = event(cp, ns, ev.PUSH_RECOVERED)
    assert recovered["type"] == "Normal"
    assert "RemoteUnreachable" in recovered["message"]
    wait_for(lambda: "v: '2'" in remote.read(cm_path(ns, "a")), what="the change pushed")
    wait_for(
        lambda: series(op, target).get("kubescribe_target_oldest_pending_change_seconds") == 0,
        timeout=30,
        what="nothing pending",
    )
