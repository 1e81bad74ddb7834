"""CRD generation: structural schemas, CEL rules, names, printer columns, stable output."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from kubescribe.api.crds import crd_manifests, render_crds, structural

CRDS = {crd["spec"]["names"]["kind"]: crd for crd in crd_manifests()}


def _version(kind: str) -> dict[str, Any]:
    version: dict[str, Any] = CRDS[kind]["spec"]["versions"][0]
    return version


def _schema(kind: str) -> dict[str, Any]:
    schema: dict[str, Any] = _version(kind)["schema"]["openAPIV3Schema"]
    return schema


def _nodes(node: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{name}")
    if "items" in node:
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from _nodes(node["additionalProperties"], f"{path}{{}}")


def _at(kind: str, path: str) -> dict[str, Any]:
    return dict(_nodes(_schema(kind)))[path]


def _rules(kind: str, path: str) -> list[str]:
    return [v["rule"] for v in _at(kind, path).get("x-kubernetes-validations", [])]


def test_one_crd_per_kind_with_names_and_scope() -> None:
    assert list(CRDS) == [
        "GitProvider",
        "GitTarget",
        "WatchRule",
        "ClusterWatchRule",
        "CommitRequest",
        "ClusterProvider",
        "Alert",
    ]
    expected = {
        "GitProvider": ("gitproviders", "gp", "Namespaced"),
        "GitTarget": ("gittargets", "gt", "Namespaced"),
        "WatchRule": ("watchrules", "wr", "Namespaced"),
        "ClusterWatchRule": ("clusterwatchrules", "cwr", "Cluster"),
        "CommitRequest": ("commitrequests", "creq", "Namespaced"),
        "ClusterProvider": ("clusterproviders", "clp", "Cluster"),
        "Alert": ("alerts", "kal", "Namespaced"),
    }
    for kind, (plural, short, scope) in expected.items():
        crd = CRDS[kind]
        assert crd["metadata"]["name"] == f"{plural}.kubescribe.io"
        assert crd["spec"]["group"] == "kubescribe.io"
        assert crd["spec"]["scope"] == scope
        assert len(crd["spec"]["versions"]) == 1
        assert crd["spec"]["names"] == {
            "kind": kind,
            "listKind": f"{kind}List",
            "plural": plural,
            "singular": kind.lower(),
            "shortNames": [short],
            "categories": ["kubescribe"],
        }
        version = _version(kind)
        assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
        assert version["subresources"] == {"status": {}}


@pytest.mark.parametrize("kind", list(CRDS))
def test_schema_is_structural(kind: str) -> None:
    schema = _schema(kind)
    assert schema["required"] == ["spec"]
    assert schema["properties"]["metadata"] == {"type": "object"}
    assert "$defs" not in yaml.safe_dump(schema)
    for path, node in _nodes(schema):
        assert "type" in node, path
        assert not {"$ref", "$defs", "anyOf", "allOf", "oneOf", "title", "const"} & node.keys(), (
            path
        )
        assert node.get("default", "") is not None, path
        assert "x-kubernetes-preserve-unknown-fields" not in node, path
        if node["type"] == "object" and path != ".metadata":
            assert "properties" in node or "additionalProperties" in node, path
        if path.count(".") > 1 and not path.endswith(("[]", "{}")):
            assert node.get("description"), f"{kind}{path} has no description"


def test_a_providers_url_is_immutable_and_a_targets_destination_is_not() -> None:
    assert "self == oldSelf" in _rules("GitProvider", ".spec.url")
    assert "self == oldSelf" not in _rules("GitTarget", ".spec.branch")
    assert "self == oldSelf" not in _rules("GitTarget", ".spec.path")


def test_cel_rules_are_where_the_fields_are() -> None:
    path_rules = " ".join(_rules("GitTarget", ".spec.path"))
    assert "startsWith('/')" in path_rules
    assert "[.][.]" in path_rules
    assert "contains('..')" in " ".join(_rules("GitTarget", ".spec.branch"))
    assert _rules("WatchRule", ".spec.rules[].resources[]") == ["!self.contains('/')"]
    assert _rules("ClusterWatchRule", ".spec.rules[].resources[]") == ["!self.contains('/')"]
    for kind, ref in [
        ("GitProvider", ".spec.secretRef.name"),
        ("GitTarget", ".spec.providerRef.name"),
        ("GitTarget", ".spec.encryption.ageKeySecretRef.name"),
        ("WatchRule", ".spec.targetRef.name"),
        ("ClusterWatchRule", ".spec.targetRef.name"),
        ("ClusterWatchRule", ".spec.targetRef.namespace"),
        ("WatchRule", ".spec.rules[].sourceNamespace"),
    ]:
        assert any("self.matches(" in rule for rule in _rules(kind, ref)), (kind, ref)
    assert _rules("GitTarget", ".spec.encryption")  # recipients or key secret
    assert any(
        "endsWith('.yaml')" in r for r in _rules("GitTarget", ".spec.placement.types[].template")
    )


def test_every_cel_rule_has_a_message() -> None:
    for kind in CRDS:
        for path, node in _nodes(_schema(kind)):
            for rule in node.get("x-kubernetes-validations", []):
                assert rule["message"], (kind, path, rule)


def test_defaults_stay_in_the_schema() -> None:
    assert _at("GitProvider", ".spec.allowedBranches")["default"] == ["*"]
    assert _at("GitProvider", ".spec.commit")["default"] == {}
    assert _at("GitProvider", ".spec.commit.committer")["default"] == {}
    assert _at("GitProvider", ".spec.commit.committer.name")["default"] == "kubescribe"
    assert (
        _at("GitProvider", ".spec.commit.message.change")["default"] == "{operation} {kind} {ref}"
    )
    assert _at("GitTarget", ".spec.path")["default"] == "."
    assert _at("GitTarget", ".spec.prune")["default"] == {}
    assert _at("GitTarget", ".spec.prune.mode")["default"] == "Always"
    assert _at("GitTarget", ".spec.prune.mode")["enum"] == ["Never", "OnEvent", "Always"]
    assert _at("GitTarget", ".spec.suspend")["default"] is False
    assert _at("WatchRule", ".spec.rules[].apiVersions")["default"] == ["*"]
    assert _at("WatchRule", ".spec.rules[].operations")["default"] == ["*"]
    assert "default" not in _at("GitTarget", ".spec.encryption")


def test_optional_fields_are_not_required() -> None:
    assert _at("GitProvider", ".spec")["required"] == ["url"]
    assert _at("GitTarget", ".spec")["required"] == ["providerRef", "branch"]
    assert _at("WatchRule", ".spec.rules[]")["required"] == ["apiGroups", "resources"]
    assert _at("ClusterWatchRule", ".spec.targetRef")["required"] == ["name", "namespace"]
    assert "sourceNamespace" not in _at("ClusterWatchRule", ".spec.rules[]")["properties"]
    assert "required" not in _at("GitTarget", ".status")


def test_maps_and_keyed_lists() -> None:
    assert _at("WatchRule", ".spec.rules[].labelSelector.matchLabels")["additionalProperties"] == {
        "type": "string"
    }
    conditions = _at("GitTarget", ".status.conditions")
    assert conditions["x-kubernetes-list-type"] == "map"
    assert conditions["x-kubernetes-list-map-keys"] == ["type"]
    assert _at("GitTarget", ".status.conditions[]")["required"] == [
        "type",
        "status",
        "reason",
        "message",
        "lastTransitionTime",
    ]


def test_status_fields() -> None:
    shared = {"observedGeneration", "conditions", "lastHandledReconcileAt"}
    for kind in CRDS:
        assert shared <= _at(kind, ".status")["properties"].keys()
    assert set(_at("GitTarget", ".status")["properties"]) == {
        *shared,
        "lastCommit",
        "lastPushTime",
        "documents",
        "retainedDocuments",
        "streams",
        "baseBranch",
        "observedDestination",
        "encryption",
        "placement",
        "owner",
    }
    assert {"normalizedUrl", "signingKey"} <= _at("GitProvider", ".status")["properties"].keys()
    assert "resolvedResources" in _at("ClusterWatchRule", ".status")["properties"]


def test_printer_columns() -> None:
    def columns(kind: str) -> list[tuple[str, str, int]]:
        return [
            (c["name"], c["jsonPath"], c.get("priority", 0))
            for c in _version(kind)["additionalPrinterColumns"]
        ]

    ready = ("Ready", '.status.conditions[?(@.type=="Ready")].status', 0)
    reason = ("Reason", '.status.conditions[?(@.type=="Ready")].reason', 0)
    age = ("Age", ".metadata.creationTimestamp", 0)
    writable = ("Writable", '.status.conditions[?(@.type=="Writable")].status', 0)
    assert columns("GitProvider") == [("URL", ".spec.url", 0), ready, reason, writable, age]
    assert columns("GitTarget") == [
        ("Provider", ".spec.providerRef.name", 0),
        ("Branch", ".spec.branch", 0),
        ("Path", ".spec.path", 0),
        ready,
        reason,
        ("Documents", ".status.documents", 0),
        ("Authors", '.status.conditions[?(@.type=="AuthorsAttributed")].reason', 0),
        ("Commit", ".status.lastCommit", 1),
        age,
    ]
    assert columns("WatchRule") == [("Target", ".spec.targetRef.name", 0), ready, reason, age]
    assert columns("ClusterWatchRule")[0] == ("Target", ".spec.targetRef.name", 0)


def test_render_is_deterministic_and_parses_as_one_document_per_kind() -> None:
    text = render_crds()

    assert text == render_crds()
    assert text.startswith("---\n")
    assert list(yaml.safe_load_all(text)) == crd_manifests()


def test_unsupported_unions_are_refused() -> None:
    node = {"anyOf": [{"type": "string"}, {"type": "integer"}]}

    with pytest.raises(ValueError, match="unions"):
        structural(node, {})


def test_unknown_keywords_are_refused() -> None:
    with pytest.raises(ValueError, match="uniqueItems"):
        structural({"type": "array", "items": {"type": "string"}, "uniqueItems": True}, {})


def test_provider_known_hosts_and_signing_fields() -> None:
    assert _at("GitProvider", ".spec.knownHostsRef")["required"] == ["kind", "name"]
    assert _at("GitProvider", ".spec.knownHostsRef.kind")["enum"] == ["ConfigMap", "Secret"]
    assert _at("GitProvider", ".spec.knownHostsRef.key")["default"] == "known_hosts"
    assert any("self.matches(" in r for r in _rules("GitProvider", ".spec.knownHostsRef.name"))
    assert _at("GitProvider", ".spec.signing")["required"] == ["secretRef"]
    assert _at("GitProvider", ".spec.signing.key")["default"] == "signing.key"
    assert _at("GitProvider", ".spec.signing.generateWhenMissing")["default"] is False
    assert any("self.matches(" in r for r in _rules("GitProvider", ".spec.signing.secretRef.name"))
    assert "default" not in _at("GitProvider", ".spec.signing")
    assert _at("GitProvider", ".status.signingKey")["required"] == ["publicKey", "fingerprint"]


def test_commit_window_and_attribution_fields() -> None:
    push = _at("GitProvider", ".spec.push")
    assert push["default"] == {}
    assert _at("GitProvider", ".spec.push.commitWindow")["default"] == "5s"
    assert _at("GitProvider", ".spec.push.commitWindow")["pattern"].startswith("^([0-9]+")
    assert _rules("GitProvider", ".spec.push.commitWindow") == ["duration(self) <= duration('1h')"]
    assert _at("GitProvider", ".spec.push.maxChangesPerCommit")["default"] == 500
    assert _at("GitProvider", ".spec.attribution")["default"] == {}
    mode = _at("GitProvider", ".spec.attribution.mode")
    assert (mode["default"], mode["enum"]) == (
        "configured-author",
        ["configured-author", "attributed-author"],
    )
    assert _at("GitProvider", ".spec.commit.message.group")["default"] == (
        "{count} changes: {operations} ({kinds})"
    )


def test_commit_request_schema() -> None:
    assert _at("CommitRequest", ".spec")["required"] == ["targetRef", "message"]
    assert _rules("CommitRequest", ".spec") == ["self == oldSelf"]
    assert _rules("CommitRequest", ".spec.collectDelay") == ["duration(self) <= duration('10m')"]
    assert "default" not in _at("CommitRequest", ".spec.collectDelay")
    assert _rules("CommitRequest", ".spec.ttlAfterFinished") == [
        "duration(self) <= duration('8760h')"
    ]
    assert set(_at("CommitRequest", ".status")["properties"]) == {
        "observedGeneration",
        "conditions",
        "lastHandledReconcileAt",
        "branch",
        "sha",
        "changes",
        "author",
        "expiresAt",
    }
    columns = [
        (c["name"], c["jsonPath"]) for c in _version("CommitRequest")["additionalPrinterColumns"]
    ]
    assert columns == [
        ("Target", ".spec.targetRef.name"),
        ("Ready", '.status.conditions[?(@.type=="Ready")].status'),
        ("Reason", '.status.conditions[?(@.type=="Ready")].reason'),
        ("SHA", ".status.sha"),
        ("Message", ".spec.message"),
        ("Age", ".metadata.creationTimestamp"),
    ]
