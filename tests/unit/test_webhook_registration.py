"""The change webhook's registration: which writes the API server sends the operator."""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from kubescribe import cli
from kubescribe.controller.streams import StreamSpec
from kubescribe.controller.webhooks import registration
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.identity import ResourceType
from kubescribe.server.attribution import AttributionOptions

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


def test_the_configuration_is_named_per_install_and_kubescribe_attribution_by_default() -> None:
    url = "https://op.example:9443/validate-changes"
    default = registration(url, b"ca", [stream(CM, "a")])
    assert default is not None
    assert default["metadata"]["name"] == "kubescribe-attribution"
    named = registration(url, b"ca", [stream(CM, "a")], "team-a-kubescribe-attribution")
    assert named is not None
    assert named["metadata"]["name"] == "team-a-kubescribe-attribution"


@pytest.mark.parametrize("name", ["", "Kubescribe", "a_b", "-a", "a" * 254, "a..b"])
def test_a_configuration_name_the_api_server_would_refuse_is_a_usage_error(name: str) -> None:
    problems = AttributionOptions(changes_webhook_name=name).problems()
    assert any("--changes-webhook-name" in p for p in problems), problems


def test_a_valid_configuration_name_is_accepted() -> None:
    assert AttributionOptions(changes_webhook_name="rel-kubescribe-attribution").problems() == []


def test_the_cli_refuses_a_configuration_name_before_starting() -> None:
    result = CliRunner().invoke(cli.main, ["run", "--changes-webhook-name=Team_A"])
    assert result.exit_code == 2
    assert "--changes-webhook-name 'Team_A'" in result.output
