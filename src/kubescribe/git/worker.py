"""The branch worker: the single writer of one (repository, branch).

Items (changes and snapshots) are queued in order. The worker drains everything queued into a
batch and, on a thread of the Git pool (`git.pool`), builds one commit per item on the remote
tip, in memory, then pushes the chain once. Items queued meanwhile ride in the next push: no
cooldown.

What Git must hold is derived from the items (cluster state) and the remote tree alone. When a
push is rejected, the same batch is rebuilt from scratch on the new remote tip (foreign commits
are kept, nothing is forced). When the remote is unreachable the batch is kept and retried on
a timer, so a quiet branch converges without a new change. Cursors are acknowledged only after
the push that carries their item succeeded.
"""

from __future__ import annotations

import asyncio
import functools
import random
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import structlog

from kubescribe import metrics
from kubescribe.api import conditions as c
from kubescribe.git.batches import collapse
from kubescribe.git.build import Outcome, RequestResult
from kubescribe.git.cachequota import CacheQuotaExceeded, NamespaceCache
from kubescribe.git.intake import Intake
from kubescribe.git.notices import Failures, write_notices
from kubescribe.git.pool import GitPool, Lane, shared_pool
from kubescribe.git.records import (
    Group,
    Item,
    RequestHandle,
    RequestOutcome,
    Skipped,
    WriteReport,
)
from kubescribe.git.repo import (
    CacheBusy,
    CallbacksFactory,
    CommitSigner,
    LocalRefMissing,
    RemoteError,
    RemoteUnavailable,
    SigningUnavailable,
)
from kubescribe.git.targets import (
    RETRY_INITIAL,
    RETRY_MAX,
    RETRY_MAX_UNREACHABLE,
    Committer,
    TargetConfig,
    upkeep_key,
)
from kubescribe.git.writer import CacheUnwritable, Writer
from kubescribe.mirror.authors import Author, AuthorResolver
from kubescribe.mirror.changes import Cursor, TargetKey
from kubescribe.mirror.layout import paths_overlap
from kubescribe.net.urls import normalize
from kubescribe.waits import wait_event, within

log = structlog.get_logger(__name__)

# Items waiting for the writer before producers wait (`BranchWorker.room`).
IDLE_RELEASE = 300.0  # seconds
MAX_QUEUED = 10_000


class BranchWorker:
    """The single writer for one (normalized URL, branch).

    `submit`, `configure`, `start` and `stop` are called on the event loop; `on_report` and
    `on_pushed` are called on that loop too. All Git work runs on the process's Git thread pool
    (`git.pool`), one call at a time.
    """

    def __init__(
        self,
        url: str,
        branch: str,
        *,
        cache_dir: Path,
        committer: Committer,
        on_report: Callable[[WriteReport], None] | None = None,
        on_pushed: Callable[[list[Cursor]], None] | None = None,
        callbacks: CallbacksFactory | None = None,
        max_rebuilds: int = 5,
        resolver: AuthorResolver | None = None,
        clock: Callable[[], float] = time.monotonic,
        max_queued: int = MAX_QUEUED,
        cache_quota: NamespaceCache | None = None,
        pool: GitPool | None = None,
        idle_release: float | None = IDLE_RELEASE,
    ) -> None:
        self.url = url
        self.branch = branch
        self.key = (normalize(url), branch)
        self.committer = committer
        self._on_report = on_report
        self._on_pushed = on_pushed
        self._targets: dict[TargetKey, TargetConfig] = {}
        self._queue: deque[Item] = deque()
        self._unpushed: list[Item] = []
        self._collapsed_cursors: list[Cursor] = []
        self._last: dict[TargetKey, WriteReport] = {}  # the last report, by target
        self._wake = asyncio.Event()
        self._stopping = False
        self._retry_now = asyncio.Event()
        self._upkeep_due = False
        self._task: asyncio.Task[None] | None = None
        self._pool = pool
        # Seconds without work after which the clone is closed and the build cache dropped
        # (both come back at the next write); None: kept.
        self._idle_release = idle_release
        self._released = False
        self._lane: Lane | None = None
        self._series = f"{self.key[0]}#{branch}"  # the `branch` label of its metrics
        self._queue_depth = metrics.QUEUE_DEPTH.labels(self._series)
        self._waited = metrics.BACKPRESSURE.labels(self._series)
        # By target: when the oldest change not yet pushed was observed (the clock's time).
        self._oldest: dict[TargetKey, float] = {}
        self._failures = 0  # failed writes in a row
        self._failing_since: float | None = None  # wall time of the first one
        self._failed_reason = ""
        self._max_queued = max_queued
        self._room = asyncio.Event()
        self._room.set()
        self._log = log.bind(repo=self.key[0], branch=branch)
        self._writer = Writer(
            url,
            branch,
            cache_dir=cache_dir,
            committer=committer,
            callbacks=callbacks,
            max_rebuilds=max_rebuilds,
            logger=self._log,
            quota=cache_quota,
        )
        self._intake = Intake(
            branch=branch,
            committer=Author(committer.name, committer.email),
            settings=self._target_settings,
            emit=self._enqueue,
            wake=self._wake.set,
            resolver=resolver,
            clock=clock,
        )
        self._clock = clock

    # -- event loop side -------------------------------------------------------------------
    def _target_settings(self, key: TargetKey) -> TargetConfig | None:
        return self._targets.get(key)  # not `self._targets.get`: `configure` replaces the dict

    def configure(self, targets: Sequence[TargetConfig]) -> None:
        """Set the targets writing to this branch; applies from the next batch on."""
        for i, a in enumerate(targets):
            for b in targets[i + 1 :]:
                if paths_overlap(a.folder, b.folder):
                    raise ValueError(f"targets {a.key} and {b.key} have overlapping folders")
        old, self._targets = self._targets, {t.key: t for t in targets}
        self._intake.reconfigure(old.get, self._targets.get)
        for key in old.keys() - self._targets.keys():
            metrics.forget_target(str(key), self)  # no longer written here
        for key in self._targets.keys() - old.keys():
            metrics.claim_target(str(key), self, functools.partial(self.pending_age, key))
        if any(upkeep_key(t) != upkeep_key(old.get(t.key)) for t in targets):
            self._upkeep_due = True  # encryption changed: check the folders even if idle
            self._wake.set()

    def set_signer(self, signer: CommitSigner | None) -> None:
        """Sign every commit from the next one on (`MissingSigner`: commit nothing)."""
        self._writer.signer = signer

    def retry_now(self) -> None:
        """Cut short the wait after a failed write (e.g. its credentials changed)."""
        self._retry_now.set()

    def submit(self, item: Item) -> None:
        """Queue an item (FIFO); never blocks (a producer awaits `room` after it)."""
        if self._stopping and (self._task is None or self._task.done()):
            raise RuntimeError("branch worker is stopped")
        if isinstance(item, Group | Skipped):
            raise TypeError("groups and skips are made by the intake, not submitted")
        if self._stopping:
            # A stop writes what came before it; a stream still feeding it would keep it busy
            # past its bound. Never written, so never acknowledged: the next owner replays it.
            return
        self._oldest.setdefault(item.target, item.observed_at)
        self._intake.enter(item)  # author and window rules; then `_enqueue`

    def _enqueue(self, item: Item) -> None:
        self._queue.append(item)
        self._depth_changed()
        self._wake.set()

    async def room(self) -> None:
        """Wait while `max_queued` items wait for the writer (queued, or kept after a failed
        push): a watch reader waits here instead of growing the queue without bound. Items
        in an open commit window do not count, so a held window never stalls its streams."""
        if self._room.is_set():
            return
        started = time.monotonic()
        await self._room.wait()
        self._waited.inc(time.monotonic() - started)

    def _depth_changed(self) -> None:
        self._queue_depth.set(self.pending)
        if len(self._queue) + len(self._unpushed) < self._max_queued:
            self._room.set()
        else:
            self._room.clear()

    # -- CommitRequests --------------------------------------------------------------------
    def hold(
        self,
        target: TargetKey,
        requester: Author | None,
        on_progress: Callable[[str, str], None] | None = None,
    ) -> RequestHandle:
        """Keep the requester's commit window of `target` open (also with window 0) until
        `fire` or `release`. `on_progress(reason, message)` reports a push being retried."""
        return self._intake.hold(target, requester, on_progress)

    def fire(
        self, handle: RequestHandle, message: str, author: Author | None = None
    ) -> asyncio.Future[RequestOutcome]:
        """Close the held window with `message` (and `author` instead of the window's, when
        given) after every item submitted so far; the future resolves once that commit is
        pushed (or nothing needed committing, or the target is no longer written). It is never
        failed by a timeout: a failing push is retried."""
        return self._intake.fire(handle, message, author)

    def refetch(self) -> None:
        """Fetch the remote's tip before the next write (a foreign push may have moved it:
        a re-list asked for then compares with what the remote holds now)."""
        self._writer.tip_known = False

    def release(self, handle: RequestHandle) -> None:
        """Stop holding (before `fire`): the window closes by its own rules again."""
        self._intake.release(handle)

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("branch worker already started")
        self._lane = (self._pool or shared_pool()).lane()
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"branch-worker {self.key[0]}#{self.branch}"
        )

    async def abandon(self) -> None:
        """Stop at once without writing what is queued: another replica owns the branch now
        (the Lease was lost). Nothing queued is acknowledged, so the new owner replays it; a
        write under way makes no further attempt (a rebuild on the new owner's commits could
        bring back what it removed)."""
        self._writer.abandoned.set()
        await self.stop(timeout=0)

    async def stop(self, timeout: float = 30.0) -> bool:
        """Write what is queued, then stop. False if that did not finish within `timeout`
        (what was not pushed is not acknowledged: nothing is lost, it is replayed later)."""
        self._intake.shutdown()  # open windows close (reason shutdown) and are written
        self._stopping = True
        self._wake.set()
        self._retry_now.set()
        flushed = self.pending == 0
        task = self._task
        try:
            if task is not None and not task.done():
                flushed = await within(asyncio.shield(task), timeout)
        except BaseException:
            # The caller gave up on this stop (a shutdown past its own bound): the writer must
            # not outlive it, still taking and pushing items.
            if task is not None:
                task.cancel()
            self._close()
            raise
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task})  # not `await task`: keep our own cancellation
        self._close()
        return flushed

    @property
    def running(self) -> bool:
        """The writer's task has started and not ended."""
        return self._task is not None and not self._task.done()

    def _close(self) -> None:
        for item in [*self._unpushed, *self._queue]:  # requests this worker can no longer end
            if isinstance(item, Group) and item.request is not None:
                item.request.finish(
                    RequestOutcome(c.WORKER_STOPPED, "The branch worker stopped", self.branch)
                )
        if self._lane is not None:
            self._lane.later(self._writer.close)
            self._lane = None
        self._forget_series()

    def _forget_series(self) -> None:
        """Remove this worker's series: another replica (or worker) reports these targets now,
        or nobody does; a stale gauge would be counted twice in sums over replicas."""
        for key in self._targets:
            metrics.forget_target(str(key), self)
        metrics.forget_branch(self._series)  # its queue, back-pressure and cache packs

    def pending_age(self, key: TargetKey) -> float:
        """Seconds since the oldest change of `key` not yet pushed was observed (0: none)."""
        oldest = self._oldest.get(key)
        return 0.0 if oldest is None else max(0.0, self._clock() - oldest)

    def _recount_oldest(self) -> None:
        """After a push: what is still pending was queued or held since."""
        oldest = self._intake.observed()
        for item in [*self._unpushed, *self._queue]:
            at = oldest.get(item.target)
            oldest[item.target] = item.observed_at if at is None else min(at, item.observed_at)
        self._oldest = oldest

    @property
    def pending(self) -> int:
        """Items not yet pushed: queued, being written, or kept after a failed write."""
        return len(self._queue) + len(self._unpushed) + self._intake.pending

    async def _run(self) -> None:
        lane = self._lane
        assert lane is not None
        await lane.run(self._writer.warm_up, dict(self._targets))
        failures = 0
        while True:
            self._intake.close_due()
            if not self._queue and not self._unpushed and not self._upkeep_due:
                if self._stopping:
                    return
                self._wake.clear()
                await self._idle()
                continue
            batch = self._unpushed = [*self._unpushed, *self._queue]
            self._queue.clear()
            if not self._upkeep_due and all(isinstance(i, Skipped) for i in batch):
                self._skipped(batch)  # nothing to write: no fetch, no push
                continue
            targets = dict(self._targets)
            self._upkeep_due = False
            self._released = False
            try:
                outcome = await lane.run(self._writer.write, batch, targets, self._busy)
            except Exception as exc:  # every failure keeps the batch
                failures += 1
                self._failures = failures
                self._upkeep_due = True
                self._failed(batch, targets, exc)
                delay = min(_retry_cap(exc), RETRY_INITIAL * 2 ** min(failures - 1, 10))
                delay *= random.uniform(0.8, 1.0)
                # stop() asks for one attempt now instead of at the end of the wait.
                await wait_event(self._retry_now, delay)
                self._retry_now.clear()
                continue
            failures = 0
            self._succeeded(batch, outcome)
            self._failures, self._failing_since = 0, None

    def _busy(self) -> bool:
        """Items wait for the next batch (read from the writer's thread)."""
        return bool(self._queue)

    async def _idle(self) -> None:
        """Wait for an item, or until the next commit window deadline; a writer idle for
        `idle_release` seconds lets go of its clone and caches meanwhile."""
        deadline = self._intake.next_deadline()
        if deadline is None:
            if self._released or self._idle_release is None:
                await self._wake.wait()
            elif not await wait_event(self._wake, self._idle_release):
                await self._release()
            return
        await wait_event(self._wake, deadline - self._clock())

    async def _release(self) -> None:
        lane = self._lane
        if lane is None or self._stopping:
            return
        self._released = True
        await lane.run(self._writer.close)
        metrics.WRITER_RELEASES.inc()
        self._log.debug("writer.idle_released")

    def _succeeded(self, batch: list[Item], outcome: Outcome) -> None:
        targets = {item.target for item in batch if item.target not in outcome.unknown}
        targets |= set(outcome.targets)  # also those only re-encrypted
        cursors = [*self._collapsed_cursors]
        cursors += [
            item.cursor
            for item in batch
            if item.cursor is not None and item.target not in outcome.unknown
        ]
        cursors += [
            cursor
            for item in batch
            if isinstance(item, Group) and item.target not in outcome.unknown
            for cursor in item.cursors
        ]
        self._settle(batch, outcome)
        self._unpushed, self._collapsed_cursors = [], []
        self._depth_changed()
        self._recount_oldest()
        now = time.monotonic()
        for item in outcome.written:
            metrics.LAG.observe(max(0.0, now - item.observed_at))
        for kind, count in outcome.commits.items():
            metrics.COMMITS.labels(kind).inc(count)
        pushed_at = time.time() if outcome.pushed else None
        for key in sorted(targets):
            self._succeeded_target(key, outcome, pushed_at)
        if cursors and self._on_pushed is not None:
            try:
                self._on_pushed(cursors)
            except Exception:  # a callback must not stop the writer
                self._log.exception("worker.on_pushed_failed")

    def _succeeded_target(self, key: TargetKey, outcome: Outcome, pushed_at: float | None) -> None:
        """Report the target's part of a pushed batch (the build's result for it)."""
        result = outcome.targets.get(key) or WriteReport(target=key)
        last = self._last.get(key) or WriteReport(target=key)
        for refusal in result.refused:
            metrics.REFUSED.labels(refusal.reason).inc()
        self._publish(key, result, pushed_at if result.commit is not None else None)
        message = f"Pushed {result.commit[:12]}" if result.commit else "Up to date"
        if result.failing:
            message += f"; {len(result.failing)} document(s) not written"
        report = replace(
            result,
            message=message,
            notices=write_notices(
                result,
                last,
                outcome,
                Failures(self._failures, self._failing_since, self._failed_reason),
                time.time(),
            ),
        )
        if result.commit is None:
            report = replace(report, commit=last.commit, pushed_at=last.pushed_at)
        else:
            report = replace(report, pushed_at=pushed_at)
        self._last[key] = replace(report, landed=())  # told once
        self._report(report)

    def _publish(self, key: TargetKey, result: WriteReport, pushed_at: float | None) -> None:
        """The target's gauges, while this worker writes it (a stopped worker's last batch
        must not bring back series another worker or replica owns now)."""
        target = str(key)
        if key not in self._targets or not metrics.owns_target(target, self):
            return
        metrics.DOCUMENTS.labels(target).set(result.documents)
        metrics.RETAINED.labels(target).set(result.retained)
        metrics.DUPLICATES.labels(target).set(result.duplicates)
        metrics.OVERSIZED.labels(target).set(result.oversized)
        # A render mismatch is written; every other failing document is not.
        unwritten = [f for f in result.failing if f.reason != c.RENDER_MISMATCH]
        metrics.TARGET_REFUSED.labels(target).set(len(unwritten))
        if pushed_at is not None:
            metrics.LAST_PUSH.labels(target).set(pushed_at)

    def _skipped(self, batch: list[Item]) -> None:
        """Acknowledge dropped changes (`spec.ignore`) at once: everything queued before
        them was pushed already (a failed batch would be part of this one)."""
        self._unpushed = []
        self._depth_changed()
        self._recount_oldest()
        cursors = [item.cursor for item in batch if isinstance(item, Skipped)]
        if self._on_pushed is not None:
            try:
                self._on_pushed(cursors)
            except Exception:  # a callback must not stop the writer
                self._log.exception("worker.on_pushed_failed")

    def _failed(
        self, batch: list[Item], targets: Mapping[TargetKey, TargetConfig], exc: Exception
    ) -> None:
        if isinstance(exc, RemoteError | SigningUnavailable | CacheUnwritable | CacheQuotaExceeded):
            reason, message = exc.reason, str(exc)
        else:
            reason, message = c.WRITE_FAILED, f"{type(exc).__name__}: {exc}"
            self._log.error("worker.write_error", exc_info=exc)
        self._log.warning("worker.write_failed", reason=reason, error=message, items=len(batch))
        if self._failing_since is None:
            self._failing_since = time.time()
        self._failed_reason = f"{reason}: {message}"
        for item in batch:
            if isinstance(item, Group) and item.request is not None:
                if item.target in targets:
                    item.request.progress(reason, f"Push failed, retrying: {message}")
                else:
                    item.request.finish(self._not_written(item.target))
        kept, dropped = collapse([i for i in batch if i.target in targets])
        self._unpushed = kept
        self._collapsed_cursors += dropped
        self._depth_changed()
        for key in sorted({item.target for item in kept}):
            last = self._last.get(key) or WriteReport(target=key)
            self._report(
                replace(last, ok=False, reason=reason, message=message, refused=[], notices=())
            )

    def _not_written(self, target: TargetKey) -> RequestOutcome:
        return RequestOutcome(
            c.TARGET_NOT_WRITABLE, f"GitTarget {target} is not written by this worker", self.branch
        )

    def _settle(self, batch: list[Item], outcome: Outcome) -> None:
        """Finish the CommitRequests whose windows were in this (pushed) batch."""
        for item in batch:
            if not isinstance(item, Group) or item.request is None:
                continue
            request = item.request
            if item.target in outcome.unknown:
                request.finish(self._not_written(item.target))
                continue
            result = outcome.requests.get(request, RequestResult())
            author = item.author or self._intake.committer
            if result.refused:
                first = result.refused[0]
                more = f" (and {len(result.refused) - 1} more)" if len(result.refused) > 1 else ""
                request.finish(
                    RequestOutcome(
                        first.reason,
                        first.message + more,
                        self.branch,
                        result.commit,
                        result.changes,
                        author,
                    )
                )
            elif result.commit is None:
                request.finish(
                    RequestOutcome(
                        c.NOTHING_TO_COMMIT,
                        "The window's changes left the target's files as they were",
                        self.branch,
                    )
                )
            else:
                request.finish(
                    RequestOutcome(
                        c.PUSHED,
                        f"Pushed {result.commit[:12]} with {result.changes} change(s)",
                        self.branch,
                        result.commit,
                        result.changes,
                        author,
                    )
                )

    def _report(self, report: WriteReport) -> None:
        if self._on_report is None:
            return
        try:
            self._on_report(report)
        except Exception:  # a callback must not stop the writer
            self._log.exception("worker.on_report_failed")


_UNREACHABLE = frozenset({RemoteUnavailable.default_reason, c.PROXY_UNREACHABLE})


def _retry_cap(exc: Exception) -> float:
    """The longest wait between attempts: a remote (or the proxy before it) that cannot be
    reached, a cache disk that is full, or contention with other writers of the cache, is tried
    again every few seconds, so its end is noticed soon; other failures (credentials, a hook,
    the signing key) wait longer, and a change to their cause cuts the wait short."""
    if isinstance(exc, RemoteUnavailable) and exc.reason in _UNREACHABLE:
        return RETRY_MAX_UNREACHABLE
    if isinstance(exc, CacheUnwritable | LocalRefMissing | CacheBusy):
        return RETRY_MAX_UNREACHABLE  # space, or the other writer's turn, may end any moment
    return RETRY_MAX
