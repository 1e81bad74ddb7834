"""The branch worker: the single writer of one (repository, branch).

Items (changes and snapshots) are queued in order. The worker drains everything queued into a
batch and, on its own thread, builds one commit per item on the remote tip, in memory, then
pushes the chain once. Items queued meanwhile ride in the next push: no cooldown.

What Git must hold is derived from the items (cluster state) and the remote tree alone. When a
push is rejected, the same batch is rebuilt from scratch on the new remote tip (foreign commits
are kept, nothing is forced). When the remote is unreachable the batch is kept and retried on
a timer, so a quiet branch converges without a new change. Cursors are acknowledged only after
the push that carries their item succeeded.
"""

from __future__ import annotations

import asyncio
import contextlib
import posixpath
import random
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import pygit2
import structlog

from kubescribe import metrics
from kubescribe.git.index import Entry, TargetIndex, folder_tree
from kubescribe.git.pack import write_blobs
from kubescribe.git.repo import (
    CallbacksFactory,
    CommitSigner,
    GitRepository,
    PushDenied,
    PushRejected,
    RemoteError,
    RemoteUnavailable,
    SigningUnavailable,
    normalize_url,
)
from kubescribe.git.tree import TreeConflict, edit_tree
from kubescribe.git.windowing import (
    NOTHING_TO_COMMIT,
    TARGET_NOT_WRITABLE,
    WORKER_STOPPED,
    Admission,
    Group,
    RequestHandle,
    RequestOutcome,
)
from kubescribe.mirror import messages
from kubescribe.mirror.authors import AttributionMode, Author, AuthorResolver
from kubescribe.mirror.changes import Change, Cursor, Operation, PruneMode, Snapshot, TargetKey
from kubescribe.mirror.identity import CORE_GROUP, Identity, ResourceType
from kubescribe.mirror.layout import ENCRYPTED_SUFFIX, Layout, normalize_target_path, paths_overlap
from kubescribe.mirror.window import WindowPolicy
from kubescribe.mirror.yamlfmt import dump_yaml, order_document

log = structlog.get_logger(__name__)

Item = Change | Snapshot | Group
Refusal = tuple[Identity, str, str]
"""(identity, reason, message) of a document that was not written."""

# WriteReport reasons (stable: they become condition reasons).
PUSHED = "Pushed"
REMOTE_UNREACHABLE = "RemoteUnreachable"
PUSH_REJECTED = "PushRejected"
WRITE_FAILED = "WriteFailed"
PATH_CONFLICT = "PathConflict"
RENDER_FAILED = "RenderFailed"
REENCRYPT_FAILED = "ReencryptFailed"
SOPS_CONFIG = ".sops.yaml"

RETRY_INITIAL = 0.5
RETRY_MAX = 30.0
# From this many new blobs in one commit on, they are written as one pack file.
PACK_THRESHOLD = 32


class RefusedContent(Exception):
    """Raised by a renderer: this document must not be written (e.g. no encryption)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class Renderer(Protocol):
    def encrypted(self, rtype: ResourceType) -> bool:
        """Whether documents of this type are written encrypted (`.sops.yaml`)."""
        ...

    def render(
        self,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
        previous: bytes | None,
    ) -> bytes:
        """The file's bytes. `previous` is the current file of the same kind (plain or
        encrypted), if any, so unchanged ciphertext can stay byte-identical."""
        ...


@runtime_checkable
class Encrypting(Protocol):
    """What a renderer that encrypts adds, so the worker keeps the target folder in step with
    its recipients: `<folder>/.sops.yaml`, and files encrypted for other recipients are
    re-encrypted (one commit that says so) before anything else of the batch is written."""

    @property
    def recipients(self) -> tuple[str, ...]: ...

    def sops_config(self, current: bytes | None) -> bytes | None:
        """What `<folder>/.sops.yaml` should hold given its `current` content (None when
        missing); None to leave it alone."""
        ...

    def recipients_of(self, data: bytes) -> frozenset[str] | None:
        """The recipients an encrypted file is readable by; None: not one to re-encrypt."""
        ...

    def rekey(self, identity: Identity, data: bytes) -> bytes:
        """The file's content encrypted for `recipients` (or `RefusedContent`)."""
        ...


def _upkeep_key(config: TargetConfig | None) -> tuple[str, tuple[str, ...], bytes | None] | None:
    renderer = config.renderer if config is not None else None
    if config is None or not isinstance(renderer, Encrypting) or not renderer.recipients:
        return None
    return config.folder, tuple(sorted(renderer.recipients)), renderer.sops_config(None)


class PlainRenderer:
    """Canonical YAML, never encrypted."""

    def encrypted(self, rtype: ResourceType) -> bool:
        return False

    def render(
        self,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
        previous: bytes | None,
    ) -> bytes:
        return dump_yaml(order_document(document)).encode()


@dataclass(frozen=True)
class TargetConfig:
    key: TargetKey
    folder: str
    layout: Layout
    prune: PruneMode
    renderer: Renderer
    change_template: str = messages.DEFAULT_CHANGE_TEMPLATE
    snapshot_template: str = messages.DEFAULT_SNAPSHOT_TEMPLATE
    group_template: str = messages.DEFAULT_GROUP_TEMPLATE
    window: WindowPolicy = field(default_factory=WindowPolicy)
    attribution: AttributionMode = AttributionMode.CONFIGURED

    def __post_init__(self) -> None:
        object.__setattr__(self, "folder", normalize_target_path(self.folder))
        messages.validate(self.change_template, messages.CHANGE_FIELDS)
        messages.validate(self.snapshot_template, messages.SNAPSHOT_FIELDS)
        messages.validate(self.group_template, messages.GROUP_FIELDS)


@dataclass(frozen=True)
class Committer:
    name: str
    email: str

    def __post_init__(self) -> None:
        for value in (self.name, self.email):
            if not value.strip() or any(c in value for c in "<>\n"):
                raise ValueError(f"invalid commit identity {value!r}")


@dataclass(frozen=True)
class WriteReport:
    """The outcome of one write attempt for one target.

    `commit`/`pushed_at` are the last commit pushed for this target (by this worker) and when.
    `retained` counts documents the prune mode keeps although they are gone from the cluster.
    `refused` documents were not written; `ok` is about the push, not about them.
    """

    target: TargetKey
    ok: bool
    reason: str
    message: str
    commit: str | None
    pushed_at: float | None
    documents: int
    retained: int
    refused: list[Refusal] = field(default_factory=list)


class BranchWorker:
    """The single writer for one (normalized URL, branch).

    `submit`, `configure`, `start` and `stop` are called on the event loop; `on_report` and
    `on_pushed` are called on that loop too. All Git work runs on the worker's own thread.
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
    ) -> None:
        self.url = url
        self.branch = branch
        self.key = (normalize_url(url), branch)
        self.committer = committer
        self._on_report = on_report
        self._on_pushed = on_pushed
        self._targets: dict[TargetKey, TargetConfig] = {}
        self._queue: deque[Item] = deque()
        self._unpushed: list[Item] = []
        self._collapsed_cursors: list[Cursor] = []
        self._last: dict[TargetKey, _Last] = {}
        self._wake = asyncio.Event()
        self._stopping = False
        self._retry_now = asyncio.Event()
        self._upkeep_due = False
        self._task: asyncio.Task[None] | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._queue_depth = metrics.QUEUE_DEPTH.labels(f"{self.key[0]}#{branch}")
        self._log = log.bind(repo=self.key[0], branch=branch)
        self._writer = _Writer(
            url,
            branch,
            cache_dir=cache_dir,
            committer=committer,
            callbacks=callbacks,
            max_rebuilds=max_rebuilds,
            logger=self._log,
        )
        self._admission = Admission(
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
        self._admission.reconfigure(old.get, self._targets.get)
        if any(_upkeep_key(t) != _upkeep_key(old.get(t.key)) for t in targets):
            self._upkeep_due = True  # encryption changed: check the folders even if idle
            self._wake.set()

    def set_signer(self, signer: CommitSigner | None) -> None:
        """Sign every commit from the next one on (`MissingSigner`: commit nothing)."""
        self._writer.signer = signer

    def retry_now(self) -> None:
        """Cut short the wait after a failed write (e.g. its credentials changed)."""
        self._retry_now.set()

    def submit(self, item: Item) -> None:
        """Queue an item (FIFO); never blocks."""
        if self._stopping and (self._task is None or self._task.done()):
            raise RuntimeError("branch worker is stopped")
        if isinstance(item, Group):
            raise TypeError("groups are made by the commit window, not submitted")
        self._admission.enter(item)  # author and window rules; then `_enqueue`

    def _enqueue(self, item: Item) -> None:
        self._queue.append(item)
        self._queue_depth.set(self.pending)
        self._wake.set()

    # -- CommitRequests --------------------------------------------------------------------
    def hold(
        self,
        target: TargetKey,
        requester: Author | None,
        on_progress: Callable[[str, str], None] | None = None,
    ) -> RequestHandle:
        """Keep the requester's commit window of `target` open (also with window 0) until
        `fire` or `release`. `on_progress(reason, message)` reports a push being retried."""
        return self._admission.hold(target, requester, on_progress)

    def fire(self, handle: RequestHandle, message: str) -> asyncio.Future[RequestOutcome]:
        """Close the held window with `message` after every item submitted so far; the future
        resolves once that commit is pushed (or nothing needed committing, or the target is
        no longer written). It is never failed by a timeout: a failing push is retried."""
        return self._admission.fire(handle, message)

    def release(self, handle: RequestHandle) -> None:
        """Stop holding (before `fire`): the window closes by its own rules again."""
        self._admission.release(handle)

    def start(self) -> None:
        if self._task is not None:
            raise RuntimeError("branch worker already started")
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="kubescribe-git")
        self._task = asyncio.get_running_loop().create_task(
            self._run(), name=f"branch-worker {self.key[0]}#{self.branch}"
        )

    async def stop(self, timeout: float = 30.0) -> bool:
        """Write what is queued, then stop. False if that did not finish within `timeout`
        (what was not pushed is not acknowledged: nothing is lost, it is replayed later)."""
        self._admission.shutdown()  # open windows close (reason shutdown) and are written
        self._stopping = True
        self._wake.set()
        self._retry_now.set()
        flushed = self.pending == 0
        if self._task is not None and not self._task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self._task), timeout)
                flushed = True
            except TimeoutError:
                flushed = False
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        for item in [*self._unpushed, *self._queue]:  # requests this worker can no longer end
            if isinstance(item, Group) and item.request is not None:
                item.request.finish(
                    RequestOutcome(WORKER_STOPPED, "The branch worker stopped", self.branch)
                )
        if self._executor is not None:
            self._executor.submit(self._writer.close)
            self._executor.shutdown(wait=False)
            self._executor = None
        return flushed

    @property
    def pending(self) -> int:
        """Items not yet pushed: queued, being written, or kept after a failed write."""
        return len(self._queue) + len(self._unpushed) + self._admission.pending

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._writer.warm_up, dict(self._targets))
        failures = 0
        while True:
            self._admission.close_due()
            if not self._queue and not self._unpushed and not self._upkeep_due:
                if self._stopping:
                    return
                self._wake.clear()
                await self._idle()
                continue
            batch = self._unpushed = [*self._unpushed, *self._queue]
            self._queue.clear()
            targets = dict(self._targets)
            self._upkeep_due = False
            try:
                outcome = await loop.run_in_executor(
                    self._executor, self._writer.write, batch, targets
                )
            except Exception as exc:  # every failure keeps the batch
                failures += 1
                self._upkeep_due = True
                self._failed(batch, targets, exc)
                delay = min(RETRY_MAX, RETRY_INITIAL * 2 ** min(failures - 1, 10))
                delay *= random.uniform(0.8, 1.0)
                with contextlib.suppress(TimeoutError):
                    # stop() asks for one attempt now instead of at the end of the wait.
                    await asyncio.wait_for(self._retry_now.wait(), delay)
                self._retry_now.clear()
                continue
            failures = 0
            self._succeeded(batch, outcome)

    async def _idle(self) -> None:
        """Wait for an item, or until the next commit window deadline."""
        deadline = self._admission.next_deadline()
        if deadline is None:
            await self._wake.wait()
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), max(0.0, deadline - self._clock()))

    def _succeeded(self, batch: list[Item], outcome: _Outcome) -> None:
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
        self._queue_depth.set(self.pending)
        now = time.monotonic()
        for item in outcome.written:
            metrics.LAG.observe(max(0.0, now - item.observed_at))
        for kind, count in outcome.commits.items():
            metrics.COMMITS.labels(kind).inc(count)
        pushed_at = time.time() if outcome.pushed else None
        for key in sorted(targets):
            result = outcome.targets.get(key, _TargetResult())
            last = self._last.setdefault(key, _Last())
            if result.commit is not None:
                last.commit, last.pushed_at = result.commit, pushed_at
            last.documents, last.retained = result.documents, result.retained
            for _, reason, _ in result.refused:
                metrics.REFUSED.labels(reason).inc()
            metrics.DOCUMENTS.labels(str(key)).set(result.documents)
            metrics.RETAINED.labels(str(key)).set(result.retained)
            message = f"Pushed {result.commit[:12]}" if result.commit else "Up to date"
            if result.refused:
                message += f"; {len(result.refused)} document(s) refused"
            self._report(
                WriteReport(
                    key,
                    True,
                    PUSHED,
                    message,
                    last.commit,
                    last.pushed_at,
                    last.documents,
                    last.retained,
                    result.refused,
                )
            )
        if cursors and self._on_pushed is not None:
            try:
                self._on_pushed(cursors)
            except Exception:  # a callback must not stop the writer
                self._log.exception("on_pushed callback failed")

    def _failed(
        self, batch: list[Item], targets: Mapping[TargetKey, TargetConfig], exc: Exception
    ) -> None:
        if isinstance(exc, RemoteError | SigningUnavailable):
            reason, message = exc.reason, str(exc)
        else:
            reason, message = WRITE_FAILED, f"{type(exc).__name__}: {exc}"
            self._log.error("write failed", exc_info=exc)
        self._log.warning(
            "write failed, will retry", reason=reason, error=message, items=len(batch)
        )
        for item in batch:
            if isinstance(item, Group) and item.request is not None:
                if item.target in targets:
                    item.request.progress(reason, f"Push failed, retrying: {message}")
                else:
                    item.request.finish(self._not_written(item.target))
        kept, dropped = _collapse([i for i in batch if i.target in targets])
        self._unpushed = kept
        self._collapsed_cursors += dropped
        self._queue_depth.set(self.pending)
        for key in sorted({item.target for item in kept}):
            last = self._last.get(key, _Last())
            self._report(
                WriteReport(
                    key,
                    False,
                    reason,
                    message,
                    last.commit,
                    last.pushed_at,
                    last.documents,
                    last.retained,
                )
            )

    def _not_written(self, target: TargetKey) -> RequestOutcome:
        return RequestOutcome(
            TARGET_NOT_WRITABLE, f"GitTarget {target} is not written by this worker", self.branch
        )

    def _settle(self, batch: list[Item], outcome: _Outcome) -> None:
        """Finish the CommitRequests whose windows were in this (pushed) batch."""
        for item in batch:
            if not isinstance(item, Group) or item.request is None:
                continue
            request = item.request
            if item.target in outcome.unknown:
                request.finish(self._not_written(item.target))
                continue
            result = outcome.requests.get(request, _RequestResult())
            author = item.author or self._admission.committer
            if result.refused:
                _, reason, why = result.refused[0]
                more = f" (and {len(result.refused) - 1} more)" if len(result.refused) > 1 else ""
                request.finish(
                    RequestOutcome(
                        reason, why + more, self.branch, result.commit, result.changes, author
                    )
                )
            elif result.commit is None:
                request.finish(
                    RequestOutcome(
                        NOTHING_TO_COMMIT,
                        "The window's changes left the target's files as they were",
                        self.branch,
                    )
                )
            else:
                request.finish(
                    RequestOutcome(
                        PUSHED,
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
            self._log.exception("on_report callback failed")


@dataclass
class _Last:
    commit: str | None = None
    pushed_at: float | None = None
    documents: int = 0
    retained: int = 0


@dataclass
class _TargetResult:
    commit: str | None = None
    documents: int = 0
    retained: int = 0
    refused: list[Refusal] = field(default_factory=list)


@dataclass
class _Outcome:
    pushed: bool
    targets: dict[TargetKey, _TargetResult]
    written: list[Item]
    commits: dict[str, int]
    unknown: frozenset[TargetKey]
    requests: dict[RequestHandle, _RequestResult] = field(default_factory=dict)


@dataclass
class _RequestResult:
    """The commit a CommitRequest's window became in one build (None: no change)."""

    commit: str | None = None
    changes: int = 0
    refused: list[Refusal] = field(default_factory=list)


def _collapse(items: list[Item]) -> tuple[list[Item], list[Cursor]]:
    """Drop changes superseded by a later change of the same object (the later one decides
    the file; snapshots in between touch it no differently). Returns the kept items and the
    cursors of the dropped ones, which are acknowledged with the push that carries the rest."""
    last = {
        (item.target, item.identity): i for i, item in enumerate(items) if isinstance(item, Change)
    }
    kept: list[Item] = []
    dropped: list[Cursor] = []
    for i, item in enumerate(items):
        if isinstance(item, Change) and last[(item.target, item.identity)] != i:
            if item.cursor is not None:
                dropped.append(item.cursor)
        else:
            kept.append(item)
    return kept, dropped


class _Writer:
    """Everything that touches the repository; runs only on the worker's thread."""

    def __init__(
        self,
        url: str,
        branch: str,
        *,
        cache_dir: Path,
        committer: Committer,
        callbacks: CallbacksFactory | None,
        max_rebuilds: int,
        logger: Any,
    ) -> None:
        self.url = url
        self.branch = branch
        self.cache_dir = cache_dir
        self.committer = committer
        self.callbacks = callbacks
        self.max_rebuilds = max_rebuilds
        self.log = logger
        self.repo: GitRepository | None = None
        self.signer: CommitSigner | None = None  # set from the event loop
        self.tip: pygit2.Oid | None = None
        self.tip_known = False
        self.indexes: dict[tuple[TargetKey, str], TargetIndex] = {}
        self.retained: dict[TargetKey, set[Identity]] = {}
        # Encryption upkeep: (folder tree, upkeep key) known to be in step, per target; the
        # recipients of encrypted blobs; blobs that could not be re-encrypted, per upkeep key.
        self.upkept: dict[TargetKey, tuple[pygit2.Oid | None, Any]] = {}
        self.file_recipients: dict[pygit2.Oid, frozenset[str] | None] = {}
        self.rekey_failed: set[tuple[pygit2.Oid, Any]] = set()

    def open(self) -> GitRepository:
        if self.repo is None:
            self.repo = GitRepository(self.url, self.cache_dir, self.callbacks)
        self.repo.repo.signer = self.signer
        return self.repo

    def close(self) -> None:
        self.repo = None
        self.indexes.clear()
        self.upkept.clear()
        self.file_recipients.clear()

    def remote_tip(self) -> pygit2.Oid | None:
        if not self.tip_known:
            started = time.perf_counter()
            self.tip = self.open().fetch(self.branch)
            self.tip_known = True
            self.log.info(
                "fetched",
                tip=str(self.tip) if self.tip else None,
                seconds=round(time.perf_counter() - started, 3),
            )
        return self.tip

    def warm_up(self, targets: Mapping[TargetKey, TargetConfig]) -> None:
        """Fetch and index once at start so the first change does not pay for it."""
        try:
            build = _Build(self, self.remote_tip(), targets)
            for config in targets.values():
                build.index(config)
        except Exception as exc:  # the first write retries and reports
            self.tip_known = False
            self.log.warning("warm-up failed", error=str(exc))

    def write(self, batch: list[Item], targets: Mapping[TargetKey, TargetConfig]) -> _Outcome:
        wanted = {(t.key, t.folder) for t in targets.values()}
        for stale in [k for k in self.indexes if k not in wanted]:
            del self.indexes[stale]
        try:
            return self._write(batch, targets)
        except Exception:
            # Unreachable, or a push that may or may not have landed: ask the remote next time.
            self.tip_known = False
            raise

    def _write(self, batch: list[Item], targets: Mapping[TargetKey, TargetConfig]) -> _Outcome:
        for attempt in range(self.max_rebuilds + 1):
            base = self.remote_tip()
            started = time.perf_counter()
            build = _Build(self, base, targets)
            build.upkeep()
            for item in batch:
                build.apply(item)
            built = time.perf_counter()
            if build.head == base:
                build.commit_state()
                return build.outcome(pushed=False)
            assert build.head is not None
            try:
                self.open().push(self.branch, build.head, base)
            except PushRejected:
                metrics.PUSHES.labels("rejected").inc()
                if attempt == self.max_rebuilds:
                    raise
                self.tip_known = False
                self.log.info(
                    "push rejected, rebuilding on the new remote tip", attempt=attempt + 1
                )
                time.sleep(min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.5))
                continue
            except PushDenied:
                metrics.PUSHES.labels("denied").inc()
                raise  # a hook or a read-only credential: rebuilding would not help
            except RemoteUnavailable:
                metrics.PUSHES.labels("failed").inc()
                raise
            metrics.PUSHES.labels("ok").inc()
            self.tip = build.head
            build.commit_state()
            self.log.info(
                "pushed",
                tip=str(build.head),
                items=len(batch),
                commits=sum(build.commits.values()),
                build_seconds=round(built - started, 4),
                push_seconds=round(time.perf_counter() - built, 4),
            )
            return build.outcome(pushed=True)
        raise AssertionError("unreachable")


class _Plan:
    """The file edits of one commit, checked against the target's index before they apply."""

    def __init__(self, index: TargetIndex) -> None:
        self.index = index
        self.writes: dict[Identity, Entry] = {}
        self.deletes: dict[Identity, Entry] = {}
        self._written: dict[str, Identity] = {}
        self._freed: set[str] = set()

    def free(self, path: str, identity: Identity) -> bool:
        """Whether `identity` may write `path`: never over another document or someone
        else's file, unless this commit deletes that document."""
        owner = self._written.get(path)
        if owner is not None:
            return owner == identity
        return not self.index.blocked(path, identity) or path in self._freed

    def write(self, identity: Identity, entry: Entry) -> None:
        self.writes[identity] = entry
        self._written[entry.path] = identity

    def delete(self, identity: Identity, entry: Entry) -> None:
        self.deletes[identity] = entry
        self._freed.add(entry.path)

    def drop(self, path: str) -> Identity:
        identity = self._written.pop(path)
        del self.writes[identity]
        return identity

    def edits(self) -> dict[str, pygit2.Oid | None]:
        edits: dict[str, pygit2.Oid | None] = {e.path: None for e in self.deletes.values()}
        for identity in self.writes:
            old = self.index.get(identity)
            if old is not None and old.path not in self._written:
                edits[old.path] = None  # moved between plain and encrypted
        edits.update((e.path, e.oid) for e in self.writes.values())
        return edits

    def apply(self) -> None:
        for identity in self.deletes:
            self.index.remove(identity)
        for identity, entry in self.writes.items():
            self.index.set(identity, entry)


class _Build:
    """One attempt at a batch: a chain of commits on `base`, built in memory."""

    def __init__(
        self, writer: _Writer, base: pygit2.Oid | None, targets: Mapping[TargetKey, TargetConfig]
    ) -> None:
        self.writer = writer
        self.repo = writer.open().repo
        self.targets = targets
        self.head = base
        self.tree: pygit2.Oid | None = None
        if base is not None:
            commit = self.repo[base]
            assert isinstance(commit, pygit2.Commit)
            self.tree = commit.tree_id
        self.base_tree = self.tree
        self.indexes: dict[TargetKey, TargetIndex] = {}
        self.retained: dict[TargetKey, set[Identity]] = {}
        self.results: dict[TargetKey, _TargetResult] = {}
        self.written: list[Item] = []
        self.commits = {"change": 0, "snapshot": 0}
        self.unknown: set[TargetKey] = set()
        self.blobs: dict[pygit2.Oid, bytes] = {}  # planned, not yet stored
        self.grouped: list[tuple[Change, str]] | None = None  # changes of the group being built
        self.requests: dict[RequestHandle, _RequestResult] = {}
        self.upkept: dict[TargetKey, Any] = {}

    def index(self, config: TargetConfig) -> TargetIndex:
        """The target's working index, starting from the base tree (built once per tree)."""
        index = self.indexes.get(config.key)
        if index is not None:
            return index
        key = (config.key, config.folder)
        cached = self.writer.indexes.get(key)
        tree_id = folder_tree(self.repo, self.base_tree, config.folder)
        if cached is None or cached.tree_id != tree_id:
            started = time.perf_counter()
            cached = TargetIndex.build(self.repo, self.base_tree, config.folder, cached)
            self.writer.indexes[key] = cached
            self.writer.log.info(
                "indexed",
                target=str(config.key),
                documents=len(cached),
                duplicates=len(cached.duplicates),
                seconds=round(time.perf_counter() - started, 3),
            )
        index = self.indexes[config.key] = cached.copy()
        self.retained[config.key] = set(self.writer.retained.get(config.key, ()))
        return index

    def apply(self, item: Item) -> None:
        config = self.targets.get(item.target)
        if config is None:
            if item.target not in self.unknown:
                self.writer.log.warning("item for an unconfigured target", target=str(item.target))
            self.unknown.add(item.target)
            return
        if isinstance(item, Snapshot):
            self._snapshot(config, item)
        elif isinstance(item, Group):
            self._group(config, item)
        else:
            self._change(config, item)

    def _group(self, config: TargetConfig, group: Group) -> None:
        """One commit for the changes of a closed window: each applied in order as for a
        single commit, then one commit of the final tree."""
        base_tree = self.tree
        result = self.results.setdefault(config.key, _TargetResult())
        refused_before = len(result.refused)
        grouped: list[tuple[Change, str]] = []
        self.grouped = grouped
        try:
            for change in group.changes:
                self._change(config, change)
        finally:
            self.grouped = None
        request = _RequestResult(changes=len(grouped), refused=result.refused[refused_before:])
        if group.request is not None:
            self.requests[group.request] = request
        if self.tree == base_tree or self.tree is None:
            return
        lines = [text for _, text in grouped]
        author = group.author or self.writer.committer
        if group.message is not None:
            text = messages.with_body(group.message, lines)
        elif len(grouped) == 1:
            text = lines[0]
        else:
            values = messages.group_values(
                [change for change, _ in grouped], str(config.key), author.name
            )
            text = messages.with_body(messages.render(config.group_template, values), lines)
        self._create_commit(self.tree, text, group.author)
        request.commit = result.commit = str(self.head)
        self.commits["change"] += 1
        self.written.extend(change for change, _ in grouped)

    def _change(self, config: TargetConfig, change: Change) -> None:
        index = self.index(config)
        retained = self.retained[config.key]
        plan = _Plan(index)
        identity = change.identity
        if change.document is None or change.operation is Operation.DELETE:
            entry = index.get(identity)
            if entry is None:
                retained.discard(identity)
                return
            if config.prune is PruneMode.NEVER:
                retained.add(identity)
                return
            retained.discard(identity)
            plan.delete(identity, entry)
        else:
            retained.discard(identity)
            self._upsert(config, plan, identity, change.rtype, change.document)

        def message() -> str:
            entry = plan.writes.get(identity) or plan.deletes[identity]
            rtype = change.rtype
            return messages.render(
                config.change_template,
                {
                    "operation": str(change.operation),
                    "kind": identity.kind,
                    "group": rtype.group or CORE_GROUP,
                    "version": rtype.version,
                    "resource": rtype.resource,
                    "namespace": identity.namespace,
                    "name": identity.name,
                    "ref": identity.ref,
                    "target": str(config.key),
                    "path": entry.path,
                },
            )

        self._commit(config, plan, change, "change", message)

    def _snapshot(self, config: TargetConfig, snapshot: Snapshot) -> None:
        index = self.index(config)
        plan = _Plan(index)
        kept: set[Identity] = set()
        for identity in [i for i in index if snapshot.in_scope(i)]:
            if identity in snapshot.documents:
                continue
            prune = config.prune
            if prune is PruneMode.ALWAYS or (
                prune is PruneMode.ON_EVENT and identity in snapshot.deleted
            ):
                entry = index.get(identity)
                assert entry is not None
                plan.delete(identity, entry)
            else:
                kept.add(identity)
        for identity in sorted(snapshot.documents, key=_sort_key):
            document = snapshot.documents[identity]
            self._upsert(config, plan, identity, snapshot.rtype, document)
        retained = self.retained[config.key]
        retained.difference_update([i for i in retained if snapshot.in_scope(i)])
        retained.update(kept)

        def message() -> str:
            added = sum(1 for i in plan.writes if i not in index)
            rtype = snapshot.rtype
            return messages.render(
                config.snapshot_template,
                {
                    "resource": rtype.resource,
                    "group": rtype.group or CORE_GROUP,
                    "scope": snapshot.namespace or "cluster",
                    "added": added,
                    "updated": len(plan.writes) - added,
                    "removed": len(plan.deletes),
                    "target": str(config.key),
                },
            )

        self._commit(config, plan, snapshot, "snapshot", message)

    def _upsert(
        self,
        config: TargetConfig,
        plan: _Plan,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
    ) -> None:
        """Plan writing one document where it lives (or at its layout path, if new)."""
        entry = plan.index.get(identity)
        try:
            encrypted = config.renderer.encrypted(rtype)
            previous: bytes | None = None
            if entry is None:
                path = posixpath.join(
                    config.folder, config.layout.path_for(identity, rtype, encrypted=encrypted)
                )
            elif entry.path.endswith(ENCRYPTED_SUFFIX) == encrypted:
                path = entry.path
                blob = self.repo[entry.oid]
                assert isinstance(blob, pygit2.Blob)
                previous = blob.data
            else:
                path = _swap_suffix(entry.path, encrypted)
            if not plan.free(path, identity):
                raise RefusedContent(PATH_CONFLICT, f"{path} already holds another file")
            data = config.renderer.render(identity, rtype, document, previous)
        except RefusedContent as refused:
            self._refuse(config, identity, refused.reason, refused.message)
            return
        except Exception as exc:  # one bad document must not block the branch
            self.writer.log.exception(
                "rendering failed", target=str(config.key), kind=identity.kind
            )
            self._refuse(config, identity, RENDER_FAILED, f"{type(exc).__name__}: {exc}")
            return
        oid = pygit2.hash(data)
        if entry is not None and entry.path == path and entry.oid == oid:
            return
        self.blobs[oid] = data
        plan.write(identity, Entry(path, oid))

    def _refuse(self, config: TargetConfig, identity: Identity, reason: str, message: str) -> None:
        result = self.results.setdefault(config.key, _TargetResult())
        result.refused.append((identity, reason, message))

    def _commit(
        self,
        config: TargetConfig,
        plan: _Plan,
        item: Item,
        kind: str,
        message: Callable[[], str],
    ) -> None:
        """Commit the plan on the chain; nothing when it changes nothing."""
        self._store_blobs()
        while True:
            edits = plan.edits()
            if not edits:
                return
            try:
                tree = edit_tree(self.repo, self.tree, edits)
                break
            except TreeConflict as conflict:
                identity = plan.drop(conflict.path)
                self._refuse(config, identity, PATH_CONFLICT, str(conflict))
        text = message()  # before apply: it compares the plan with the index
        plan.apply()
        if tree == self.tree:
            return
        if self.grouped is not None and isinstance(item, Change):
            self.grouped.append((item, text))  # `_group` makes one commit of them all
            self.tree = tree
            return
        self._create_commit(tree, text, item.author if isinstance(item, Change) else None)
        self.results.setdefault(config.key, _TargetResult()).commit = str(self.head)
        self.commits[kind] += 1
        self.written.append(item)

    def upkeep(self) -> None:
        """Keep encrypted target folders in step with their renderer (see `Encrypting`)."""
        for config in self.targets.values():
            key = _upkeep_key(config)
            if key is None:
                continue
            folder_id = folder_tree(self.repo, self.tree, config.folder)
            if self.writer.upkept.get(config.key) != (folder_id, key):
                renderer = config.renderer
                assert isinstance(renderer, Encrypting)
                self._upkeep(config, renderer, key)
            self.upkept[config.key] = key

    def _file(self, path: str) -> bytes | None:
        """The content of the file at `path` in the build's tree, if there is one."""
        root = self.repo[self.tree] if self.tree is not None else None
        if not isinstance(root, pygit2.Tree):
            return None
        try:
            blob = self.repo[root[path].id]
        except KeyError:
            return None
        return blob.data if isinstance(blob, pygit2.Blob) else None

    def _reencrypt(self, config: TargetConfig, renderer: Encrypting, key: Any) -> _Plan:
        """Plan every encrypted document whose recipients differ, encrypted for the new ones."""
        plan = _Plan(self.index(config))
        wanted = frozenset(renderer.recipients)
        cache, failed = self.writer.file_recipients, self.writer.rekey_failed
        for identity in list(plan.index):
            entry = plan.index.get(identity)
            assert entry is not None
            if not entry.path.endswith(ENCRYPTED_SUFFIX) or (entry.oid, key) in failed:
                continue
            if entry.oid not in cache:
                cache[entry.oid] = renderer.recipients_of(self.repo[entry.oid].read_raw())
            if cache[entry.oid] in (None, wanted):
                continue
            try:
                data = renderer.rekey(identity, self.repo[entry.oid].read_raw())
            except Exception as exc:  # the file stays as it is; reported once per key
                failed.add((entry.oid, key))
                if isinstance(exc, RefusedContent):
                    self._refuse(config, identity, exc.reason, exc.message)
                else:
                    self._refuse(config, identity, REENCRYPT_FAILED, type(exc).__name__)
                continue
            oid = pygit2.hash(data)
            self.blobs[oid] = data
            cache[oid] = wanted
            plan.write(identity, Entry(entry.path, oid))
        return plan

    def _upkeep(self, config: TargetConfig, renderer: Encrypting, key: Any) -> None:
        """One commit: re-encrypted documents and the folder's `.sops.yaml`."""
        plan = self._reencrypt(config, renderer, key)
        edits = plan.edits()
        config_path = posixpath.join(config.folder, SOPS_CONFIG)
        current = self._file(config_path)
        sops_config = renderer.sops_config(current)
        if sops_config is not None and sops_config != current:
            self.blobs[pygit2.hash(sops_config)] = sops_config
            edits[config_path] = pygit2.hash(sops_config)
        self._store_blobs()
        if not edits:
            return
        try:
            tree = edit_tree(self.repo, self.tree, edits)
        except TreeConflict as conflict:
            self.writer.log.warning("upkeep skipped", target=str(config.key), error=str(conflict))
            return
        plan.apply()
        recipients = _count(len(set(renderer.recipients)), "age recipient")
        verb = "Update" if current is not None else "Write"
        if plan.writes:
            text = f"Re-encrypt {_count(len(plan.writes), 'document')} for {recipients}"
            if config_path in edits:
                text += f"\n\n{verb} {SOPS_CONFIG}"
        else:
            text = f"{verb} {SOPS_CONFIG} for {recipients}"
        self._create_commit(tree, text, None)
        self.results.setdefault(config.key, _TargetResult()).commit = str(self.head)
        self.commits["upkeep"] = self.commits.get("upkeep", 0) + 1
        self.writer.log.info("encryption upkeep", target=str(config.key), message=text)

    def _create_commit(self, tree: pygit2.Oid, text: str, author: Author | None) -> None:
        """Commit `tree` on the chain. `author` None: the committer (snapshots, and every
        commit under `configured-author`); otherwise the actor, or `UNRESOLVED`."""
        committer = pygit2.Signature(self.writer.committer.name, self.writer.committer.email)
        signature = committer if author is None else _signature(author)
        parents = [self.head] if self.head is not None else []
        self.head = self.repo.create_commit(None, signature, committer, text, tree, parents)
        self.tree = tree

    def _store_blobs(self) -> None:
        if len(self.blobs) >= PACK_THRESHOLD:
            write_blobs(self.repo, self.blobs.values())
        else:
            for data in self.blobs.values():
                self.repo.create_blob(data)
        self.blobs.clear()

    def commit_state(self) -> None:
        """The attempt is final (pushed or nothing to push): its indexes become the cache."""
        for key, index in self.indexes.items():
            index.tree_id = folder_tree(self.repo, self.tree, index.folder)
            self.writer.indexes[(key, index.folder)] = index
            self.writer.retained[key] = self.retained[key]
        for key, upkeep_key in self.upkept.items():
            # Everything written in this build was rendered for the same recipients.
            folder = self.targets[key].folder
            self.writer.upkept[key] = (folder_tree(self.repo, self.tree, folder), upkeep_key)

    def outcome(self, *, pushed: bool) -> _Outcome:
        for key, index in self.indexes.items():
            result = self.results.setdefault(key, _TargetResult())
            result.documents = len(index)
            result.retained = len(self.retained[key])
        return _Outcome(
            pushed,
            self.results,
            self.written,
            self.commits,
            frozenset(self.unknown),
            self.requests,
        )


def _signature(author: Author) -> pygit2.Signature:
    """A Git identity from an attributed author (user names may hold anything)."""

    def clean(value: str, fallback: str) -> str:
        value = "".join(" " if c in "<>\n\r\0" else c for c in value).strip()
        return value or fallback

    return pygit2.Signature(clean(author.name, "unknown"), clean(author.email, "unknown"))


def _sort_key(identity: Identity) -> tuple[str, str, str, str]:
    return (identity.namespace, identity.name, identity.group, identity.kind)


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _swap_suffix(path: str, encrypted: bool) -> str:
    if encrypted:
        return path.removesuffix(".yaml") + ENCRYPTED_SUFFIX
    return path.removesuffix(ENCRYPTED_SUFFIX) + ".yaml"
