"""The change webhook's registration: which writes the API server sends the operator."""

from __future__ import annotations

from typing import Any

from kubescribe.controller.streams import StreamSpec
from kubescribe.controller.webhooks import registration
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.identity import ResourceType

CM = ResourceType("", "v1", "configmaps", "ConfigMap", True)
LEASES = ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True)
EVENTS = ResourceType("events.k8s.io", "v1", "events", "Event", True)
ROLES = ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)


def stream(rtype: ResourceType, namespace: str, cluster: str = "") -> StreamSpec:
    return StreamSpec(TargetKey("t", "x"), rtype, namespace, (None,), frozenset(), cluster)


def hooks(*streams: StreamSpec) -> list[dict[str, Any]]:
    found = registration("https://op.example:9443/validate-changes", b"ca", streams)
    return [] if found is None else list(found["webhooks"])


def test_a_type_watched_everywhere_leaves_out_the_control_planes_namespaces() -> None:
    [hook] = hooks(stream(CM, "a"), stream(CM, ""))
    assert hook["namespaceSelector"] == {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-node-lease", "kube-system"],
            }
        ]
    }


def test_cluster_scoped_types_have_their_own_entry_without_a_namespace_selector() -> None:
    namespaced, cluster = hooks(stream(CM, "a"), stream(ROLES, ""))
    assert [r["scope"] for r in namespaced["rules"]] == ["Namespaced"]
    assert cluster["rules"][0]["resources"] == ["clusterroles"]
    assert cluster["rules"][0]["scope"] == "Cluster"
    assert "namespaceSelector" not in cluster
    assert namespaced["name"] != cluster["name"]


def test_nothing_is_registered_for_leases_events_remote_clusters_or_kube_system() -> None:
    assert (
        hooks(
            stream(LEASES, "a"),
            stream(EVENTS, ""),
            stream(CM, "a", cluster="far"),
            stream(CM, "kube-system"),
        )
        == []
    )
