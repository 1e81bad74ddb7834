"""Where a GitTarget is written, and moves of it, decided without I/O."""

from __future__ import annotations

from typing import Any

import pytest

from kubescribe.controller.desired import compile_plan
from kubescribe.controller.destinations import (
    Destination,
    moved_from,
    moving,
    observed,
    status_field,
)
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY
from tests.unit.test_desired import TYPES, provider, rule, target


def seen(branch: str, path: str) -> dict[str, Any]:
    return {"status": {"observedDestination": {"branch": branch, "path": path}}}


@pytest.mark.parametrize(
    "obj",
    [
        None,
        {},
        {"status": {"observedDestination": "main:apps"}},
        seen("", "apps"),
        seen("main", "../escape"),
        seen("main", "/abs"),
        {"status": {"observedDestination": {"branch": 1, "path": []}}},
    ],
)
def test_a_status_that_does_not_parse_names_no_destination(obj: Any) -> None:
    assert observed(obj) is None


def test_a_path_move_on_one_branch_leaves_the_old_folder() -> None:
    plan = compile_plan([provider()], [target("t", "./new/")], [], [], TYPES, DEFAULT_NOISE_POLICY)
    t = plan.targets[TargetKey("ns", "t")]
    old = observed(seen("main", "old/"))
    assert old == Destination("main", "old")
    assert moving(t, old)
    assert moved_from(t, old) == "old"
    assert status_field(t, old, moved=False) == {"branch": "main", "path": "old"}
    assert status_field(t, old, moved=True) == {"branch": "main", "path": "./new/"}
    here = observed(seen("main", "new"))
    assert not moving(t, here)
    assert moved_from(t, here) is None
    assert status_field(t, None, moved=False) == {"branch": "main", "path": "./new/"}
    elsewhere = observed(seen("dev", "old"))
    assert moving(t, elsewhere)
    assert moved_from(t, elsewhere) is None


def test_a_target_moving_into_a_folder_never_takes_it_from_the_one_there() -> None:
    older = target("older", "taken/inner") | seen("main", "mine")
    younger = target("younger", "taken", created="2026-02-01T00:00:00Z")
    plan = compile_plan(
        [provider()],
        [older, younger],
        [rule("r1", "older"), rule("r2", "younger")],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )
    assert plan.targets[TargetKey("ns", "younger")].writable
    refused = plan.targets[TargetKey("ns", "older")].path_problem
    assert refused is not None
    assert refused.reason == "PathOverlap"
