"""API models (defaults, camelCase wire format) and the pure condition helpers."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from kubescribe.api import conditions as c
from kubescribe.api.gittarget import GitTargetSpec
from kubescribe.api.models import GitProviderSpec, ResourceRule, WatchRuleSpec
from kubescribe.api.objects import ClusterWatchRule, GitProvider, GitTarget
from kubescribe.api.schema import LocalObjectReference

T0 = "2024-01-01T00:00:00Z"
T1 = "2024-01-01T00:05:00Z"


def test_git_provider_defaults() -> None:
    spec = GitProviderSpec(url="https://git.example/repo.git")

    assert spec.allowed_branches == ["*"]
    assert spec.secret_ref is None
    assert spec.commit.committer.name == "kubescribe"
    assert spec.commit.committer.email == "kubescribe@users.noreply.local"
    assert spec.commit.message.change == "{operation} {kind} {ref}"
    assert spec.commit.message.snapshot == (
        "Snapshot {resource} in {scope}: {added} added, {updated} updated, {removed} removed"
    )


def test_git_target_defaults() -> None:
    spec = GitTargetSpec(provider_ref=LocalObjectReference(name="repo"), branch="main")

    assert spec.path == "."
    assert spec.prune.mode == "Always"
    assert spec.suspend is False
    assert spec.encryption is None
    assert spec.placement.default is None
    assert spec.placement.types == []


def test_resource_rule_defaults() -> None:
    rule = ResourceRule(api_groups=[""], resources=["configmaps"])

    assert rule.api_versions == ["*"]
    assert rule.operations == ["*"]
    assert rule.source_namespace is None
    assert rule.label_selector is None


def test_mutable_defaults_are_not_shared() -> None:
    first = ResourceRule(api_groups=[""], resources=["pods"])
    first.operations.append("DELETE")

    assert ResourceRule(api_groups=[""], resources=["pods"]).operations == ["*"]


def test_objects_round_trip_in_camel_case() -> None:
    wire: dict[str, Any] = {
        "apiVersion": "kubescribe.io/v1alpha1",
        "kind": "GitTarget",
        "metadata": {"name": "site", "namespace": "team", "generation": 3, "uid": "u-1"},
        "spec": {
            "providerRef": {"name": "repo"},
            "branch": "main",
            "path": "clusters/prod",
            "placement": {"types": [{"group": "", "resource": "pods", "template": "{name}.yaml"}]},
            "prune": {"mode": "OnEvent"},
            "suspend": True,
            "kustomize": {
                "mode": "Auto",
                "root": "overlays/prod",
                "writeUnsupported": True,
                "renderCheck": False,
            },
            "content": {
                "mode": "Full",
                "controllers": [],
                "keep": [{"path": "spec.replicas", "group": "apps", "kind": "Deployment"}],
            },
            "encryption": {
                "recipients": ["age1abc"],
                "ageKeySecretRef": {"name": "keys"},
                "generateWhenMissing": True,
                "sensitiveTypes": [
                    {
                        "group": "x.io",
                        "resource": "dbs",
                        "paths": ["spec.pw"],
                        "wholeDocument": False,
                    }
                ],
            },
        },
        "status": {
            "observedGeneration": 3,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Ready",
                    "message": "Up to date",
                    "lastTransitionTime": T0,
                    "observedGeneration": 3,
                }
            ],
            "lastCommit": "0" * 40,
            "lastPushTime": T0,
            "documents": 7,
            "retainedDocuments": 1,
            "streams": 2,
            "encryption": {"recipients": ["age1abc"]},
        },
    }

    target = GitTarget.model_validate(wire)

    assert target.metadata.generation == 3
    assert target.spec.encryption is not None
    assert target.spec.encryption.age_key_secret_ref == LocalObjectReference(name="keys")
    assert target.status.retained_documents == 1
    dumped = target.model_dump(mode="json", exclude_none=True)
    assert dumped["spec"] == wire["spec"]
    assert dumped["status"] == wire["status"]
    assert dumped["apiVersion"] == "kubescribe.io/v1alpha1"
    assert dumped["kind"] == "GitTarget"


def test_snake_case_names_are_accepted_too() -> None:
    rule = ResourceRule.model_validate(
        {"api_groups": ["apps"], "resources": ["deployments"], "source_namespace": "web"}
    )

    assert rule.model_dump(exclude_none=True)["sourceNamespace"] == "web"


def test_unknown_fields_are_ignored() -> None:
    provider = GitProvider.model_validate(
        {
            "kind": "GitProvider",
            "metadata": {"name": "repo", "managedFields": []},
            "spec": {"url": "ssh://git@host/repo.git", "fromTheFuture": 1},
        }
    )

    assert provider.spec.url == "ssh://git@host/repo.git"


@pytest.mark.parametrize(
    "payload",
    [
        {"targetRef": {"name": "t"}, "rules": []},
        {"targetRef": {"name": "t"}, "rules": [{"apiGroups": [""], "resources": []}]},
        {"targetRef": {"name": "t"}, "rules": [{"resources": ["pods"]}]},
        {
            "targetRef": {"name": "t"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "operations": ["PATCH"]}],
        },
    ],
    ids=["no-rules", "no-resources", "no-groups", "bad-operation"],
)
def test_invalid_watch_rules_fail_validation(payload: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        WatchRuleSpec.model_validate(payload)


def test_wrong_kind_fails_validation() -> None:
    with pytest.raises(ValidationError):
        ClusterWatchRule.model_validate(
            {"kind": "WatchRule", "spec": {"targetRef": {}, "rules": []}}
        )


# --- conditions ----------------------------------------------------------------------------


def _set(
    conds: list[dict[str, Any]],
    type_: str,
    status: Any,
    reason: str,
    *,
    gen: int = 1,
    now: str = T0,
) -> list[dict[str, Any]]:
    return c.set_condition(
        conds, type_, status, reason, f"{reason} message", generation=gen, now=now
    )


def test_set_condition_appends_a_new_condition() -> None:
    conds = _set([], c.PUSHED, "True", c.PUSHED)

    assert conds == [
        {
            "type": "Pushed",
            "status": "True",
            "reason": "Pushed",
            "message": "Pushed message",
            "lastTransitionTime": T0,
            "observedGeneration": 1,
        }
    ]


def test_set_condition_keeps_transition_time_while_status_holds() -> None:
    before = _set([], c.PUSHED, "False", c.REMOTE_UNREACHABLE)

    after = _set(before, c.PUSHED, "False", c.PUSH_REJECTED, gen=2, now=T1)

    assert after[0]["lastTransitionTime"] == T0
    assert after[0]["reason"] == "PushRejected"
    assert after[0]["observedGeneration"] == 2


def test_set_condition_moves_transition_time_when_status_flips() -> None:
    before = _set([], c.PUSHED, "False", c.REMOTE_UNREACHABLE)

    after = _set(before, c.PUSHED, "True", c.PUSHED, now=T1)

    assert after[0]["lastTransitionTime"] == T1


def test_set_condition_does_not_touch_its_input_or_other_conditions() -> None:
    before = _set(_set([], c.VALIDATED, "True", c.VALIDATED), c.PUSHED, "True", c.PUSHED)
    snapshot = [dict(x) for x in before]

    after = _set(before, c.VALIDATED, "False", c.INVALID_TEMPLATE, now=T1)

    assert before == snapshot
    assert [x["type"] for x in after] == ["Validated", "Pushed"]
    assert after[1] == before[1]


def test_set_condition_rejects_reasons_the_api_server_would_reject() -> None:
    with pytest.raises(ValueError, match="reason"):
        _set([], c.PUSHED, "False", "push rejected")


def test_set_condition_cuts_overlong_messages() -> None:
    conds = c.set_condition(
        [], c.PUSHED, "False", c.PUSH_REJECTED, "x" * 40000, generation=1, now=T0
    )

    assert len(conds[0]["message"]) == 32768
    assert conds[0]["message"].endswith("…")


def _summary(conds: list[dict[str, Any]], generation: int = 1) -> dict[str, tuple[str, str]]:
    out = c.summarize(conds, generation, T1)
    return {
        x["type"]: (x["status"], x["reason"])
        for x in out
        if x["type"] in ("Ready", "Reconciling", "Stalled")
    }


def test_summary_is_ready_when_every_domain_condition_is_true() -> None:
    conds = _set(_set([], c.VALIDATED, "True", c.VALIDATED), c.PUSHED, "True", c.PUSHED)

    assert _summary(conds) == {
        "Ready": ("True", "Ready"),
        "Reconciling": ("False", "Ready"),
        "Stalled": ("False", "Ready"),
    }


def test_summary_stalls_on_reasons_that_need_a_user() -> None:
    conds = _set(
        _set([], c.PUSHED, "False", c.REMOTE_UNREACHABLE),
        c.VALIDATED,
        "False",
        c.BRANCH_NOT_ALLOWED,
    )

    assert _summary(conds) == {
        "Ready": ("False", "BranchNotAllowed"),
        "Reconciling": ("False", "BranchNotAllowed"),
        "Stalled": ("True", "BranchNotAllowed"),
    }


def test_summary_reconciles_on_transient_failures() -> None:
    conds = _set(
        _set([], c.VALIDATED, "True", c.VALIDATED), c.PUSHED, "False", c.REMOTE_UNREACHABLE
    )

    assert _summary(conds)["Ready"] == ("False", "RemoteUnreachable")
    assert _summary(conds)["Reconciling"] == ("True", "RemoteUnreachable")
    assert _summary(conds)["Stalled"][0] == "False"


def test_summary_of_a_suspended_object_is_neither_reconciling_nor_stalled() -> None:
    conds = _set([], c.STREAMS_RUNNING, "False", c.SUSPENDED)

    assert _summary(conds) == {
        "Ready": ("False", "Suspended"),
        "Reconciling": ("False", "Suspended"),
        "Stalled": ("False", "Suspended"),
    }


@pytest.mark.parametrize(
    "conds",
    [
        [],
        _set([], c.PUSHED, "Unknown", c.PROGRESSING),
        _set([], c.PUSHED, "True", c.PUSHED, gen=1),
    ],
    ids=["nothing-yet", "unknown", "older-generation"],
)
def test_summary_is_progressing_until_the_generation_is_observed(
    conds: list[dict[str, Any]],
) -> None:
    assert _summary(conds, generation=2) == {
        "Ready": ("Unknown", "Progressing"),
        "Reconciling": ("True", "Progressing"),
        "Stalled": ("False", "Progressing"),
    }


def test_summary_keeps_its_transition_time_on_repeated_calls() -> None:
    conds = _set([], c.PUSHED, "True", c.PUSHED)
    first = c.summarize(conds, 1, T0)

    again = c.summarize(first, 1, T1)

    assert again == first
