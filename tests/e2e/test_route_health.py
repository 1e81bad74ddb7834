"""Audit route health and the watermark end to end: a kube-apiserver whose audit webhook posts to
the operator's receiver, the operator process, a real file:// remote. A grace of ten minutes:
were a delete to wait it out, the test's own timeout would fail it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kubescribe.mirror.authors import UNRESOLVED
from kubescribe_devenv.gitremote import BareRemote
from tests.e2e.conftest import Audited
from tests.e2e.test_attribution import ATTRIBUTED, audit_flowing, authored
from tests.e2e.test_clusters import cluster_provider
from tests.manifests import CM_RULE, cm_path, configmap, provider, target, watch_rule
from tests.support import Operator, manifest, metric, wait_for, wait_ready

pytestmark = pytest.mark.controlplane

GRACE = "600"
LEASES = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"]}


def lease(name: str, ns: str) -> dict[str, Any]:
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"holderIdentity": "someone"},
    }


def lease_path(ns: str, name: str) -> str:
    return f"mirror/{ns}/coordination.k8s.io/leases/{name}.yaml"


def setup(audited: Audited, ns: str, remote: BareRemote, *objects: dict[str, Any]) -> None:
    """Objects first (they arrive with the snapshot, authored by nobody), then the mirror of
    ConfigMaps and Leases (Leases are noise by default; the test policy never audits them)."""
    if objects:
        audited.cp.apply(manifest(*objects))
    allow = {"allow": [{"group": "coordination.k8s.io", "resource": "leases"}]}
    audited.cp.apply(
        manifest(
            provider("git", ns, remote.url, attribution=ATTRIBUTED),
            target("mirror", ns, "git", "mirror", noise=allow),
            watch_rule("rule", ns, "mirror", CM_RULE, LEASES),
        )
    )
    wait_ready(audited.cp, ns)


def routes(audited: Audited, ns: str) -> list[dict[str, Any]]:
    status = audited.cp.get_json("gitprovider", "git", "-n", ns).get("status") or {}
    return list((status.get("attribution") or {}).get("routes") or [])


def test_a_delete_whose_fact_never_comes_commits_unresolved_once_the_route_told_later_requests(
    audited: Audited, ns: str, remote: BareRemote, start_operator: Callable[..., Operator]
) -> None:
    cp = audited.cp
    op = start_operator(*audited.flags(grace=GRACE))
    setup(audited, ns, remote, lease("unaudited", ns), configmap("audited", ns, {"k": "v"}))
    audit_flowing(audited, op, ns)
    wait_for(lambda: lease_path(ns, "unaudited") in remote.files(), timeout=60, what="the lease")

    # The audit policy records no Lease request: its delete fact never comes. Later requests
    # the route tells of move its watermark past the delete, and the wait ends.
    cp.kubectl("delete", "lease", "unaudited", "-n", ns)

    def gone_after_later_requests() -> bool:
        cp.kubectl("create", "configmap", f"later-{uuid.uuid4().hex[:6]}", "-n", "default")
        return lease_path(ns, "unaudited") not in remote.files()

    wait_for(gone_after_later_requests, timeout=90, interval=1.0, what="the lease delete")
    [(author, email, files)] = authored(remote, 1)
    assert (author, email) == (UNRESOLVED.name, UNRESOLVED.email)
    assert files == {lease_path(ns, "unaudited")}
    assert (
        metric(op, "kubescribe_attribution_settled_early_total", 'route="local",why="watermark"')
        >= 1
    )

    # A delete whose fact comes is still authored by who asked for it.
    audited.kubectl_as("alice", "delete", "configmap", "audited", "-n", ns)
    wait_for(lambda: cm_path(ns, "audited") not in remote.files(), timeout=90, what="cm delete")
    [(author, email, files)] = authored(remote, 1)
    assert (author, email, files) == (
        "alice",
        "alice@users.kubescribe.invalid",
        {cm_path(ns, "audited")},
    )

    [local] = wait_for(lambda: routes(audited, ns) or None, timeout=60, what="route health")
    assert local["name"] == "local"
    assert local["source"] == "audit"
    assert local["facts"] > 0
    assert local["silent"] is False
    assert local["lastFactTime"]
    assert local["watermark"]


def test_a_silent_route_shows_on_the_provider_and_its_deletes_stop_waiting(
    audited: Audited, ns: str, remote: BareRemote, start_operator: Callable[..., Operator]
) -> None:
    # The operator's route is `quiet`, which the apiserver (posting to `local`) never reaches;
    # a ClusterProvider names another route nothing posts to either.
    flags = audited.flags(route="quiet=kubescribe-audit-local", grace=GRACE)
    op = start_operator(*flags, "--audit-extra-route=far", "--audit-silent-after=2")
    cluster = f"far-{uuid.uuid4().hex[:6]}"
    audited.cp.wait_established("clusterproviders.kubescribe.io")
    audited.cp.apply(manifest(cluster_provider(cluster, ns, "missing", auditRoute="far")))
    setup(audited, ns, remote, configmap("doomed", ns, {"k": "v"}))
    wait_for(lambda: cm_path(ns, "doomed") in remote.files(), timeout=60, what="the snapshot")

    audited.kubectl_as("alice", "delete", "configmap", "doomed", "-n", ns)
    wait_for(lambda: cm_path(ns, "doomed") not in remote.files(), timeout=90, what="the delete")
    [(author, email, _)] = authored(remote, 1)
    assert (author, email) == (UNRESOLVED.name, UNRESOLVED.email)  # alice's fact went elsewhere
    assert (
        metric(op, "kubescribe_attribution_settled_early_total", 'route="quiet",why="silent"') >= 1
    )

    def silent() -> list[dict[str, Any]] | None:
        found = routes(audited, ns)
        return found if found and found[0]["silent"] else None

    [quiet] = wait_for(silent, timeout=60, what="the silent route in the provider's status")
    assert (quiet["name"], quiet["source"], quiet["facts"]) == ("quiet", "audit", 0)
    assert "lastFactTime" not in quiet
    assert metric(op, "kubescribe_attribution_route_silent", 'route="quiet"') == 1

    def far() -> dict[str, Any] | None:
        obj = audited.cp.get_json("clusterprovider", cluster)
        shown = ((obj.get("status") or {}).get("attribution") or {}).get("routes") or []
        return shown[0] if shown and shown[0]["silent"] else None

    try:
        route = wait_for(far, timeout=60, what="the ClusterProvider's silent route")
        assert (route["name"], route["source"], route["facts"]) == ("far", "audit", 0)
    finally:
        audited.cp.kubectl("delete", "clusterprovider", cluster, "--wait=false", check=False)
