"""CommitRequest status: conditions for every ending, which target problems fail a request."""

from __future__ import annotations

from typing import Any

import pytest

from kubescribe.api.gittarget import GitTargetSpec
from kubescribe.api.models import GitProviderSpec
from kubescribe.api.schema import LocalObjectReference
from kubescribe.controller.plan import Problem, ProviderPlan, TargetPlan
from kubescribe.controller.request_status import (
    Final,
    attribution_condition,
    expires_at,
    expiry_stamp,
    final_conditions,
    final_extra,
    is_final,
    progress_conditions,
    target_problem,
)
from kubescribe.mirror.authors import Author
from kubescribe.mirror.changes import TargetKey

KEY = TargetKey("ns", "mirror")
ALICE = Author("alice", "alice@example.invalid")
SHA = "0123456789abcdef0123456789abcdef01234567"


def plan(mode: str = "configured-author", **target: Any) -> TargetPlan:
    provider = ProviderPlan(
        ("ns", "git"),
        1,
        GitProviderSpec.model_validate(
            {"url": "https://git.example/r.git", "attribution": {"mode": mode}}
        ),
    )
    spec = GitTargetSpec(provider_ref=LocalObjectReference(name="git"), branch="main", **target)
    return TargetPlan(KEY, 1, spec, provider)


def table(conds: list[Any]) -> dict[str, tuple[str, str]]:
    return {c.type: (c.status, c.reason) for c in conds}


def test_pushed() -> None:
    attributed = attribution_condition(plan(), None)
    final = Final("Pushed", "Pushed 0123456789ab with 3 change(s)", "main", SHA, 3, ALICE)

    assert table(final_conditions(final, attributed)) == {
        "Ready": ("True", "Pushed"),
        "Reconciling": ("False", "Ok"),
        "Stalled": ("False", "Ok"),
        "Pushed": ("True", "Pushed"),
        "AuthorAttributed": ("False", "ConfiguredAuthor"),
    }
    assert final_extra(final) == {
        "branch": "main",
        "sha": SHA,
        "changes": 3,
        "author": "alice <alice@example.invalid>",
    }


def test_nothing_to_commit_is_benign() -> None:
    final = Final("NothingToCommit", "No open commit window", "main")
    conds = table(final_conditions(final, attribution_condition(plan(), None)))
    assert conds["Ready"] == ("True", "NothingToCommit")
    assert conds["Pushed"] == ("False", "NothingToCommit")
    assert conds["Stalled"] == ("False", "Ok")
    assert final_extra(final) == {"branch": "main"}


def test_failure_is_stalled_with_its_reason() -> None:
    final = Final("Suspended", "GitTarget ns/mirror is suspended (spec.suspend)")
    conds = table(final_conditions(final, attribution_condition(plan(), None)))
    assert conds["Ready"] == ("False", "Suspended")
    assert conds["Stalled"] == ("True", "Suspended")
    assert conds["Pushed"] == ("False", "Suspended")
    assert final_extra(final) == {}


def test_progress_is_reconciling() -> None:
    conds = table(
        progress_conditions("Collecting", "Collecting", attribution_condition(None, None))
    )
    assert conds == {
        "Ready": ("Unknown", "Collecting"),
        "Reconciling": ("True", "Collecting"),
        "Stalled": ("False", "Ok"),
        "Pushed": ("Unknown", "Collecting"),
        "AuthorAttributed": ("Unknown", "Waiting"),
    }


@pytest.mark.parametrize(
    ("mode", "requester", "expected"),
    [
        ("configured-author", ALICE, ("False", "ConfiguredAuthor")),
        ("attributed-author", None, ("False", "RequesterUnknown")),
        ("attributed-author", ALICE, ("True", "AuthorAttributed")),
    ],
)
def test_author_attributed(mode: str, requester: Author | None, expected: tuple[str, str]) -> None:
    cond = attribution_condition(plan(mode), requester)
    assert (cond.status, cond.reason) == expected


def test_target_problems() -> None:
    assert target_problem(plan()) is None
    assert target_problem(None) == ("TargetNotFound", "GitTarget not found")
    suspended = target_problem(plan(suspend=True))
    assert suspended is not None
    assert suspended[0] == "Suspended"
    overlapping = TargetPlan(
        KEY, 1, plan().spec, path_problem=Problem("PathOverlap", "overlaps ns/other")
    )
    assert target_problem(overlapping) == ("PathOverlap", "overlaps ns/other")


@pytest.mark.parametrize(
    ("status", "final"),
    [
        ({}, False),
        ({"conditions": [{"type": "Ready", "status": "Unknown", "observedGeneration": 1}]}, False),
        ({"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 1}]}, True),
        ({"conditions": [{"type": "Ready", "status": "False", "observedGeneration": 1}]}, True),
        ({"conditions": [{"type": "Ready", "status": "True", "observedGeneration": 0}]}, False),
    ],
)
def test_is_final(status: dict[str, Any], final: bool) -> None:
    assert is_final({"metadata": {"generation": 1}, "status": status}) is final


def _ready_at(stamp: str, **status: Any) -> dict[str, Any]:
    conds = [{"type": "Ready", "status": "True", "lastTransitionTime": stamp}]
    return {"status": {"conditions": conds, **status}}


@pytest.mark.parametrize(
    ("spec", "after"),
    [({}, 86400.0), ({"ttlAfterFinished": "90s"}, 90.0), ({"ttlAfterFinished": "0s"}, 0.0),
     ({"ttlAfterFinished": "soon"}, 86400.0)],  # unreadable: the default
)  # fmt: skip
def test_a_request_finished_before_expiresAt_existed_expires_after_its_ttl(
    spec: dict[str, str], after: float
) -> None:
    obj = {**_ready_at("2026-12-03T10:00:00Z"), "spec": spec}
    assert expires_at(obj) == 1796292000.0 + after


def test_the_written_expiry_wins_and_is_what_a_finish_writes() -> None:
    obj = {**_ready_at("2026-12-03T10:00:00Z", expiresAt="2026-12-03T10:00:05Z"), "spec": {}}
    assert expires_at(obj) == 1796292005.0
    assert expiry_stamp({"spec": {"ttlAfterFinished": "1h30m"}}, 1796292000.0) == (
        "2026-12-03T11:30:00Z"
    )
    assert expires_at({"status": {}}) is None
    assert expires_at(_ready_at("yesterday")) is None
