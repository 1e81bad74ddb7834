"""The records a branch worker's parts pass each other: the items of the commit queue, a
CommitRequest's handle and outcome, a refused document, and the report of one write."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import structlog

from kubescribe.api import conditions as c
from kubescribe.mirror.authors import Author
from kubescribe.mirror.changes import Change, Cursor, Snapshot, TargetKey
from kubescribe.mirror.identity import Identity
from kubescribe.mirror.window import CloseReason, Hold

if TYPE_CHECKING:
    import asyncio

log = structlog.get_logger(__name__)


class Refusal(NamedTuple):
    """A document that was not written: why (`reason`, from `api.conditions`) and how to
    say so."""

    identity: Identity
    reason: str
    message: str


@dataclass(frozen=True)
class RequestOutcome:
    """How a CommitRequest ended. `sha` is the pushed commit (None when none was made)."""

    reason: str
    message: str
    branch: str
    sha: str | None = None
    changes: int = 0
    author: Author | None = None

    @property
    def ok(self) -> bool:
        return self.reason in (c.PUSHED, c.NOTHING_TO_COMMIT)


@dataclass(eq=False)
class RequestHandle:
    """One CommitRequest held by one branch worker."""

    target: TargetKey
    branch: str
    requester: Author | None
    hold: Hold
    future: asyncio.Future[RequestOutcome]
    on_progress: Callable[[str, str], None] | None = None
    message: str | None = None
    author: Author | None = None  # the commit's author when the request names one

    @property
    def fired(self) -> bool:
        return self.message is not None

    def finish(self, outcome: RequestOutcome) -> None:
        if not self.future.done():
            self.future.set_result(outcome)

    def progress(self, reason: str, message: str) -> None:
        if self.on_progress is not None and not self.future.done():
            try:
                self.on_progress(reason, message)
            except Exception:  # a callback must not stop the writer
                log.exception("window.progress_callback_failed")


@dataclass(frozen=True)
class Group:
    """Changes of one author to one target that become one commit (a closed window).

    `author` None means the committer. `message` is a CommitRequest's message; otherwise the
    target's group template (or, for a single effective change, its change message) is used.
    """

    target: TargetKey
    author: Author | None
    changes: tuple[Change, ...]
    reason: CloseReason
    message: str | None = None
    request: RequestHandle | None = None
    carried: tuple[Cursor, ...] = ()  # of changes dropped while the window was open

    @property
    def cursor(self) -> None:
        """Groups carry the cursors of their changes (see `cursors`)."""
        return None

    @property
    def observed_at(self) -> float:
        return self.changes[0].observed_at

    @property
    def cursors(self) -> list[Cursor]:
        return [c.cursor for c in self.changes if c.cursor is not None] + list(self.carried)


@dataclass(frozen=True)
class Skipped:
    """A change the target's `spec.ignore` dropped: nothing to write, a cursor to acknowledge
    after the items before it."""

    target: TargetKey
    cursor: Cursor
    observed_at: float


Item = Change | Snapshot | Group | Skipped

Failing = dict[Identity, tuple[str, str]]
"""A target's documents that could not be written (or do not render as live) and wait for a
change: identity -> (reason, message)."""


@dataclass(frozen=True)
class Notice:
    """Something the write tells beyond Ready, for a Kubernetes Event on the target
    (`api.events`): `type` is Normal or Warning."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True)
class BaseObservation:
    """The base branch as the writer last fetched it: `name` (the target's `baseBranch`, or the
    remote's default branch), its tip (None: the remote does not have it), when (wall clock),
    and whether the write branch's tip is that tip or a descendant of it."""

    name: str
    commit: str | None
    observed_at: float
    descends: bool | None


@dataclass(frozen=True, kw_only=True)
class WriteReport:
    """What writing one target came to: a build's result for it, and the report of a write
    attempt (the worker keeps the last one, and reports from it when a write fails).

    `commit`/`pushed_at` are the last commit pushed for this target (by this worker) and when;
    in a build's result, the commit the build made (None: none). `retained` counts documents
    the prune mode keeps although they are gone from the cluster; `duplicates` files that
    repeat a document held earlier in tree order, `oversized` files too large to read.
    `refused` documents were not written in this attempt; `failing` are all the target's
    documents that could not be written since and still wait for a change (refused earlier and
    not written, deleted or gone from the cluster since). `ok` is about the push, not them.
    Documents `kustomize build` does not render as live carry a reason in
    `api.conditions.RENDER_REASONS`; `landed` the changes in the commits pushed;
    `kustomization` is the kustomization the target writes
    through, if any; `base` what the writer saw of the base branch when it last fetched.
    """

    target: TargetKey
    ok: bool = True
    reason: str = c.PUSHED
    message: str = ""
    commit: str | None = None
    pushed_at: float | None = None
    documents: int = 0
    retained: int = 0
    duplicates: int = 0
    oversized: int = 0
    refused: list[Refusal] = field(default_factory=list)
    failing: list[Refusal] = field(default_factory=list)
    kustomization: str | None = None
    placement: PlacementReport | None = None  # how the kustomizations render the folder
    notices: tuple[Notice, ...] = ()
    base: BaseObservation | None = None  # the base branch, once the write branch exists
    held: str = ""  # why nothing of the target was written (its kustomize root is gone)
    landed: tuple[Landed, ...] = ()  # in a build's result: its changes and their commits


@dataclass(frozen=True)
class RootReport:
    """A kustomization new objects may be listed in (a home, `mirror.roots`): its file
    (relative to the target folder), and the documents it renders, by kind."""

    kustomization: str
    documents: int
    kinds: tuple[str, ...]


@dataclass(frozen=True)
class PlacementReport:
    """What the operator understood of a kustomized folder (`status.placement`)."""

    forest: bool  # no root kustomization: each app kustomization is rendered on its own
    roots: tuple[RootReport, ...]
    plain: int  # documents no kustomization renders
    root: str | None = None  # the root kustomization (relative to the folder); None: a forest
    inherited: int = 0  # documents defined in a base reached through `..` (read-only)
    inherited_objects: tuple[str, ...] = ()  # the first of them, `Kind[.group] ns/name`


@dataclass(frozen=True)
class Landed:
    """A change in a pushed commit: `commit` (hex) and `author` the commit's (None: the
    committer), `url` the commit's web page when the remote has one. Only in the report of
    the push that made it (alerts, `controller.alerts`)."""

    commit: str
    author: Author | None
    change: Change
    url: str | None = None
