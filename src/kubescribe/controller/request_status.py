"""What a CommitRequest's status says: its conditions while it runs and once it ends, which
target problems fail it, and when a finished request expires. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kubescribe.api import conditions as c
from kubescribe.controller.plan import TargetPlan
from kubescribe.controller.status import Cond
from kubescribe.mirror.authors import Author
from kubescribe.mirror.window import parse_duration

DEFAULT_TTL = 24 * 3600.0  # spec.ttlAfterFinished when unset


@dataclass(frozen=True)
class Final:
    """How a request ended."""

    reason: str
    message: str
    branch: str | None = None
    sha: str | None = None
    changes: int | None = None
    author: Author | None = None

    @property
    def ok(self) -> bool:
        return self.reason in (c.PUSHED, c.NOTHING_TO_COMMIT)


def attribution_condition(plan: TargetPlan | None, requester: Author | None) -> Cond:
    """Whether the request closes a window of an attributed author (its requester)."""
    provider = plan.provider.spec if plan is not None and plan.provider is not None else None
    if provider is None:
        return Cond(c.AUTHOR_ATTRIBUTED, "Unknown", c.WAITING, "The GitTarget is not known yet")
    if provider.attribution.mode != "attributed-author":
        return Cond(
            c.AUTHOR_ATTRIBUTED,
            "False",
            c.CONFIGURED_AUTHOR,
            "The GitProvider uses configured-author: every window is the committer's",
        )
    if requester is None:
        return Cond(
            c.AUTHOR_ATTRIBUTED,
            "False",
            c.REQUESTER_UNKNOWN,
            "No admission record names the requester: only a window whose author is"
            " unresolved is closed",
        )
    return Cond(
        c.AUTHOR_ATTRIBUTED,
        "True",
        c.AUTHOR_ATTRIBUTED,
        f"Requested by {requester.name} <{requester.email}>: only their window is closed",
    )


def progress_conditions(reason: str, message: str, attributed: Cond) -> list[Cond]:
    return [
        Cond(c.READY, "Unknown", reason, message),
        Cond(c.RECONCILING, "True", reason, message),
        Cond(c.STALLED, "False", c.OK, ""),
        Cond(c.PUSHED, "Unknown", reason, message),
        attributed,
    ]


def final_conditions(final: Final, attributed: Cond) -> list[Cond]:
    if final.reason == c.PUSHED:
        ready = Cond(c.READY, "True", c.PUSHED, final.message)
        pushed = Cond(c.PUSHED, "True", c.PUSHED, final.message)
        stalled = Cond(c.STALLED, "False", c.OK, "")
    elif final.reason == c.NOTHING_TO_COMMIT:
        ready = Cond(c.READY, "True", c.NOTHING_TO_COMMIT, final.message)
        pushed = Cond(c.PUSHED, "False", c.NOTHING_TO_COMMIT, final.message)
        stalled = Cond(c.STALLED, "False", c.OK, "")
    else:
        ready = Cond(c.READY, "False", final.reason, final.message)
        pushed = Cond(c.PUSHED, "False", final.reason, final.message)
        stalled = Cond(c.STALLED, "True", final.reason, final.message)
    return [ready, Cond(c.RECONCILING, "False", c.OK, ""), stalled, pushed, attributed]


def final_extra(final: Final) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if final.branch is not None:
        extra["branch"] = final.branch
    if final.sha is not None:
        extra["sha"] = final.sha
    if final.changes is not None and final.sha is not None:
        extra["changes"] = final.changes
    if final.author is not None and final.sha is not None:
        extra["author"] = f"{final.author.name} <{final.author.email}>"
    return extra


def is_final(obj: Mapping[str, Any]) -> bool:
    """A request whose Ready is True or False for its generation is done."""
    generation = int((obj.get("metadata") or {}).get("generation") or 0)
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == c.READY:
            return bool(
                cond.get("status") in ("True", "False")
                and cond.get("observedGeneration") == generation
            )
    return False


def ttl_of(obj: Mapping[str, Any]) -> float:
    """`spec.ttlAfterFinished` in seconds (the default when unset or unreadable)."""
    value = (obj.get("spec") or {}).get("ttlAfterFinished")
    try:
        return parse_duration(value) if isinstance(value, str) and value else DEFAULT_TTL
    except ValueError:
        return DEFAULT_TTL


def timestamp(value: Any) -> float | None:
    try:
        return datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def expires_at(obj: Mapping[str, Any]) -> float | None:
    """When a finished request is deleted (epoch seconds): `status.expiresAt`, or for a request
    finished without it, its final Ready transition plus its TTL; None when not known."""
    status = obj.get("status") or {}
    written = timestamp(status.get("expiresAt")) if status.get("expiresAt") else None
    if written is not None:
        return written
    for cond in status.get("conditions") or []:
        if cond.get("type") == c.READY:
            finished = timestamp(cond.get("lastTransitionTime"))
            return None if finished is None else finished + ttl_of(obj)
    return None


def expiry_stamp(obj: Mapping[str, Any], now: float) -> str:
    """`status.expiresAt` of a request that finishes at `now` (epoch seconds)."""
    moment = datetime.fromtimestamp(now, UTC) + timedelta(seconds=ttl_of(obj))
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def target_problem(plan: TargetPlan | None) -> tuple[str, str] | None:
    """Why a target is not written (reason, message); None when it is."""
    if plan is None:
        return c.TARGET_NOT_FOUND, "GitTarget not found"
    if plan.problem is not None:
        return plan.problem.reason, plan.problem.message
    if plan.path_problem is not None:
        return plan.path_problem.reason, plan.path_problem.message
    if plan.spec is not None and plan.spec.suspend:
        return c.SUSPENDED, f"GitTarget {plan.key} is suspended (spec.suspend)"
    return None
