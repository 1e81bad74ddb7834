"""A GitTarget's `spec.commit` over its GitProvider's: merged field by field, and every hostile
value a condition reason, never an exception out of the plan compiler."""

from __future__ import annotations

from typing import Any

import pytest

from kubescribe.controller.desired import compile_plan
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY
from kubescribe.mirror.window import WindowPolicy
from tests.unit.test_desired import TYPES, provider, target

KEY = TargetKey("ns", "t")


def plan_of(own: Any, **provider_spec: Any) -> Any:
    plan = compile_plan(
        [provider(**provider_spec)],
        [target("t", "a", commit=own), target("u", "b")],
        [],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )
    return plan.targets[KEY], plan.targets[TargetKey("ns", "u")]


def test_set_fields_override_the_provider_for_that_target_only() -> None:
    own, other = plan_of(
        {"commitWindow": "2s", "message": {"group": "{count} in {target}"}},
        push={"commitWindow": "10s", "maxChangesPerCommit": 7},
        commit={"message": {"change": "did {operation} {ref}"}},
    )
    assert own.problem is None
    assert own.commit is not None
    assert own.commit.window == WindowPolicy(2.0, 7)
    assert own.commit.group == "{count} in {target}"
    assert own.commit.change == "did {operation} {ref}"  # the provider's, not overridden
    assert other.commit.window == WindowPolicy(10.0, 7)
    assert other.commit.group != own.commit.group


@pytest.mark.parametrize(
    ("commit", "reason"),
    [
        ({"message": {"change": "{nope}"}}, "InvalidTemplate"),
        ({"message": {"group": "{count:>99999999}"}}, "InvalidTemplate"),
        ({"message": {"snapshot": "{"}}, "InvalidTemplate"),
        ({"message": {"change": "{0}{1}"}}, "InvalidTemplate"),
        ({"message": {"change": "{name.__class__}"}}, "InvalidTemplate"),
        ({"message": {"change": "{name[0]}"}}, "InvalidTemplate"),
        ({"message": {"change": ""}}, "InvalidSpec"),
        ({"message": {"change": 7}}, "InvalidSpec"),
        ({"commitWindow": "2h"}, "InvalidSpec"),
        ({"commitWindow": "9" * 31 + "h"}, "InvalidSpec"),
        ({"commitWindow": "forever"}, "InvalidSpec"),
        ({"commitWindow": "-1s"}, "InvalidSpec"),
        ({"maxChangesPerCommit": 0}, "InvalidSpec"),
        ({"maxChangesPerCommit": "many"}, "InvalidSpec"),
        ("everything", "InvalidSpec"),
        ([1, 2], "InvalidSpec"),
    ],
)
def test_a_hostile_value_is_the_target_s_condition_and_its_neighbour_is_unharmed(
    commit: Any, reason: str
) -> None:
    own, other = plan_of(commit)
    assert own.problem is not None
    assert own.problem.reason == reason
    assert not own.writable
    assert other.problem is None
    assert other.writable
