"""Which events of a resumed watch's backlog to apply (pure rules; the I/O is `kube.backlog`).

A watch resumed from a saved cursor first delivers its *backlog*: every event after the cursor
up to the collection's resourceVersion when the resume began (the *horizon*). The cursor can be
older than what Git holds (the previous owner pushed changes whose cursor it could not save), so
the backlog may replay states Git has already left behind: an update of an object deleted since,
a delete of an object created again since. Applied in turn, each would make a commit and the
next one another, and the history would show an object come back that never did.

The rule: a backlog event is applied only when it is still the object's current state, as the
stream sees it at or after the horizon. An ADDED or MODIFIED is current when the object exists
with that very resourceVersion; a DELETED when the object is absent. Any other backlog event is
stale and skipped: a later event of the same object, in the backlog or live, carries the current
state. Events past the horizon are live and always applied.

So of one object's backlog at most the events that equal its current state are applied, whatever
order they come in, and a change already in Git then makes no commit (the writer compares bytes:
the same document, or no file left to delete).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

DELETED = "DELETED"


def version(rv: str) -> int | None:
    """A resourceVersion as a number (one API server's are increasing integers in practice);
    None when it is not one, and then nothing is ordered by it."""
    try:
        return int(rv)
    except ValueError:
        return None


def horizon(cursor: str, collection: str) -> str | None:
    """The backlog's last resourceVersion: the collection's (read as the resume begins) when it
    lies past the cursor; None when there is no backlog to check (or versions are not numbers:
    every event is then applied as it comes, as before this rule)."""
    since, until = version(cursor), version(collection)
    if since is None or until is None or until <= since:
        return None
    return collection


def in_backlog(rv: str, horizon: str) -> bool:
    """Whether an event (or bookmark) at `rv` is still in the backlog that ends at `horizon`."""
    at, until = version(rv), version(horizon)
    return at is not None and until is not None and at <= until


def reached(bookmark: str, horizon: str) -> bool:
    """Whether a bookmark at `bookmark` says every event of the backlog has been delivered."""
    at, until = version(bookmark), version(horizon)
    return at is not None and until is not None and at >= until


def is_current(event_type: str, rv: str, state: str | None) -> bool:
    """Whether a backlog event is the object's current state; `state` is the object's
    resourceVersion in the stream's view now (None: absent, or outside the stream's selector)."""
    if event_type == DELETED:
        return state is None
    return state == rv


def states(items: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """(namespace, name) -> resourceVersion of listed objects: the current states of a list."""
    found = {}
    for item in items:
        meta = item.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        found[key] = str(meta.get("resourceVersion") or "")
    return found
