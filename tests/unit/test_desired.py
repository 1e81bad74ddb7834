"""The plan compiler decides validity and streams without I/O."""

from __future__ import annotations

from typing import Any

from kubescribe.controller.desired import compile_plan
from kubescribe.kube.discovery import Discovered
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.identity import ResourceType
from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY

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


def test_a_stored_path_git_refuses_is_invalid_path() -> None:
    """A GitTarget stored before the CRD refused `.git` segments never reaches a worker."""
    plan = compile_plan([provider()], [target("t", "x/.GIT")], [], [], TYPES, DEFAULT_NOISE_POLICY)
    t = plan.targets[TargetKey("ns", "t")]
    assert t.problem is not None
    assert t.problem.reason == "InvalidPath"
    assert not t.writable
