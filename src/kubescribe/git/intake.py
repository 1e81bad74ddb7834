"""The intake of a branch worker, between `submit` and the commit queue: authors and commit
windows (the window rules are pure, in `kubescribe.mirror.window`).

Per target, items keep their order (FIFO). A change whose author must be resolved (mode
`attributed-author`, no author yet, a resolver configured) waits for its resolution; later
items of the same target wait behind it, items of other targets do not. Resolutions run
concurrently. Once its author is known a change enters the window rules
(`kubescribe.mirror.window`); closed windows become `Group`s on the commit queue, changes
outside any window go there as they are. Snapshots close the target's window first and are
never grouped.

A CommitRequest is a `RequestHandle`: `hold` keeps the requester's window open while the
request collects, `fire` sends a marker through the same FIFO, so it closes the window only
after every change submitted before it, and the handle's future resolves once the commit is
pushed (or there was nothing to commit, or the target cannot be written).

A change dropped by the target's `spec.ignore` (`kubescribe.mirror.ignore`) is not
committed; its cursor still has to be acknowledged, and only after every change of the target
before it. It rides with the target's open window (`Windows.carry`), or, when none is open,
goes to the commit queue as a `Skipped` item, in order.

Everything here runs on the event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog

from kubescribe import metrics
from kubescribe.api import conditions as c
from kubescribe.git.records import Group, RequestHandle, RequestOutcome, Skipped
from kubescribe.mirror.authors import (
    UNRESOLVED,
    AttributionMode,
    Author,
    AuthorResolver,
    ObjectEvent,
    inferred_author,
)
from kubescribe.mirror.changes import Change, Snapshot, TargetKey
from kubescribe.mirror.digest import content_digest
from kubescribe.mirror.ignore import NO_IGNORE, IgnoredBy, IgnoreRule
from kubescribe.mirror.window import Closed, CloseReason, WindowPolicy, Windows

log = structlog.get_logger(__name__)


class WindowSettings(Protocol):
    """What the admission needs of a target's configuration (`TargetConfig` has it)."""

    @property
    def folder(self) -> str: ...

    @property
    def window(self) -> WindowPolicy: ...

    @property
    def attribution(self) -> AttributionMode: ...

    @property
    def infer_authors(self) -> bool: ...

    @property
    def ignore(self) -> IgnoreRule: ...


@dataclass(frozen=True)
class _Fire:
    handle: RequestHandle

    @property
    def target(self) -> TargetKey:
        return self.handle.target


@dataclass
class _Pending:
    item: Change | Snapshot | _Fire
    task: asyncio.Task[Author | None] | None = None

    @property
    def ready(self) -> bool:
        return self.task is None or self.task.done()


class Intake:
    """Authors and windows of one branch worker; emits what is ready to be committed."""

    def __init__(
        self,
        *,
        branch: str,
        committer: Author,
        settings: Callable[[TargetKey], WindowSettings | None],
        emit: Callable[[Change | Snapshot | Group | Skipped], None],
        wake: Callable[[], None],
        resolver: AuthorResolver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.branch = branch
        self.committer = committer
        self.resolver = resolver
        self.windows = Windows()
        self._settings = settings
        self._emit = emit
        self._wake = wake
        self._clock = clock
        self._lanes: dict[TargetKey, deque[_Pending]] = {}
        self._handles: list[RequestHandle] = []
        self._stopped = False

    @property
    def pending(self) -> int:
        """Changes waiting for their author or in an open window."""
        return self.windows.changes + sum(len(lane) for lane in self._lanes.values())

    def observed(self) -> dict[TargetKey, float]:
        """By target, when the oldest change waiting here was observed."""
        oldest: dict[TargetKey, float] = {}
        windows = [self.windows.get(target) for target in self.windows.targets()]
        held: list[Change | Snapshot | _Fire] = [
            change for window in windows if window is not None for change in window.changes
        ]
        held += [pending.item for lane in self._lanes.values() for pending in lane]
        for item in held:
            if isinstance(item, Change | Snapshot):
                at = oldest.get(item.target)
                oldest[item.target] = item.observed_at if at is None else min(at, item.observed_at)
        return oldest

    # -- items -----------------------------------------------------------------------------
    def enter(self, item: Change | Snapshot) -> None:
        lane = self._lanes.get(item.target)
        task = self._resolution(item) if isinstance(item, Change) else None
        if lane is None and task is None:  # the fast path: nothing to wait for
            self._admit(item, None)
            return
        if lane is None:
            lane = self._lanes[item.target] = deque()
        lane.append(_Pending(item, task))
        if task is not None:
            task.add_done_callback(functools.partial(self._resolved, item.target))
        self._pump(item.target)

    def _resolution(self, change: Change) -> asyncio.Task[Author | None] | None:
        if self.resolver is None or change.author is not None or self._stopped:
            return None
        settings = self._settings(change.target)
        if settings is None:
            return None
        if settings.ignore.ignores(change.field_manager, "") is not None:
            return None  # dropped whoever made it
        attributed = settings.attribution is AttributionMode.ATTRIBUTED
        if not attributed and not settings.ignore.needs_author:
            return None
        return asyncio.get_running_loop().create_task(self._resolve(self.resolver, change))

    @staticmethod
    async def _resolve(resolver: AuthorResolver, change: Change) -> Author | None:
        rtype, identity = change.rtype, change.identity
        event = ObjectEvent(
            uid=change.uid,
            resource_version=change.cursor.resource_version if change.cursor else "",
            group=rtype.group,
            resource=rtype.resource,
            namespace=identity.namespace,
            name=identity.name,
            operation=str(change.operation),
            route=change.audit_route,
            digest=content_digest(change.document, sanitized=True) if change.document else "",
        )
        try:
            return await resolver.author_of(event, change.observed_at)
        except asyncio.CancelledError:
            raise
        except Exception:  # attribution costs author fidelity, never the change
            log.exception("window.author_resolution_failed", kind=identity.kind)
            return None

    def _resolved(self, target: TargetKey, _: object) -> None:
        self._pump(target)

    def _pump(self, target: TargetKey) -> None:
        lane = self._lanes.get(target)
        while lane and lane[0].ready:
            pending = lane.popleft()
            self._admit(pending.item, _result(pending.task))
        if lane is not None and not lane:
            del self._lanes[target]

    def _admit(self, item: Change | Snapshot | _Fire, resolved: Author | None) -> None:
        now = self._clock()
        if isinstance(item, Snapshot):
            self._closed(self.windows.close(item.target, CloseReason.TARGET, now))
            self._emit(item)
        elif isinstance(item, _Fire):
            self._fire(item.handle, now)
        else:
            self._change(item, resolved, now)

    def _change(self, change: Change, resolved: Author | None, now: float) -> None:
        settings = self._settings(change.target)
        by = _ignored_by(change, resolved, settings.ignore if settings else NO_IGNORE)
        if by is not None:
            self._skip(change, by)
            return
        if settings is None or settings.attribution is not AttributionMode.ATTRIBUTED:
            author, key = None, self.committer  # configured-author: always the committer
        else:
            inferred = inferred_author(change.field_manager) if settings.infer_authors else None
            author = key = change.author or resolved or inferred or UNRESOLVED
        if change.author != author:
            change = dataclasses.replace(change, author=author)
        if self._stopped:
            self._emit(change)
            return
        policy = settings.window if settings is not None else WindowPolicy()
        admitted = self.windows.add(change, key, policy, now)
        for closed in admitted.closed:
            self._closed(closed)
        if admitted.alone:
            self._emit(change)
        elif admitted.opened:
            metrics.WINDOWS_OPENED.inc()
            self._wake()  # a new deadline

    def _skip(self, change: Change, by: IgnoredBy) -> None:
        metrics.CHANGES_IGNORED.labels(change.target.namespace, str(by)).inc()
        log.debug(
            "intake.change_ignored",
            target=str(change.target),
            kind=change.identity.kind,
            name=change.identity.name,
            by=str(by),
        )
        if change.cursor is not None and not self.windows.carry(change.target, change.cursor):
            self._emit(Skipped(change.target, change.cursor, change.observed_at))

    def _closed(self, closed: Closed | None, handle: RequestHandle | None = None) -> None:
        if closed is None:
            return
        metrics.WINDOWS_CLOSED.labels(str(closed.reason)).inc()
        author = None if closed.author == self.committer else closed.author
        if handle is not None and handle.author is not None:
            author = handle.author  # named by the request (spec.author), its access reviewed
        self._emit(
            Group(
                closed.target,
                author,
                closed.changes,
                closed.reason,
                handle.message if handle is not None else None,
                handle,
                closed.carried,
            )
        )

    # -- clock -----------------------------------------------------------------------------
    def _policies(self) -> dict[TargetKey, WindowPolicy]:
        policies = {}
        for target in self.windows.targets():
            settings = self._settings(target)
            policies[target] = settings.window if settings is not None else WindowPolicy()
        return policies

    def close_due(self) -> None:
        """Close windows whose silence (or age) deadline passed."""
        if len(self.windows):
            for closed in self.windows.due(self._policies(), self._clock()):
                self._closed(closed)

    def next_deadline(self) -> float | None:
        """Clock time of the next window deadline (None: no window is waiting for one)."""
        return self.windows.next_deadline(self._policies()) if len(self.windows) else None

    # -- configuration and shutdown --------------------------------------------------------
    def reconfigure(
        self,
        old: Callable[[TargetKey], WindowSettings | None],
        new: Callable[[TargetKey], WindowSettings | None],
    ) -> None:
        """Targets changed: close windows whose target is gone or changed what a window
        means (folder, attribution mode, window set to 0); fail requests of gone targets."""
        now = self._clock()
        for target in self.windows.targets():
            before, after = old(target), new(target)
            window = self.windows.get(target)
            assert window is not None
            if (
                after is None
                or (
                    before is not None
                    and (before.folder, before.attribution) != (after.folder, after.attribution)
                )
                or (after.window.seconds <= 0 and not self.windows.held(target, window.author))
            ):
                self._closed(self.windows.close(target, CloseReason.TARGET, now))
        for handle in [h for h in self._handles if new(h.target) is None]:
            self._drop(handle)
            handle.finish(
                RequestOutcome(
                    c.TARGET_NOT_WRITABLE,
                    f"GitTarget {handle.target} is no longer written by this worker",
                    self.branch,
                )
            )
        self._wake()

    def shutdown(self) -> None:
        """Admit everything still waiting (authors not resolved yet are unresolved) and close
        every window; from now on changes are committed one by one."""
        for target in list(self._lanes):
            lane = self._lanes.pop(target)
            for pending in lane:
                if pending.task is not None and not pending.task.done():
                    pending.task.cancel()
                self._admit(pending.item, _result(pending.task))
        self._stopped = True
        for closed in self.windows.close_all(CloseReason.SHUTDOWN, self._clock()):
            self._closed(closed)
        for handle in list(self._handles):
            self._drop(handle)
            handle.finish(
                RequestOutcome(c.WORKER_STOPPED, "The branch worker stopped", self.branch)
            )

    # -- requests --------------------------------------------------------------------------
    def hold(
        self,
        target: TargetKey,
        requester: Author | None,
        on_progress: Callable[[str, str], None] | None = None,
    ) -> RequestHandle:
        """Start holding the requester's window of `target` open (see the module doc)."""
        settings = self._settings(target)
        attributed = settings is not None and settings.attribution is AttributionMode.ATTRIBUTED
        match = (requester or UNRESOLVED) if attributed else None
        future: asyncio.Future[RequestOutcome] = asyncio.get_running_loop().create_future()
        handle = RequestHandle(
            target, self.branch, requester, self.windows.hold(target, match), future, on_progress
        )
        self._handles.append(handle)
        if settings is None or self._stopped:
            self._drop(handle)
            reason = c.WORKER_STOPPED if self._stopped else c.TARGET_NOT_WRITABLE
            handle.finish(RequestOutcome(reason, f"GitTarget {target} is not written", self.branch))
        return handle

    def fire(
        self, handle: RequestHandle, message: str, author: Author | None = None
    ) -> asyncio.Future[RequestOutcome]:
        """Close the held window after everything submitted so far, with `message` (and
        `author` as the commit's author, when given)."""
        if handle.future.done() or handle.fired:
            return handle.future
        handle.message = message
        handle.author = author
        lane = self._lanes.get(handle.target)
        if lane is None:
            self._fire(handle, self._clock())
        else:
            lane.append(_Pending(_Fire(handle)))
        return handle.future

    def release(self, handle: RequestHandle) -> None:
        """Stop holding (the request was deleted or gave up before it fired)."""
        if not handle.fired:
            self._drop(handle)
            self._wake()

    def _fire(self, handle: RequestHandle, now: float) -> None:
        closed = self.windows.close_for(handle.hold, now)
        self._drop(handle)
        if handle.future.done():
            self._closed(closed)
            return
        if closed is None:
            who = "" if handle.hold.author is None else f" by {handle.hold.author.name}"
            handle.finish(
                RequestOutcome(
                    c.NOTHING_TO_COMMIT,
                    f"No open commit window{who} on GitTarget {handle.target}: nothing to commit",
                    self.branch,
                )
            )
            return
        self._closed(closed, handle)
        handle.progress("Pushing", f"Committing {len(closed.changes)} change(s)")

    def _drop(self, handle: RequestHandle) -> None:
        self.windows.release(handle.hold)
        self._handles = [h for h in self._handles if h is not handle]


def _result(task: asyncio.Task[Author | None] | None) -> Author | None:
    if task is None or not task.done() or task.cancelled():
        return None
    return task.result()


def _ignored_by(change: Change, resolved: Author | None, rule: IgnoreRule) -> IgnoredBy | None:
    """Which list of `rule` drops the change; None records it (also when the rule needs an
    author and none is known: counted, never guessed)."""
    if not rule:
        return None
    known = change.author or resolved
    user = known.user if known is not None else ""
    by = rule.ignores(change.field_manager, user)
    if by is None and rule.needs_author and not user:
        metrics.IGNORE_UNATTRIBUTED.labels(change.target.namespace).inc()
    return by
