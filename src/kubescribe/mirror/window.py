"""Commit windows: which live changes become one commit (pure rules, the clock is an argument).

A window belongs to one GitTarget and one author. Changes to that target by that author join
it while they keep arriving within `seconds` of each other (rolling silence: every change
restarts the timer). A window closes when:

- `silence`: no change for `seconds`;
- `age`: it has been open for `max_open` (a steady drip must not hold changes back forever);
- `author`: a change by another author arrives for the same target (one window per target
  keeps the target's commits in the order of its changes);
- `size`: it holds `max_changes` changes;
- `target`: the target itself moved on: a snapshot of it, or a reconfiguration (removed,
  suspended, another folder or attribution mode, the window set to 0);
- `request`: a CommitRequest closed it;
- `shutdown`: the worker stops.

A *hold* (a CommitRequest that is still collecting) keeps the matching windows open past
silence and age, and opens windows even when `seconds` is 0, so the request's changes end up
in its commit. Windows with `seconds == 0` and no hold do not exist: each change is committed
on its own.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field

from kubescribe.mirror.authors import Author
from kubescribe.mirror.changes import Change, Cursor, TargetKey

DEFAULT_MAX_CHANGES = 500
MIN_MAX_OPEN = 60.0
MAX_OPEN_FACTOR = 10.0

_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


class CloseReason(enum.StrEnum):
    SILENCE = "silence"
    AGE = "age"
    AUTHOR = "author"
    SIZE = "size"
    TARGET = "target"
    REQUEST = "request"
    SHUTDOWN = "shutdown"


def parse_duration(text: str) -> float:
    """Seconds of a duration like `5s`, `500ms`, `1m30s` or `0s` (Go syntax, units ms/s/m/h)."""
    value = text.strip()
    parts = _DURATION.findall(value)
    if not value or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"invalid duration {text!r} (examples: 5s, 500ms, 1m30s, 0s)")
    return sum(float(number) * _UNITS[unit] for number, unit in parts)


@dataclass(frozen=True)
class WindowPolicy:
    """How a target's changes are grouped. `seconds == 0`: one commit per change."""

    seconds: float = 0.0
    max_changes: int = DEFAULT_MAX_CHANGES

    def __post_init__(self) -> None:
        if self.seconds < 0:
            raise ValueError("a commit window cannot be negative")
        if self.max_changes < 1:
            raise ValueError("max_changes must be at least 1")

    @property
    def max_open(self) -> float:
        return max(MIN_MAX_OPEN, MAX_OPEN_FACTOR * self.seconds)


@dataclass
class Window:
    """An open window: the changes of one author to one target, oldest first, and the
    cursors of dropped changes that arrived while it was open (`carried`)."""

    target: TargetKey
    author: Author
    opened_at: float
    last_at: float
    changes: list[Change] = field(default_factory=list)
    carried: list[Cursor] = field(default_factory=list)

    def deadline(self, policy: WindowPolicy) -> float:
        """When the window closes unless a change, a hold or a request comes first."""
        return min(self.last_at + policy.seconds, self.opened_at + policy.max_open)


@dataclass(frozen=True)
class Closed:
    """A closed window: its changes become one commit; the `carried` cursors are
    acknowledged with it."""

    target: TargetKey
    author: Author
    changes: tuple[Change, ...]
    reason: CloseReason
    opened_at: float
    closed_at: float
    carried: tuple[Cursor, ...] = ()


@dataclass(frozen=True)
class Admitted:
    """What adding one change did. `alone`: no window, the change is committed on its own.
    `closed`: windows this change closed (by author or size), oldest first."""

    alone: bool
    opened: bool
    closed: tuple[Closed, ...] = ()


@dataclass(frozen=True, eq=False)
class Hold:
    """Keeps the windows of `target` open; `author` None matches every author."""

    target: TargetKey
    author: Author | None

    def matches(self, window: Window) -> bool:
        return window.target == self.target and self.author in (None, window.author)


class Windows:
    """The open windows of one branch worker, at most one per target."""

    def __init__(self) -> None:
        self._open: dict[TargetKey, Window] = {}
        self._holds: list[Hold] = []

    def __len__(self) -> int:
        return len(self._open)

    def get(self, target: TargetKey) -> Window | None:
        return self._open.get(target)

    @property
    def changes(self) -> int:
        """Changes waiting in open windows."""
        return sum(len(w.changes) for w in self._open.values())

    def targets(self) -> list[TargetKey]:
        return sorted(self._open)

    # -- holds -----------------------------------------------------------------------------
    def hold(self, target: TargetKey, author: Author | None) -> Hold:
        hold = Hold(target, author)
        self._holds.append(hold)
        return hold

    def release(self, hold: Hold) -> None:
        self._holds = [h for h in self._holds if h is not hold]

    def held(self, target: TargetKey, author: Author) -> bool:
        return any(h.target == target and h.author in (None, author) for h in self._holds)

    def holds(self, target: TargetKey) -> list[Hold]:
        return [h for h in self._holds if h.target == target]

    # -- changes ---------------------------------------------------------------------------
    def add(self, change: Change, author: Author, policy: WindowPolicy, now: float) -> Admitted:
        """Add a live change by `author` at `now`."""
        target = change.target
        closed: list[Closed] = []
        window = self._open.get(target)
        if window is not None and window.author != author:
            closed.append(self._close(window, CloseReason.AUTHOR, now))
            window = None
        opened = False
        if window is None:
            if policy.seconds <= 0 and not self.held(target, author):
                return Admitted(alone=True, opened=False, closed=tuple(closed))
            window = self._open[target] = Window(target, author, now, now)
            opened = True
        window.changes.append(change)
        window.last_at = now
        if len(window.changes) >= policy.max_changes:
            closed.append(self._close(window, CloseReason.SIZE, now))
        return Admitted(alone=False, opened=opened, closed=tuple(closed))

    def carry(self, target: TargetKey, cursor: Cursor) -> bool:
        """Keep the cursor of a dropped change (`spec.ignore`) with the target's open window,
        so it is acknowledged only with the changes before it; its timers are untouched.
        False when no window is open."""
        window = self._open.get(target)
        if window is None:
            return False
        window.carried.append(cursor)
        return True

    def due(self, policies: dict[TargetKey, WindowPolicy], now: float) -> list[Closed]:
        """Close the windows whose silence (or age) deadline passed; held ones stay open."""
        closed = []
        for target in sorted(self._open):
            window = self._open[target]
            if any(h.matches(window) for h in self._holds):
                continue
            policy = policies.get(target, WindowPolicy())
            if now >= window.deadline(policy):
                reason = (
                    CloseReason.SILENCE
                    if now >= window.last_at + policy.seconds
                    else CloseReason.AGE
                )
                closed.append(self._close(window, reason, now))
        return closed

    def next_deadline(self, policies: dict[TargetKey, WindowPolicy]) -> float | None:
        """The earliest deadline of a window that is not held; None when there is none."""
        deadlines = [
            w.deadline(policies.get(t, WindowPolicy()))
            for t, w in self._open.items()
            if not any(h.matches(w) for h in self._holds)
        ]
        return min(deadlines, default=None)

    def close(self, target: TargetKey, reason: CloseReason, now: float) -> Closed | None:
        """Close the target's window, whoever's it is (snapshot, reconfiguration)."""
        window = self._open.get(target)
        return None if window is None else self._close(window, reason, now)

    def close_for(self, hold: Hold, now: float) -> Closed | None:
        """A request closes the target's window only when it is the requester's."""
        window = self._open.get(hold.target)
        if window is None or not hold.matches(window):
            return None
        return self._close(window, CloseReason.REQUEST, now)

    def close_all(self, reason: CloseReason, now: float) -> list[Closed]:
        return [self._close(self._open[t], reason, now) for t in sorted(self._open)]

    def _close(self, window: Window, reason: CloseReason, now: float) -> Closed:
        del self._open[window.target]
        return Closed(
            window.target,
            window.author,
            tuple(window.changes),
            reason,
            window.opened_at,
            now,
            tuple(window.carried),
        )
