"""Commit window rules with a fake clock: silence, age, author, size, target, holds, requests."""

from __future__ import annotations

import pytest

from kubescribe.mirror import messages
from kubescribe.mirror.authors import UNRESOLVED, Author
from kubescribe.mirror.changes import Change, Operation, TargetKey
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.window import (
    CloseReason,
    WindowPolicy,
    Windows,
    parse_duration,
)

CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)
DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True)
A = TargetKey("team", "a")
B = TargetKey("team", "b")
ALICE = Author("alice", "alice@example.invalid")
BOB = Author("bob", "bob@example.invalid")
FIVE = WindowPolicy(5.0)


def change(
    name: str,
    target: TargetKey = A,
    op: Operation = Operation.CREATE,
    rtype: ResourceType = CONFIGMAPS,
) -> Change:
    identity = Identity(rtype.group, rtype.kind, "ns", name)
    return Change(target, op, identity, rtype, None, 0.0)


def names(changes: tuple[Change, ...]) -> list[str]:
    return [c.identity.name for c in changes]


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0s", 0.0), ("5s", 5.0), ("500ms", 0.5), ("1m30s", 90.0), ("1.5s", 1.5), ("2h", 7200.0)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "s", "5 s", "-1s", "5d", "1s2", "1e3s"])
def test_invalid_durations(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_window_zero_commits_each_change_alone() -> None:
    windows = Windows()

    admitted = windows.add(change("x"), ALICE, WindowPolicy(0), now=0)

    assert admitted.alone
    assert not admitted.opened
    assert len(windows) == 0
    assert windows.next_deadline({A: WindowPolicy(0)}) is None


def test_rolling_silence_groups_a_burst_and_closes_after_the_quiet_period() -> None:
    windows = Windows()
    policies = {A: FIVE}

    first = windows.add(change("one"), ALICE, FIVE, now=0)
    windows.add(change("two"), ALICE, FIVE, now=3)
    windows.add(change("three"), ALICE, FIVE, now=7)  # each change restarts the timer

    assert first.opened
    assert not first.alone
    assert windows.next_deadline(policies) == 12
    assert windows.due(policies, now=11.9) == []
    [closed] = windows.due(policies, now=12)
    assert closed.reason is CloseReason.SILENCE
    assert names(closed.changes) == ["one", "two", "three"]
    assert (closed.author, closed.opened_at, closed.closed_at) == (ALICE, 0, 12)
    assert len(windows) == 0
    after = windows.add(change("four"), ALICE, FIVE, now=30)
    assert after.opened  # a change after the window is a new window


def test_a_steady_drip_is_closed_by_age() -> None:
    windows = Windows()
    policy = WindowPolicy(5.0)  # max open: 60 s
    policies = {A: policy}
    t = 0.0
    while t < 60:
        windows.add(change(f"c{t}"), ALICE, policy, now=t)
        assert windows.due(policies, now=t) == []
        t += 4
    [closed] = windows.due(policies, now=60)
    assert closed.reason is CloseReason.AGE
    assert len(closed.changes) == 15


def test_another_author_closes_the_window() -> None:
    windows = Windows()

    windows.add(change("one"), ALICE, FIVE, now=0)
    admitted = windows.add(change("two"), BOB, FIVE, now=1)

    [closed] = admitted.closed
    assert closed.reason is CloseReason.AUTHOR
    assert (closed.author, names(closed.changes)) == (ALICE, ["one"])
    assert admitted.opened
    window = windows.get(A)
    assert window is not None
    assert window.author == BOB


def test_another_author_with_window_zero_still_closes_first() -> None:
    windows = Windows()
    hold = windows.hold(A, ALICE)
    windows.add(change("one"), ALICE, WindowPolicy(0), now=0)
    windows.release(hold)

    admitted = windows.add(change("two"), BOB, WindowPolicy(0), now=1)

    assert admitted.alone
    assert [c.reason for c in admitted.closed] == [CloseReason.AUTHOR]


def test_targets_have_their_own_windows() -> None:
    windows = Windows()
    policies = {A: FIVE, B: WindowPolicy(1.0)}

    windows.add(change("a1"), ALICE, FIVE, now=0)
    other = windows.add(change("b1", B), BOB, policies[B], now=0.5)
    windows.add(change("a2"), ALICE, FIVE, now=1)

    assert other.closed == ()  # another target never closes a window
    [closed] = windows.due(policies, now=1.5)
    assert (closed.target, names(closed.changes)) == (B, ["b1"])
    window = windows.get(A)
    assert window is not None
    assert names(tuple(window.changes)) == ["a1", "a2"]


def test_size_cap_closes_the_window_at_the_limit() -> None:
    windows = Windows()
    policy = WindowPolicy(5.0, max_changes=3)

    results = [windows.add(change(f"c{i}"), ALICE, policy, now=i) for i in range(4)]

    [closed] = results[2].closed
    assert closed.reason is CloseReason.SIZE
    assert names(closed.changes) == ["c0", "c1", "c2"]
    assert results[3].opened


def test_snapshot_or_reconfiguration_closes_the_target_window() -> None:
    windows = Windows()
    windows.add(change("one"), ALICE, FIVE, now=0)

    closed = windows.close(A, CloseReason.TARGET, now=1)

    assert closed is not None
    assert closed.reason is CloseReason.TARGET
    assert windows.close(A, CloseReason.TARGET, now=2) is None


def test_shutdown_closes_every_window_in_target_order() -> None:
    windows = Windows()
    windows.add(change("b", B), ALICE, FIVE, now=0)
    windows.add(change("a"), BOB, FIVE, now=0)

    closed = windows.close_all(CloseReason.SHUTDOWN, now=1)

    assert [(c.target, c.reason) for c in closed] == [
        (A, CloseReason.SHUTDOWN),
        (B, CloseReason.SHUTDOWN),
    ]
    assert len(windows) == 0


def test_a_hold_keeps_the_requesters_window_open_and_opens_one_at_window_zero() -> None:
    windows = Windows()
    zero = WindowPolicy(0)
    hold = windows.hold(A, ALICE)

    held = windows.add(change("one"), ALICE, zero, now=0)
    other = windows.add(change("b", B), ALICE, zero, now=0)

    assert held.opened
    assert not held.alone
    assert other.alone  # the hold is for target A only
    assert windows.due({A: zero}, now=1000) == []
    assert windows.next_deadline({A: zero}) is None
    closed = windows.close_for(hold, now=1001)
    assert closed is not None
    assert closed.reason is CloseReason.REQUEST
    assert names(closed.changes) == ["one"]


def test_a_request_never_closes_another_authors_window() -> None:
    windows = Windows()
    windows.add(change("one"), BOB, FIVE, now=0)
    hold = windows.hold(A, ALICE)

    assert windows.close_for(hold, now=1) is None
    assert windows.get(A) is not None
    assert windows.due({A: FIVE}, now=5) != []  # Bob's window is not held by Alice's request


def test_an_unknown_requester_matches_only_the_unresolved_author() -> None:
    windows = Windows()
    windows.add(change("one"), UNRESOLVED, FIVE, now=0)
    hold = windows.hold(A, UNRESOLVED)

    closed = windows.close_for(hold, now=1)

    assert closed is not None
    assert closed.author == UNRESOLVED


def test_a_hold_for_any_author_matches_every_window() -> None:
    windows = Windows()
    windows.add(change("one"), BOB, FIVE, now=0)
    hold = windows.hold(A, None)

    assert windows.due({A: FIVE}, now=100) == []
    windows.release(hold)
    assert [c.reason for c in windows.due({A: FIVE}, now=100)] == [CloseReason.SILENCE]


def test_group_message_fields() -> None:
    changes = [
        change("a"),
        change("b"),
        change("a", op=Operation.UPDATE),
        change("web", op=Operation.DELETE, rtype=DEPLOYMENTS),
    ]

    values = messages.group_values(changes, "team/a", "alice")

    assert values == {
        "count": 4,
        "operations": "2 created, 1 updated, 1 deleted",
        "resources": "configmaps, deployments.apps",
        "kinds": "ConfigMap, Deployment",
        "target": "team/a",
        "author": "alice",
    }
    subject = messages.render(messages.DEFAULT_GROUP_TEMPLATE, values)
    assert subject == "4 changes: 2 created, 1 updated, 1 deleted (ConfigMap, Deployment)\n"
    messages.validate(messages.DEFAULT_GROUP_TEMPLATE, messages.GROUP_FIELDS)
    with pytest.raises(messages.TemplateError, match="name"):
        messages.validate("{count} {name}", messages.GROUP_FIELDS)


def test_many_kinds_are_shortened() -> None:
    kinds = [ResourceType("g", "v1", f"r{i}", f"Kind{i}", True) for i in range(7)]

    values = messages.group_values([change("x", rtype=k) for k in kinds], "t", "a")

    assert values["kinds"] == "Kind0, Kind1, Kind2, Kind3, Kind4 and 2 more"


def test_message_with_body() -> None:
    assert messages.with_body("Release 1.2\n", ["CREATE ConfigMap ns/a\n", "DELETE X y\n"]) == (
        "Release 1.2\n\nCREATE ConfigMap ns/a\nDELETE X y\n"
    )
    assert messages.with_body("Only a subject", []) == "Only a subject\n"
