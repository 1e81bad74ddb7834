"""Where a GitTarget's mirror is written (`status.observedDestination`) and whether a change
of `spec.branch` or `spec.path` is being moved there (pure)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from kubescribe.controller.plan import TargetPlan
from kubescribe.mirror.layout import LayoutError, normalize_target_path


class Destination(NamedTuple):
    branch: str
    folder: str  # normalized ('' = the repository's root)

    def status(self, path: str) -> dict[str, str]:
        return {"branch": self.branch, "path": path}


def planned(t: TargetPlan) -> Destination | None:
    """The destination the spec names (None: no spec)."""
    if t.spec is None:
        return None
    return Destination(t.spec.branch, t.folder)


def observed(obj: Mapping[str, Any] | None) -> Destination | None:
    """The destination a GitTarget's status says the mirror is written to (None: none yet, or
    a value that does not parse: the spec's is taken then)."""
    status = (obj or {}).get("status") or {}
    seen = status.get("observedDestination")
    if not isinstance(seen, Mapping):
        return None
    branch, path = seen.get("branch"), seen.get("path")
    if not isinstance(branch, str) or not isinstance(path, str) or not branch:
        return None
    try:
        return Destination(branch, normalize_target_path(path))
    except LayoutError:
        return None


def moving(t: TargetPlan, seen: Destination | None) -> bool:
    """Whether the target's spec names another destination than the one written so far."""
    wanted = planned(t)
    return seen is not None and wanted is not None and seen != wanted


def moved_from(t: TargetPlan, seen: Destination | None) -> str | None:
    """The old folder the move leaves, when it is on the same branch (None: no move, or a
    move to another branch, whose old files stay where they are)."""
    wanted = planned(t)
    if seen is None or wanted is None or seen == wanted or seen.branch != wanted.branch:
        return None
    return seen.folder


def status_field(t: TargetPlan, seen: Destination | None, moved: bool) -> dict[str, str] | None:
    """`status.observedDestination`: the spec's once there is nothing to move or the move is
    done (`moved`), the one written so far otherwise (None: unknown)."""
    wanted = planned(t)
    if t.spec is None or wanted is None:
        return None
    if seen is None or seen == wanted or moved:
        return wanted.status(t.spec.path)
    return seen.status(seen.folder or ".")


def overlap_order(t: TargetPlan, obj: Mapping[str, Any]) -> tuple[bool, str, str, str]:
    """Which of two overlapping targets keeps the folder: one that stays before one moving in
    (a move never takes another target's folder), then the older one."""
    created = str((obj.get("metadata") or {}).get("creationTimestamp", ""))
    return (moving(t, observed(obj)), created, t.key.namespace, t.key.name)
