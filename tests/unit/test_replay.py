"""The replay rule: of a resumed watch's backlog only the events that are still their object's
current state are applied, so a change already in Git makes no commit, whatever the order."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given
from hypothesis import strategies as st

from kubescribe.mirror.replay import horizon, in_backlog, is_current, reached, states, version


def test_an_update_of_an_object_deleted_since_is_stale() -> None:
    # The old owner pushed MODIFIED(rv 11) and DELETED(rv 12); the cursor said 10.
    assert not is_current("MODIFIED", "11", None)
    assert is_current("DELETED", "12", None)


def test_an_object_replayed_with_its_current_content_is_applied() -> None:
    # Git already holds it: the writer compares bytes and makes no commit.
    assert is_current("MODIFIED", "11", "11")
    assert is_current("ADDED", "11", "11")


def test_an_update_superseded_by_a_later_one_is_stale() -> None:
    assert not is_current("MODIFIED", "11", "14")


def test_a_delete_of_an_object_created_again_since_is_stale() -> None:
    assert not is_current("DELETED", "12", "13")
    assert is_current("ADDED", "13", "13")


def test_the_horizon_lies_past_the_cursor_or_there_is_no_backlog() -> None:
    assert horizon("10", "15") == "15"
    assert horizon("15", "15") is None
    assert horizon("16", "15") is None
    assert horizon("10", "not-a-number") is None
    assert horizon("opaque", "15") is None
    assert in_backlog("15", "15")
    assert in_backlog("11", "15")
    assert not in_backlog("16", "15")
    assert not in_backlog("opaque", "15")  # applied as it comes
    assert reached("15", "15")
    assert not reached("14", "15")
    assert version("007") == 7


def test_listed_states_by_key() -> None:
    items = [
        {"metadata": {"namespace": "ns", "name": "a", "resourceVersion": "3"}},
        {"metadata": {"name": "cluster-wide", "resourceVersion": "4"}},
    ]
    assert states(items) == {("ns", "a"): "3", ("", "cluster-wide"): "4"}


@dataclass(frozen=True)
class Event:
    type: str
    key: str
    rv: int
    content: str | None  # None for a delete


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[Event], int]:
    """Changes to a few objects, in resourceVersion order, and a cursor inside them."""
    events: list[Event] = []
    alive: dict[str, bool] = {}
    rv = 1
    for _ in range(draw(st.integers(1, 30))):
        key = draw(st.sampled_from("abc"))
        rv += draw(st.integers(1, 3))
        if alive.get(key):
            if draw(st.booleans()):
                events.append(Event("DELETED", key, rv, None))
                alive[key] = False
            else:
                events.append(Event("MODIFIED", key, rv, f"{key}@{rv}"))
        else:
            events.append(Event("ADDED", key, rv, f"{key}@{rv}"))
            alive[key] = True
    cursor = draw(st.integers(0, rv))
    return events, cursor


def state_at(events: list[Event], rv: int) -> dict[str, Event]:
    """Each live object's last event up to `rv`."""
    now: dict[str, Event] = {}
    for event in events:
        if event.rv > rv:
            break
        if event.content is None:
            now.pop(event.key, None)
        else:
            now[event.key] = event
    return now


def replay(git: dict[str, str], backlog: list[Event], current: dict[str, Event]) -> int:
    """Apply the backlog by the rule as the writer would; the commits it makes."""
    commits = 0
    for event in backlog:
        state = str(current[event.key].rv) if event.key in current else None
        if not is_current(event.type, str(event.rv), state):
            continue
        before = git.get(event.key)
        if event.content is None:
            git.pop(event.key, None)
        else:
            git[event.key] = event.content
        commits += git.get(event.key) != before
    return commits


def contents(state: dict[str, Event]) -> dict[str, str]:
    return {key: event.content for key, event in state.items() if event.content is not None}


@given(histories(), st.randoms(use_true_random=False))
def test_a_replay_of_what_git_holds_commits_nothing_in_any_order(
    history: tuple[list[Event], int], rnd: object
) -> None:
    events, cursor = history
    latest = events[-1].rv
    current = state_at(events, latest)
    backlog = [e for e in events if e.rv > cursor]
    rnd.shuffle(backlog)  # type: ignore[attr-defined]
    git = contents(current)  # the previous owner pushed everything; its cursor stayed behind
    assert replay(git, backlog, current) == 0
    assert git == contents(current)  # no delete resurrected


@given(histories(), st.randoms(use_true_random=False))
def test_a_replay_catches_up_with_at_most_one_commit_per_object(
    history: tuple[list[Event], int], rnd: object
) -> None:
    events, cursor = history
    current = state_at(events, events[-1].rv)
    backlog = [e for e in events if e.rv > cursor]
    rnd.shuffle(backlog)  # type: ignore[attr-defined]
    git = contents(state_at(events, cursor))  # nothing after the cursor was pushed
    commits = replay(git, backlog, current)
    assert git == contents(current)
    assert commits <= len({e.key for e in backlog})
