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
