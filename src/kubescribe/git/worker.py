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
from typing import Any, Protocol

import pygit2
import structlog

from kubescribe import metrics
from kubescribe.git.index import Entry, TargetIndex, folder_tree
from kubescribe.git.pack import write_blobs
from kubescribe.git.repo import (
    CallbacksFactory,
    GitRepository,
    PushRejected,
    RemoteUnavailable,
    normalize_url,
)
from kubescribe.git.tree import TreeConflict, edit_tree
from kubescribe.mirror import messages
from kubescribe.mirror.changes import Change, Cursor, Operation, PruneMode, Snapshot, TargetKey
from kubescribe.mirror.identity import CORE_GROUP, Identity, ResourceType
from kubescribe.mirror.layout import ENCRYPTED_SUFFIX, Layout, normalize_target_path, paths_overlap
from kubescribe.mirror.yamlfmt import dump_yaml, order_document

log = structlog.get_logger(__name__)

Item = Change | Snapshot
Refusal = tuple[Identity, str, str]
"""(identity, reason, message) of a document that was not written."""

# WriteReport reasons (stable: they become condition reasons).
PUSHED = "Pushed"
REMOTE_UNREACHABLE = "RemoteUnreachable"
PUSH_REJECTED = "PushRejected"
WRITE_FAILED = "WriteFailed"
PATH_CONFLICT = "PathConflict"
RENDER_FAILED = "RenderFailed"

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

    def __post_init__(self) -> None:
        object.__setattr__(self, "folder", normalize_target_path(self.folder))
        messages.validate(self.change_template, messages.CHANGE_FIELDS)
        messages.validate(self.snapshot_template, messages.SNAPSHOT_FIELDS)


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

    # -- event loop side -------------------------------------------------------------------
    def configure(self, targets: Sequence[TargetConfig]) -> None:
        """Set the targets writing to this branch; applies from the next batch on."""
        for i, a in enumerate(targets):
            for b in targets[i + 1 :]:
                if paths_overlap(a.folder, b.folder):
                    raise ValueError(f"targets {a.key} and {b.key} have overlapping folders")
        self._targets = {t.key: t for t in targets}

    def submit(self, item: Item) -> None:
        """Queue an item (FIFO); never blocks."""
        if self._stopping and (self._task is None or self._task.done()):
            raise RuntimeError("branch worker is stopped")
        self._queue.append(item)
        self._queue_depth.set(self.pending)
        self._wake.set()

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
        if self._executor is not None:
            self._executor.submit(self._writer.close)
            self._executor.shutdown(wait=False)
            self._executor = None
        return flushed

    @property
    def pending(self) -> int:
        """Items not yet pushed: queued, being written, or kept after a failed write."""
        return len(self._queue) + len(self._unpushed)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._writer.warm_up, dict(self._targets))
        failures = 0
        while True:
            if not self._queue and not self._unpushed:
                if self._stopping:
                    return
                self._wake.clear()
                await self._wake.wait()
                continue
            batch = self._unpushed = [*self._unpushed, *self._queue]
            self._queue.clear()
            targets = dict(self._targets)
            try:
                outcome = await loop.run_in_executor(
                    self._executor, self._writer.write, batch, targets
                )
            except Exception as exc:  # every failure keeps the batch
                failures += 1
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

    def _succeeded(self, batch: list[Item], outcome: _Outcome) -> None:
        targets = {item.target for item in batch if item.target not in outcome.unknown}
        cursors = [*self._collapsed_cursors]
        cursors += [
            item.cursor
            for item in batch
            if item.cursor is not None and item.target not in outcome.unknown
        ]
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
        if isinstance(exc, RemoteUnavailable):
            reason, message = REMOTE_UNREACHABLE, str(exc)
        elif isinstance(exc, PushRejected):
            reason, message = PUSH_REJECTED, str(exc)
        else:
            reason, message = WRITE_FAILED, f"{type(exc).__name__}: {exc}"
            self._log.error("write failed", exc_info=exc)
        self._log.warning(
            "write failed, will retry", reason=reason, error=message, items=len(batch)
        )
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
        self.tip: pygit2.Oid | None = None
        self.tip_known = False
        self.indexes: dict[tuple[TargetKey, str], TargetIndex] = {}
        self.retained: dict[TargetKey, set[Identity]] = {}

    def open(self) -> GitRepository:
        if self.repo is None:
            self.repo = GitRepository(self.url, self.cache_dir, self.callbacks)
        return self.repo

    def close(self) -> None:
        self.repo = None
        self.indexes.clear()

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
            for item in batch:
                build.apply(item)
            built = time.perf_counter()
            if build.head == base:
                build.commit_state()
                return build.outcome(pushed=False)
            assert build.head is not None
            try:
                self.open().push(self.branch, build.head)
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
        else:
            self._change(config, item)

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
        # Attributed authors (audit) plug in here; until then the author is the committer.
        author = committer = pygit2.Signature(
            self.writer.committer.name, self.writer.committer.email
        )
        parents = [self.head] if self.head is not None else []
        self.head = self.repo.create_commit(None, author, committer, text, tree, parents)
        self.tree = tree
        self.results.setdefault(config.key, _TargetResult()).commit = str(self.head)
        self.commits[kind] += 1
        self.written.append(item)

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

    def outcome(self, *, pushed: bool) -> _Outcome:
        for key, index in self.indexes.items():
            result = self.results.setdefault(key, _TargetResult())
            result.documents = len(index)
            result.retained = len(self.retained[key])
        return _Outcome(pushed, self.results, self.written, self.commits, frozenset(self.unknown))


def _sort_key(identity: Identity) -> tuple[str, str, str, str]:
    return (identity.namespace, identity.name, identity.group, identity.kind)


def _swap_suffix(path: str, encrypted: bool) -> str:
    if encrypted:
        return path.removesuffix(".yaml") + ENCRYPTED_SUFFIX
    return path.removesuffix(ENCRYPTED_SUFFIX) + ".yaml"
