"""Who made a change: commit author identities and the resolver seam between the watch path
and the audit attribution (which lives in `kubescribe.attribution`)."""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, order=True)
class Author:
    """A commit author. `source` says what named them (`audit`, `admission`, `inferred from
    managedFields`); it is written as a commit trailer and plays no part in equality. `user`
    is the Kubernetes username behind an attributed author (`spec.ignore.changesBy` matches
    it); it is never written and plays no part in equality either."""

    name: str
    email: str
    source: str = field(default="", compare=False)
    user: str = field(default="", compare=False)


class AttributionMode(enum.StrEnum):
    """`GitProvider.spec.attribution.mode`: who is written as the author of a change commit."""

    CONFIGURED = "configured-author"
    """The committer, always (attribution is not used)."""
    ATTRIBUTED = "attributed-author"
    """The actor of the change; `UNRESOLVED` when attribution could not name one in time."""


UNRESOLVED = Author("unknown (attribution unresolved)", "unknown@attribution.kubescribe.invalid")
"""Written when attribution is on but no audit fact names the actor in time. Never the
committer: a missing fact must be visible in history (design ground rule 2)."""


@dataclass(frozen=True)
class ObjectEvent:
    """What the resolver needs to find the actor of one observed change."""

    uid: str
    resource_version: str
    group: str
    resource: str
    namespace: str
    name: str
    operation: str  # CREATE | UPDATE | DELETE
    route: str = ""  # audit route of the object's cluster ('' = the resolver's own)
    digest: str = ""  # `content_digest` of the observed document (joins admission facts)


class AuthorResolver(Protocol):
    async def author_of(self, event: ObjectEvent, observed_at: float) -> Author | None:
        """The actor of `event`, waiting at most the grace period counted from `observed_at`
        (a monotonic timestamp); None when no fact arrived in time; `UNRESOLVED` when facts
        arrived but contradict each other (no guess may replace that answer)."""
        ...

    @property
    def unresolved_streak(self) -> int:
        """Changes in a row for which no source named an author (past a few: a wiring problem
        the GitTarget's status reports)."""
        ...


class CommitRequestAuthors(Protocol):
    """Who created a CommitRequest: recorded by the admission webhook (`kubescribe.attribution`)
    from the AdmissionReview `userInfo` of the CREATE, and looked up by the CommitRequest
    controller before it closes a window.

    A request only ever closes a window authored by its requester, so one user's request never
    commits another user's changes under their message. With `attributed-author`, an unknown
    requester (None: no webhook, or no record) matches only a window whose author is
    `UNRESOLVED`; with `configured-author` every window is the committer's and any request
    closes it.
    """

    async def author_of_request(self, namespace: str, name: str, uid: str) -> Author | None:
        """The author who created CommitRequest `namespace/name` with this `uid` (the uid tells
        a re-created request of the same name apart); None when unknown. Should answer
        quickly (the record is written at admission, before the object exists)."""
        ...

    async def groups_of_request(self, namespace: str, name: str, uid: str) -> tuple[str, ...]:
        """The groups the creator of the request had (for access reviews); () when unknown."""
        ...


_UNSAFE = re.compile(r"[^a-z0-9._-]+")
INFERRED = "inferred from managedFields"


def inferred_author(manager: str) -> Author | None:
    """The field manager of a change as its author, marked as inferred (a tool, not a person:
    `kubectl-edit`, `helm`, `argocd-controller`)."""
    manager = manager.strip()[:128]
    if not manager:
        return None
    local = _UNSAFE.sub("-", manager.lower()).strip("-.") or "manager"
    return Author(f"{manager} (inferred)", f"{local}@managers.kubescribe.invalid", INFERRED)
