from typing import Any

import pytest

from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY, NoisePolicy, NoiseRule


def obj(
    name: str = "x",
    namespace: str | None = "default",
    *,
    owners: list[dict[str, Any]] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if owners is not None:
        metadata["ownerReferences"] = owners
    return {"metadata": metadata, **extra}


CONTROLLER = [{"kind": "ReplicaSet", "name": "web-1", "uid": "u", "controller": True}]


@pytest.mark.parametrize(
    ("group", "resource", "o", "reason"),
    [
        ("", "configmaps", obj("kube-root-ca.crt", "team-a"), "root-ca-bundle"),
        (
            "",
            "configmaps",
            obj("extension-apiserver-authentication", "kube-system"),
            "apiserver-authentication",
        ),
        ("", "configmaps", obj("cert-manager-leader-election", "kube-system"), "leader-election"),
        (
            "",
            "secrets",
            obj(type="kubernetes.io/service-account-token"),
            "service-account-token",
        ),
        ("", "secrets", obj(type="helm.sh/release.v1"), "helm-release"),
        ("", "secrets", obj(type="bootstrap.kubernetes.io/token"), "bootstrap-token"),
        ("", "events", obj(), "event"),
        ("events.k8s.io", "events", obj(), "event"),
        ("coordination.k8s.io", "leases", obj(), "lease"),
        ("", "endpoints", obj(), "endpoints"),
        ("discovery.k8s.io", "endpointslices", obj(owners=CONTROLLER), "endpoint-slice"),
        ("apps", "controllerrevisions", obj(owners=CONTROLLER), "controller-revision"),
        ("apps", "replicasets", obj(owners=CONTROLLER), "controller-owned"),
        ("", "pods", obj(owners=CONTROLLER), "controller-owned"),
        (
            "batch",
            "jobs",
            obj(owners=[{"kind": "CronJob", "controller": True}]),
            "controller-owned",
        ),
    ],
)
def test_default_reasons(group: str, resource: str, o: dict[str, Any], reason: str) -> None:
    assert DEFAULT_NOISE_POLICY.classify(o, group=group, resource=resource) == reason


@pytest.mark.parametrize(
    ("group", "resource", "o"),
    [
        ("", "configmaps", obj("settings")),
        ("", "configmaps", obj("extension-apiserver-authentication", "team-a")),
        ("", "configmaps", obj("app-leader-election", "team-a")),
        ("", "secrets", obj(type="Opaque")),
        ("", "secrets", obj()),
        ("", "secrets", obj(type="kubernetes.io/tls")),
        ("example.com", "widgets", obj(type="helm.sh/release.v1")),
        ("example.com", "events", obj()),
        ("apps", "deployments", obj()),
        ("apps", "replicasets", obj(owners=[{"kind": "Deployment", "name": "web"}])),
        ("apps", "replicasets", obj(owners=[{"kind": "Deployment", "controller": False}])),
        ("", "namespaces", obj("kube-system", None)),
    ],
)
def test_default_keeps(group: str, resource: str, o: dict[str, Any]) -> None:
    assert DEFAULT_NOISE_POLICY.classify(o, group=group, resource=resource) is None


def test_objects_without_metadata_are_kept() -> None:
    assert DEFAULT_NOISE_POLICY.classify({}, group="", resource="configmaps") is None
    bad_refs = {"metadata": {"ownerReferences": "nope"}}
    assert DEFAULT_NOISE_POLICY.classify(bad_refs, group="apps", resource="replicasets") is None


def test_reasons_are_kebab_case() -> None:
    for rule in DEFAULT_NOISE_POLICY.rules:
        assert rule.reason is not None
        assert rule.reason == rule.reason.lower()
        assert " " not in rule.reason
        assert "_" not in rule.reason


def test_rule_fields_and_globs() -> None:
    rule = NoiseRule("scratch", group="", resource="configmaps", namespace="ci-*", name="tmp-?")
    policy = NoisePolicy((rule,))
    assert policy.classify(obj("tmp-1", "ci-42"), group="", resource="configmaps") == "scratch"
    assert policy.classify(obj("tmp-12", "ci-42"), group="", resource="configmaps") is None
    assert policy.classify(obj("tmp-1", "prod"), group="", resource="configmaps") is None
    assert policy.classify(obj("tmp-1", "ci-42"), group="", resource="secrets") is None
    assert policy.classify(obj("TMP-1", "ci-42"), group="", resource="configmaps") is None


def test_first_match_wins() -> None:
    policy = NoisePolicy((NoiseRule("first", resource="pods"), NoiseRule("second", group="")))
    assert policy.classify(obj(), group="", resource="pods") == "first"
    assert policy.classify(obj(), group="", resource="services") == "second"


def test_drops_type() -> None:
    assert DEFAULT_NOISE_POLICY.drops_type("", "events")
    assert DEFAULT_NOISE_POLICY.drops_type("coordination.k8s.io", "leases")
    assert not DEFAULT_NOISE_POLICY.drops_type("", "secrets")
    assert not DEFAULT_NOISE_POLICY.drops_type("apps", "replicasets")
    allowed = NoisePolicy.from_config({"allow": [{"resource": "endpoints", "name": "db"}]})
    assert not allowed.drops_type("", "endpoints")
    assert allowed.drops_type("", "events")


def test_from_config_empty_is_default() -> None:
    assert NoisePolicy.from_config({}) == DEFAULT_NOISE_POLICY


def test_from_config_disable_defaults() -> None:
    policy = NoisePolicy.from_config({"disableDefaults": True})
    assert policy.rules == ()
    assert policy.classify(obj(), group="", resource="events") is None


def test_from_config_extra_rule() -> None:
    policy = NoisePolicy.from_config(
        {
            "rules": [
                {"reason": "ci-scratch", "resource": "configmaps", "namespace": "ci-*"},
                {
                    "reason": "argo-owned",
                    "group": "argoproj.io",
                    "resource": "workflows",
                    "controllerOwned": True,
                },
                {"reason": "docker-config", "secretType": "kubernetes.io/dockerconfigjson"},
            ]
        }
    )
    assert policy.classify(obj("a", "ci-1"), group="", resource="configmaps") == "ci-scratch"
    assert policy.classify(obj("a", "prod"), group="", resource="configmaps") is None
    owned = obj(owners=[{"controller": True}])
    assert policy.classify(owned, group="argoproj.io", resource="workflows") == "argo-owned"
    docker = obj(type="kubernetes.io/dockerconfigjson")
    assert policy.classify(docker, group="", resource="secrets") == "docker-config"
    assert policy.classify(obj(), group="", resource="events") == "event"


def test_from_config_allow_exempts_from_defaults_only() -> None:
    policy = NoisePolicy.from_config(
        {
            "rules": [{"reason": "legacy", "resource": "endpoints", "name": "old-*"}],
            "allow": [
                {"group": "", "resource": "endpoints", "namespace": "db"},
                {"resource": "endpoints", "name": "old-*"},
            ],
        }
    )
    assert policy.classify(obj("pg", "db"), group="", resource="endpoints") is None
    assert policy.classify(obj("pg", "web"), group="", resource="endpoints") == "endpoints"
    assert policy.classify(obj("old-pg", "db"), group="", resource="endpoints") == "legacy"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"rulez": []}, "unknown keys"),
        ({"disableDefaults": "yes"}, "disableDefaults must be a boolean"),
        ({"rules": {"reason": "x"}}, "rules must be a list"),
        ({"allow": "endpoints"}, "allow must be a list"),
        ({"rules": ["x"]}, "must be a mapping"),
        ({"rules": [{"resource": "pods"}]}, "needs a reason"),
        ({"rules": [{"reason": "", "resource": "pods"}]}, "reason"),
        ({"rules": [{"reason": "Not Kebab", "resource": "pods"}]}, "kebab-case"),
        ({"rules": [{"reason": "x", "resource": "pods", "kind": "Pod"}]}, "unknown keys"),
        ({"rules": [{"reason": "x", "resource": 3}]}, "resource must be a str"),
        ({"rules": [{"reason": "x", "controllerOwned": "true"}]}, "controllerOwned must be a bool"),
        ({"rules": [{"reason": "x"}]}, "matches every object"),
        ({"allow": [{"reason": "x", "resource": "pods"}]}, "unknown keys"),
        ({"allow": [{}]}, "matches every object"),
    ],
)
def test_from_config_errors(config: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        NoisePolicy.from_config(config)


def labelled(labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "x", "labels": dict(labels), "annotations": dict(annotations)}}


def test_default_policy_strips_gitops_and_apply_bookkeeping_and_counts_reasons() -> None:
    labels = {
        "app": "web",
        "kustomize.toolkit.fluxcd.io/name": "apps",
        "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
        "helm.toolkit.fluxcd.io/name": "web",
        "applyset.kubernetes.io/part-of": "applyset-x",
        "kapp.k14s.io/app": "123",
        "kapp.k14s.io/association": "v1.abc",
    }
    annotations = {
        "kustomize.toolkit.fluxcd.io/prune": "disabled",  # a user setting: content
        "kustomize.toolkit.fluxcd.io/checksum": "abc",
        "kapp.k14s.io/identity": "v1;ns/apps/Deployment/web;apps/v1",
        "kapp.k14s.io/change-group": "web",  # a user setting: content
        "team": "a",
    }
    source = labelled(labels, annotations)
    doc = labelled(labels, annotations)
    reasons = DEFAULT_NOISE_POLICY.strip(doc, source)
    assert doc["metadata"]["labels"] == {"app": "web"}
    assert doc["metadata"]["annotations"] == {
        "kustomize.toolkit.fluxcd.io/prune": "disabled",
        "kapp.k14s.io/change-group": "web",
        "team": "a",
    }
    assert sorted(reasons) == sorted(
        ["flux-bookkeeping"] * 4 + ["applyset"] + ["kapp-bookkeeping"] * 3
    )


def test_argo_instance_label_is_stripped_only_when_argo_manages_the_object() -> None:
    argo = labelled(
        {"app.kubernetes.io/instance": "web"},
        {"argocd.argoproj.io/tracking-id": "web:apps/Deployment:ns/web"},
    )
    doc = labelled({"app.kubernetes.io/instance": "web"}, dict(argo["metadata"]["annotations"]))
    assert sorted(DEFAULT_NOISE_POLICY.strip(doc, argo)) == ["argocd-tracking"] * 2
    assert "labels" not in doc["metadata"]
    assert "annotations" not in doc["metadata"]
    helm = labelled({"app.kubernetes.io/instance": "web"}, {})
    doc = labelled({"app.kubernetes.io/instance": "web"}, {})
    assert DEFAULT_NOISE_POLICY.strip(doc, helm) == []
    assert doc["metadata"]["labels"] == {"app.kubernetes.io/instance": "web"}


def test_apf_objects_the_api_server_maintains_are_noise() -> None:
    maintained = obj("global-default", None)
    maintained["metadata"]["annotations"] = {"apf.kubernetes.io/autoupdate-spec": "true"}
    mine = obj("tenant-a", None)
    group = "flowcontrol.apiserver.k8s.io"
    reason = DEFAULT_NOISE_POLICY.classify(maintained, group=group, resource="flowschemas")
    assert reason == "api-priority-and-fairness"
    assert DEFAULT_NOISE_POLICY.classify(mine, group=group, resource="flowschemas") is None


def test_override_keeps_and_adds_strip_rules_over_a_base_policy() -> None:
    policy = NoisePolicy.from_config(
        {
            "keep": [{"key": "kustomize.toolkit.fluxcd.io/name", "on": "labels"}],
            "strip": [{"reason": "team-bookkeeping", "key": "example.com/*"}],
        },
        base=DEFAULT_NOISE_POLICY,
    )
    source = labelled(
        {"kustomize.toolkit.fluxcd.io/name": "apps", "kustomize.toolkit.fluxcd.io/namespace": "f"},
        {"example.com/build": "7"},
    )
    doc = labelled(dict(source["metadata"]["labels"]), dict(source["metadata"]["annotations"]))
    assert sorted(policy.strip(doc, source)) == ["flux-bookkeeping", "team-bookkeeping"]
    assert doc["metadata"] == {"name": "x", "labels": {"kustomize.toolkit.fluxcd.io/name": "apps"}}
    assert NoisePolicy.from_config({"disableDefaults": True}).strip(doc, source) == []
    with pytest.raises(ValueError, match="on must be"):
        NoisePolicy.from_config({"strip": [{"reason": "x", "key": "a", "on": "spec"}]})


def test_system_finalizers_are_stripped_and_a_target_can_keep_them() -> None:
    source = labelled({}, {})
    source["metadata"]["finalizers"] = ["kubernetes.io/pvc-protection", "example.com/mine"]
    doc = {"metadata": {"name": "x", "finalizers": list(source["metadata"]["finalizers"])}}
    assert DEFAULT_NOISE_POLICY.strip(doc, source) == ["system-finalizer"]
    assert doc["metadata"]["finalizers"] == ["example.com/mine"]
    only = {"metadata": {"name": "x", "finalizers": ["foregroundDeletion"]}}
    assert DEFAULT_NOISE_POLICY.strip(only, source) == ["system-finalizer"]
    assert only["metadata"] == {"name": "x"}
    keep = NoisePolicy.from_config({"keep": [{"key": "kubernetes.io/*", "on": "finalizers"}]})
    kept = {"metadata": {"name": "x", "finalizers": ["kubernetes.io/pv-protection"]}}
    assert keep.strip(kept, source) == []
    assert kept["metadata"]["finalizers"] == ["kubernetes.io/pv-protection"]
    # `both` means labels and annotations, never finalizers
    both = NoisePolicy.from_config({"strip": [{"reason": "x", "key": "example.com/*"}]})
    mine = {"metadata": {"name": "x", "finalizers": ["example.com/mine"]}}
    assert both.strip(mine, source) == []
