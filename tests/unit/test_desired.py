"""The plan compiler decides validity and streams without I/O."""

from __future__ import annotations

from typing import Any

import pytest

from kubescribe.api import conditions as c
from kubescribe.controller import desired
from kubescribe.controller.desired import WATCHABLE_FROM, compile_plan, source_grants
from kubescribe.controller.plan import Failure, Problem
from kubescribe.kube.discovery import Discovered
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.identity import ResourceType
from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY
from kubescribe.mirror.owned import Content, KeepField

TYPES = [
    Discovered(ResourceType("", "v1", "configmaps", "ConfigMap", True), True),
    Discovered(ResourceType("", "v1", "events", "Event", True), True),
    Discovered(ResourceType("", "v1", "namespaces", "Namespace", False), True),
    Discovered(ResourceType("apps", "v1", "deployments", "Deployment", True), True),
    Discovered(ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True), True),
]


def obj(
    kind: str,
    name: str,
    spec: dict[str, Any],
    ns: str = "ns",
    created: str = "2026-01-01T00:00:00Z",
) -> dict[str, Any]:
    return {
        "kind": kind,
        "metadata": {"name": name, "namespace": ns, "generation": 1, "creationTimestamp": created},
        "spec": spec,
    }


def provider(**spec: Any) -> dict[str, Any]:
    return obj("GitProvider", "git", {"url": "https://git.example/r.git", **spec})


def target(
    name: str, path: str, created: str = "2026-01-01T00:00:00Z", **spec: Any
) -> dict[str, Any]:
    return obj(
        "GitTarget",
        name,
        {"providerRef": {"name": "git"}, "branch": "main", "path": path, **spec},
        created=created,
    )


def rule(name: str, target_name: str, **r: Any) -> dict[str, Any]:
    return obj(
        "WatchRule",
        name,
        {
            "targetRef": {"name": target_name},
            "rules": [{"apiGroups": ["*"], "resources": ["*"], **r}],
        },
    )


def test_wildcards_skip_noise_types_and_cluster_scope() -> None:
    plan = compile_plan(
        [provider()], [target("t", "a")], [rule("r", "t")], [], TYPES, DEFAULT_NOISE_POLICY
    )
    resolved = plan.rules[("WatchRule", ("ns", "r"))].resolved
    assert resolved == ("apps/v1/deployments", "core/v1/configmaps")
    assert {s.rtype.resource for s in plan.streams.values()} == {"configmaps", "deployments"}
    assert all(s.namespace == "ns" for s in plan.streams.values())


def test_older_target_keeps_an_overlapping_folder() -> None:
    plan = compile_plan(
        [provider()],
        [target("new", "a/b", created="2026-02-01T00:00:00Z"), target("old", "a")],
        [rule("r1", "new"), rule("r2", "old")],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )
    assert plan.targets[TargetKey("ns", "old")].writable
    new = plan.targets[TargetKey("ns", "new")]
    assert new.path_problem is not None
    assert new.path_problem.reason == "PathOverlap"
    assert not any(s.target == TargetKey("ns", "new") for s in plan.streams.values())


def test_reasons_for_missing_provider_disallowed_branch_and_bad_template() -> None:
    plan = compile_plan([], [target("t", "a")], [], [], TYPES, DEFAULT_NOISE_POLICY)
    assert plan.targets[TargetKey("ns", "t")].problem.reason == "ProviderNotFound"  # type: ignore[union-attr]
    plan = compile_plan(
        [provider(allowedBranches=["release-*"])],
        [target("t", "a")],
        [],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )
    assert plan.targets[TargetKey("ns", "t")].problem.reason == "BranchNotAllowed"  # type: ignore[union-attr]
    bad = provider(commit={"message": {"change": "{who}"}})
    plan = compile_plan([bad], [target("t", "a")], [], [], TYPES, DEFAULT_NOISE_POLICY)
    assert plan.providers[("ns", "git")].problem.reason == "InvalidTemplate"  # type: ignore[union-attr]
    assert plan.targets[TargetKey("ns", "t")].problem.reason == "ProviderNotReady"  # type: ignore[union-attr]


def test_rules_with_unknown_resources_and_missing_targets() -> None:
    plan = compile_plan(
        [provider()],
        [target("t", "a")],
        [rule("r", "t", resources=["gizmos"]), rule("lost", "nope")],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )
    r = plan.rules[("WatchRule", ("ns", "r"))]
    assert r.problem is not None
    assert r.problem.reason == "NoMatchingResources"
    assert "gizmos" in r.problem.message
    assert plan.rules[("WatchRule", ("ns", "lost"))].problem.reason == "TargetNotFound"  # type: ignore[union-attr]


def test_suspended_target_has_no_streams() -> None:
    plan = compile_plan(
        [provider()],
        [target("t", "a", suspend=True)],
        [rule("r", "t")],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )
    assert plan.streams == {}


# --- cross-namespace sources ------------------------------------------------------------------


def namespace_obj(name: str, watchable_from: str | None = None) -> dict[str, Any]:
    annotations = {WATCHABLE_FROM: watchable_from} if watchable_from is not None else {}
    return {"kind": "Namespace", "metadata": {"name": name, "annotations": annotations}}


def cross_namespace_plan(grants: Any) -> Any:
    rules = obj(
        "WatchRule",
        "r",
        {
            "targetRef": {"name": "t"},
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps"]},
                {"apiGroups": [""], "resources": ["configmaps"], "sourceNamespace": "kube-system"},
            ],
        },
    )
    return compile_plan(
        [provider()], [target("t", "a")], [rules], [], TYPES, DEFAULT_NOISE_POLICY, grants=grants
    )


def test_a_watch_rule_cannot_read_another_namespace_that_grants_nothing() -> None:
    plan = cross_namespace_plan(source_grants([namespace_obj("kube-system")]))
    r = plan.rules[("WatchRule", ("ns", "r"))]
    assert {s.namespace for s in plan.streams.values()} == {"ns"}
    assert r.sources == ("ns",)
    assert r.source_problem is not None
    assert r.source_problem.reason == "SourceNamespaceNotAuthorized"
    assert "kube-system" in r.source_problem.message
    assert r.problem is None  # the rule's own namespace keeps flowing


def test_a_namespace_grants_readers_by_annotation() -> None:
    for value in ("ns", "other, ns", "*"):
        plan = cross_namespace_plan(source_grants([namespace_obj("kube-system", value)]))
        r = plan.rules[("WatchRule", ("ns", "r"))]
        assert r.source_problem is None, value
        assert {s.namespace for s in plan.streams.values()} == {"ns", "kube-system"}
    plan = cross_namespace_plan(source_grants([namespace_obj("kube-system", "nsx, other")]))
    assert plan.rules[("WatchRule", ("ns", "r"))].source_problem is not None


def test_the_lockdown_refuses_even_a_granted_source() -> None:
    plan = cross_namespace_plan(None)
    r = plan.rules[("WatchRule", ("ns", "r"))]
    assert r.source_problem is not None
    assert r.source_problem.reason == "CrossNamespaceSourcesDisabled"
    assert {s.namespace for s in plan.streams.values()} == {"ns"}


def test_a_rule_whose_every_source_is_refused_reports_the_refusal_not_no_match() -> None:
    rules = obj(
        "WatchRule",
        "r",
        {
            "targetRef": {"name": "t"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "sourceNamespace": "x"}],
        },
    )
    plan = compile_plan(
        [provider()], [target("t", "a")], [rules], [], TYPES, DEFAULT_NOISE_POLICY, grants={}
    )
    r = plan.rules[("WatchRule", ("ns", "r"))]
    assert r.problem is None
    assert r.source_problem is not None
    assert plan.streams == {}


# --- ClusterProviders -------------------------------------------------------------------------

REMOTE_TYPES = {"east": TYPES}


def cluster_provider(name: str, allowed: list[str], **spec: Any) -> dict[str, Any]:
    return {
        "kind": "ClusterProvider",
        "metadata": {"name": name, "generation": 1},
        "spec": {
            "kubeconfigSecretRef": {"namespace": "ops", "name": f"{name}-kubeconfig"},
            "allowedNamespaces": allowed,
            **spec,
        },
    }


def remote_rule(name: str, target_name: str, cluster: str) -> dict[str, Any]:
    return obj(
        "WatchRule",
        name,
        {
            "targetRef": {"name": target_name},
            "clusterRef": {"name": cluster},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "sourceNamespace": "app"}],
        },
    )


def remote_plan(*rules: dict[str, Any], allowed: list[str], **spec: Any) -> Any:
    return compile_plan(
        [provider()],
        [target("t", "a"), target("u", "b")],
        list(rules),
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
        grants={},
        cluster_providers=[cluster_provider("east", allowed, **spec)],
        remote_discovered=REMOTE_TYPES,
    )


def test_a_cluster_provider_is_denied_to_namespaces_it_does_not_allow() -> None:
    plan = remote_plan(remote_rule("r", "t", "east"), allowed=["other"])
    problem = plan.rules[("WatchRule", ("ns", "r"))].problem
    assert problem is not None
    assert problem.reason == "ClusterNotAllowed"
    assert plan.streams == {}


def test_an_allowed_cluster_streams_from_its_namespace_with_its_audit_route() -> None:
    plan = remote_plan(remote_rule("r", "t", "east"), allowed=["ns"], auditRoute="east")
    [stream] = plan.streams.values()
    assert (stream.cluster, stream.namespace, stream.audit_route) == ("east", "app", "east")
    assert plan.targets[TargetKey("ns", "t")].layout.cluster == "east"
    assert plan.rules[("WatchRule", ("ns", "r"))].source_problem is None  # its grant covers it


def test_a_remote_cluster_without_an_audit_route_never_borrows_the_local_one() -> None:
    plan = remote_plan(remote_rule("r", "t", "east"), allowed=["*"])
    [stream] = plan.streams.values()
    assert stream.audit_route not in ("", "local")


def test_a_target_mirrors_one_cluster() -> None:
    plan = remote_plan(remote_rule("a-remote", "t", "east"), rule("b-local", "t"), allowed=["ns"])
    problem = plan.rules[("WatchRule", ("ns", "b-local"))].problem
    assert problem is not None
    assert problem.reason == "ClusterConflict"
    assert {s.cluster for s in plan.streams.values()} == {"east"}


def test_a_cluster_not_reached_yet_waits() -> None:
    plan = compile_plan(
        [provider()],
        [target("t", "a")],
        [remote_rule("r", "t", "east")],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
        cluster_providers=[cluster_provider("east", ["ns"])],
    )
    problem = plan.rules[("WatchRule", ("ns", "r"))].problem
    assert problem is not None
    assert problem.reason == "ClusterNotReady"


def test_a_stored_path_git_refuses_is_invalid_path() -> None:
    """A GitTarget stored before the CRD refused `.git` segments never reaches a worker."""
    plan = compile_plan([provider()], [target("t", "x/.GIT")], [], [], TYPES, DEFAULT_NOISE_POLICY)
    t = plan.targets[TargetKey("ns", "t")]
    assert t.problem is not None
    assert t.problem.reason == "InvalidPath"
    assert not t.writable


def test_a_target_noise_policy_extends_the_operator_policy() -> None:
    noise = {"allow": [{"resource": "leases"}], "keep": [{"key": "applyset.kubernetes.io/*"}]}
    plan = compile_plan(
        [provider()],
        [target("t", "a", noise=noise), target("u", "b")],
        [rule("r", "t"), rule("s", "u")],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )
    own = plan.targets[TargetKey("ns", "t")].noise
    assert own is not None
    assert (
        own.classify({"metadata": {"name": "x"}}, group="coordination.k8s.io", resource="leases")
        is None
    )
    assert plan.targets[TargetKey("ns", "u")].noise is None
    assert "coordination.k8s.io/v1/leases" in plan.rules[("WatchRule", ("ns", "r"))].resolved
    assert "coordination.k8s.io/v1/leases" not in plan.rules[("WatchRule", ("ns", "s"))].resolved


def test_an_unusable_target_noise_policy_is_invalid_noise() -> None:
    plan = compile_plan(
        [provider()],
        [target("t", "a", noise={"allow": [{"controllerOwned": False}]})],
        [],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )
    problem = plan.targets[TargetKey("ns", "t")].problem
    assert problem is not None
    assert problem.reason == "InvalidNoise"


def cluster_rule(name: str, target_name: str, **r: Any) -> dict[str, Any]:
    rule_obj = obj(
        "ClusterWatchRule",
        name,
        {
            "targetRef": {"name": target_name, "namespace": "ns"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps", "namespaces"], **r}],
        },
    )
    del rule_obj["metadata"]["namespace"]
    return rule_obj


def test_a_cluster_watch_rule_with_namespaces_opens_one_stream_per_namespaced_type() -> None:
    selector = {"labelSelector": {"matchLabels": {"mirror": "yes"}}}
    plan = compile_plan(
        [provider()],
        [target("t", "a")],
        [],
        [cluster_rule("all", "t", namespaces=selector)],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )
    streams = sorted(plan.streams.values(), key=lambda s: s.rtype.resource)
    assert [(s.rtype.resource, s.namespace) for s in streams] == [
        ("configmaps", ""),
        ("namespaces", ""),
    ]
    assert streams[0].namespace_selectors == (
        {"names": [], "labelSelector": {"matchLabels": {"mirror": "yes"}, "matchExpressions": []}},
    )
    assert streams[1].namespace_selectors == ()
    assert streams[0].admitted({"a": {"mirror": "yes"}, "b": {}}) == (frozenset({"a"}),)


def test_without_namespaces_a_cluster_watch_rule_reads_only_cluster_scoped_types() -> None:
    plan = compile_plan(
        [provider()], [target("t", "a")], [], [cluster_rule("c", "t")], TYPES, DEFAULT_NOISE_POLICY
    )
    assert [s.rtype.resource for s in plan.streams.values()] == ["namespaces"]


def test_content_defaults_to_owned_and_takes_the_target_settings() -> None:
    keep = {"path": "spec.replicas", "group": "apps", "kind": "Deployment"}
    content = {"mode": "Owned", "controllers": ["b", "a", "b"], "keep": [keep]}
    plan = compile_plan(
        [provider()],
        [
            target("t", "a"),
            target("full", "b", content={"mode": "Full"}),
            target("k", "c", content=content),
        ],
        [],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )
    default = plan.targets[TargetKey("ns", "t")].content
    assert default == Content("Owned", ("horizontal-pod-autoscaler", "kube-controller-manager"))
    assert not plan.targets[TargetKey("ns", "full")].content.owned
    assert plan.targets[TargetKey("ns", "k")].content == Content(
        "Owned", ("a", "b"), (KeepField(("spec", "replicas"), "apps", "Deployment"),)
    )
    bad = compile_plan(
        [provider()],
        [target("t", "a", content={"mode": "Some"})],
        [],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )
    assert bad.targets[TargetKey("ns", "t")].problem.reason == "InvalidSpec"  # type: ignore[union-attr]


def test_an_ipv6_scp_url_is_a_valid_provider_with_a_key() -> None:
    """`git@[2001:db8::1]:org/repo.git` passed the URL policy and then raised out of the plan,
    stopping every replica's reconcile loop."""
    hostile = obj("GitProvider", "git", {"url": "git@[2001:db8::1]:org/repo.git"})
    plan = compile_plan([hostile], [target("t", "a")], [], [], TYPES, DEFAULT_NOISE_POLICY)
    p = plan.providers[("ns", "git")]
    assert p.problem is None
    assert p.normalized_url == "ssh://git@[2001:db8::1]/org/repo"


def test_a_spec_that_raises_is_reported_on_its_object_and_the_plan_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def check_url(url: str, allow_file: bool = False) -> None:
        if "hostile" in url:
            raise RuntimeError(f"boom {url}")

    monkeypatch.setattr(desired, "check_url", check_url)
    hostile = obj("GitProvider", "git", {"url": "https://hostile.example/r.git"}, ns="evil")
    plan = compile_plan(
        [hostile, provider()],
        [target("t", "a"), obj("GitTarget", "t", target("t", "a")["spec"], ns="evil")],
        [rule("r", "t")],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )
    bad = plan.providers[("evil", "git")]
    assert bad.problem is not None
    assert bad.problem.reason == c.SPEC_NOT_EVALUATED
    assert "hostile" not in bad.problem.message
    assert plan.failures == [Failure("GitProvider", ("evil", "git"), "RuntimeError")]
    evil_target = plan.targets[TargetKey("evil", "t")]
    assert evil_target.problem is not None
    assert evil_target.problem.reason == c.PROVIDER_NOT_READY
    assert plan.targets[TargetKey("ns", "t")].writable
    assert {s.target for s in plan.streams.values()} == {TargetKey("ns", "t")}


def test_a_rule_that_raises_adds_no_streams_and_the_others_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = desired._source_refusal

    def source_refusal(
        reader: str, source: str, grants: desired.SourceGrants | None
    ) -> Problem | None:
        if reader == "evil":
            raise RecursionError
        return real(reader, source, grants)

    monkeypatch.setattr(desired, "_source_refusal", source_refusal)
    evil_rule = obj("WatchRule", "r", rule("r", "t")["spec"], ns="evil")
    plan = compile_plan(
        [provider(), obj("GitProvider", "git", provider()["spec"], ns="evil")],
        [target("t", "a"), obj("GitTarget", "t", target("t", "a")["spec"], ns="evil")],
        [evil_rule, rule("r", "t")],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )
    bad = plan.rules[("WatchRule", ("evil", "r"))]
    assert bad.problem is not None
    assert bad.problem.reason == c.SPEC_NOT_EVALUATED
    assert plan.rules[("WatchRule", ("ns", "r"))].problem is None
    assert {s.target for s in plan.streams.values()} == {TargetKey("ns", "t")}
