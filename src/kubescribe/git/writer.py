"""The writer: everything a branch worker does to the repository, on the worker's thread.

A write builds the batch on the remote tip (`Build`), keeps the new objects in memory
(`PendingObjects`), writes them as one pack and pushes once; a rejected push rebuilds on the
new tip. Between writes the object cache is kept small (`repack.tidy`).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pygit2

from kubescribe import heap, metrics
from kubescribe.api import conditions as c
from kubescribe.git.build import Build, Outcome
from kubescribe.git.buildcache import BuildCache
from kubescribe.git.cachequota import CacheQuotaExceeded, NamespaceCache
from kubescribe.git.pack import PackTooLarge
from kubescribe.git.pending import PendingObjects
from kubescribe.git.records import BaseObservation, Item
from kubescribe.git.repack import PACK_LIMIT, TidyResult, pack_count, tidy
from kubescribe.git.repo import (
    CacheBusy,
    CallbacksFactory,
    CommitSigner,
    GitRepository,
    PushDenied,
    PushRejected,
    RemoteError,
    cache_path,
)
from kubescribe.git.targets import Committer, TargetConfig
from kubescribe.mirror.changes import TargetKey
from kubescribe.net.urls import normalize

_PROBE_SIZE = 1 << 20  # a batch's pack needs room too, not a few bytes


class CacheUnwritable(Exception):
    """The object cache cannot be written (a full or read-only disk): nothing is lost, the
    batch is kept and retried; the message names the directory and the system's error."""

    reason = c.CACHE_UNWRITABLE


def cache_problem(cache_dir: Path, exc: BaseException) -> str | None:
    """Why `exc` is the cache's disk and not the remote or the content (None: it is not).

    libgit2 words disk errors its own way (a full disk can read "invalid argument:
    'url->host'"), and an OSError may come from elsewhere: ask the disk itself."""
    if not isinstance(exc, pygit2.GitError | OSError):
        return None
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=cache_dir) as probe:
            probe.write(bytes(_PROBE_SIZE))
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as probe_error:
        return probe_error.strerror or str(probe_error)
    return None


class Abandoned(Exception):
    """The writer gave up its branch (its Lease was lost): a rebuild of queued changes on
    the new owner's commits could bring back what the new owner already removed."""


class Writer:
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
        quota: NamespaceCache | None = None,
    ) -> None:
        self.url = url
        self.branch = branch
        self.cache_dir = cache_dir
        self.committer = committer
        self.callbacks = callbacks
        self.max_rebuilds = max_rebuilds
        self.log = logger
        self.quota = quota or NamespaceCache(cache_dir)  # the namespace's share of the cache
        self.repo: GitRepository | None = None
        self.pending: PendingObjects | None = None
        self.tidy_at = PACK_LIMIT  # packs on disk (of every branch sharing the cache)
        # The cache may hold objects no reference reaches: left by an earlier process, or
        # flushed for a push that failed. The next tidy that takes every pack collects them.
        self.garbage = True
        self.signer: CommitSigner | None = None  # set from the event loop
        self.tip: pygit2.Oid | None = None
        self.tip_known = False
        self.cache = BuildCache()
        self.bases: dict[str, BaseObservation] = {}  # by a target's baseBranch ('' = default)
        self._packs_gauge = metrics.CACHE_PACKS.labels(f"{normalize(url)}#{branch}")
        # Set from the event loop when another replica took the branch: no further attempt.
        self.abandoned = threading.Event()

    def open(self) -> GitRepository:
        repo = self.repo
        if repo is not None and repo.generation != repo.cache_lock.generation:
            self._drop_repo()  # repacked for another branch: this instance maps removed packs
            repo = None
        if repo is None:
            repo = self.repo = GitRepository(self.url, self.cache_dir, self.callbacks)
            self.pending = PendingObjects(repo.repo)
        repo.repo.signer = self.signer
        return repo

    def close(self) -> None:
        self._drop_repo()
        self.cache.clear()

    def _drop_repo(self) -> None:
        """Forget the repository instance and close its files (packs stay open otherwise
        until the garbage collector finds the instance)."""
        if self.repo is not None:
            self.repo.repo.free()
        self.repo = self.pending = None

    def remote_tip(self) -> pygit2.Oid | None:
        if not self.tip_known:
            started = time.perf_counter()
            self.tip = self.quota.fetch(lambda limit: self.open().fetch(self.branch, limit))
            self.tip_known = True
            self.log.info(
                "writer.fetched",
                tip=str(self.tip) if self.tip else None,
                seconds=round(time.perf_counter() - started, 3),
            )
        return self.tip

    def fetched_tip(self, targets: Mapping[TargetKey, TargetConfig]) -> pygit2.Oid | None:
        """The remote tip; when it has to be fetched, the targets' base branches with it."""
        fetching = not self.tip_known
        tip = self.remote_tip()
        if fetching:
            for name in sorted({config.base_branch or "" for config in targets.values()}):
                self._observe_base(name, tip)
        return tip

    def _observe_base(self, name: str, tip: pygit2.Oid | None) -> None:
        """Fetch one base branch (`name`, '' for the remote's default branch); a failure
        costs the observation, never the write."""
        repo = self.open()
        try:
            branch = name or repo.advertised_default_branch()
            if branch is None:
                return
            base = tip
            if branch != self.branch:
                base = self.quota.fetch(lambda limit: repo.fetch(branch, limit))
        except CacheQuotaExceeded:
            raise
        except Exception as exc:
            self.log.warning("writer.base_not_observed", base=name, error=str(exc))
            return
        self.bases[name] = BaseObservation(branch, str(base) if base else None, time.time(), None)
        self._compare_bases(tip)

    def _compare_bases(self, tip: pygit2.Oid | None, pushed: bool = False) -> None:
        """Whether the write branch (at `tip`) holds each base branch's last-seen tip: a walk
        of the local history, no round trip. After a push only where it was not known (the
        branch was just created): a commit of ours on top changes neither answer."""
        repo = self.open().repo
        for name, seen in self.bases.items():
            if pushed and seen.descends is not None:
                continue
            descends = None
            if tip is not None and seen.commit is not None:
                try:
                    base = pygit2.Oid(hex=seen.commit)
                    descends = base == tip or repo.descendant_of(tip, base)
                except (pygit2.GitError, ValueError) as exc:
                    self.log.warning("writer.base_not_compared", base=name, error=str(exc))
            self.bases[name] = replace(seen, descends=descends)
            writer = f"{normalize(self.url)}#{self.branch}"
            metrics.BASE_DESCENDS.labels(writer, seen.name).set(1 if descends else 0)

    def with_bases(self, outcome: Outcome, targets: Mapping[TargetKey, TargetConfig]) -> Outcome:
        """Each target's result with what was last seen of its base branch."""
        for key, result in outcome.targets.items():
            config = targets.get(key)
            seen = self.bases.get(config.base_branch or "") if config is not None else None
            if seen is not None:
                outcome.targets[key] = replace(result, base=seen)
        return outcome

    def start(
        self, tip: pygit2.Oid | None, targets: Mapping[TargetKey, TargetConfig]
    ) -> pygit2.Oid | None:
        """What a build starts from: the remote tip, or for a branch the remote does not have
        yet, the tip of the targets' `baseBranch` (the first, by name) or of the remote's
        default branch, so a new branch shares the repository's history."""
        if tip is not None:
            return tip
        bases = sorted(c.base_branch for c in targets.values() if c.base_branch)
        base = bases[0] if bases else None
        return self.quota.fetch(lambda limit: self.open().start_point(base, limit))

    def warm_up(self, targets: Mapping[TargetKey, TargetConfig]) -> None:
        """Fetch and index once at start so the first change does not pay for it."""
        try:
            with self.open().cache_lock.shared():
                build = self._build(self.start(self.fetched_tip(targets), targets), targets)
                for config in targets.values():
                    build.index(config)
        except CacheQuotaExceeded:  # the first write fetches again and reports
            self.tip_known = False
            self._refuse()
        except Exception as exc:  # the first write retries and reports
            self.tip_known = False
            self.log.warning("writer.warm_up_failed", error=str(exc))
        finally:
            self._discard()
        self._tidy()

    def write(
        self,
        batch: list[Item],
        targets: Mapping[TargetKey, TargetConfig],
        busy: Callable[[], bool] = lambda: False,
    ) -> Outcome:
        """Build and push `batch`, then tidy the cache; while `busy()` (more items wait) only
        from twice as many packs on."""
        self.cache.keep_only(targets)
        try:
            with self.open().cache_lock.shared():
                self.quota.check()  # what earlier writes added may have outgrown the quota
                outcome = self._write(batch, targets)
        except CacheQuotaExceeded:
            self.tip_known = False
            self._discard()
            self._refuse()
            raise
        except Exception as exc:
            # Unreachable, or a push that may or may not have landed: ask the remote next time.
            self.tip_known = False
            self.garbage = True
            self._discard()
            problem = cache_problem(self.cache_dir, exc)
            if problem is not None:
                raise CacheUnwritable(
                    f"the object cache {self.cache_dir} cannot be written: {problem}"
                ) from exc
            raise
        self._tidy(busy())
        return outcome

    def _refuse(self) -> None:
        """Remove this remote's clone: what a refused fetch brought, or what outgrew the
        namespace's quota, leaves the disk (the next attempt fetches afresh)."""
        self.quota.refused()
        lock = self.open().cache_lock
        with lock.exclusive():  # other branches of the remote share the clone
            self._drop_repo()
            shutil.rmtree(cache_path(self.cache_dir, self.url), ignore_errors=True)
        self.cache.clear()
        self.garbage = True
        self.log.warning("cache.quota_exceeded", quota=self.quota.quota, used=self.quota.usage())

    def _build(self, base: pygit2.Oid | None, targets: Mapping[TargetKey, TargetConfig]) -> Build:
        return Build(self.open().repo, self.cache, self.committer, self.log, base, targets)

    def _write(self, batch: list[Item], targets: Mapping[TargetKey, TargetConfig]) -> Outcome:
        for attempt in range(self.max_rebuilds + 1):
            if self.abandoned.is_set():
                raise Abandoned("another replica writes this branch now")
            base = self.fetched_tip(targets)
            started = time.perf_counter()
            start = self.start(base, targets)
            build = self._build(start, targets)
            build.upkeep()
            for item in batch:
                build.apply(item)
            build.render_check(batch)
            if build.kmissing:
                self.tip_known = False  # a held target: fetch again, to see its root back
            if build.head == start:
                self._discard()  # blobs of documents that did not change
                build.commit_state()
                return self.with_bases(build.outcome(pushed=False), targets)
            assert build.head is not None
            self._flush()
            built = time.perf_counter()
            try:
                self.open().push(self.branch, build.head, base)
            except PushRejected:
                metrics.PUSHES.labels("rejected").inc()
                self.garbage = True
                if attempt == self.max_rebuilds:
                    raise
                self.tip_known = False
                self.log.info("writer.push_rejected", attempt=attempt + 1)
                time.sleep(min(2.0, 0.05 * 2**attempt) * random.uniform(0.5, 1.5))
                continue
            except PushDenied:
                metrics.PUSHES.labels("denied").inc()
                raise  # a hook or a read-only credential: rebuilding would not help
            except RemoteError:  # unreachable, or contention in the cache (`reason` says)
                metrics.PUSHES.labels("failed").inc()
                raise
            metrics.PUSHES.labels("ok").inc()
            self.tip = build.head
            self._compare_bases(build.head, pushed=True)
            build.commit_state()
            self.log.info(
                "writer.pushed",
                tip=str(build.head),
                items=len(batch),
                commits=sum(build.commits.values()),
                build_seconds=round(built - started, 4),
                push_seconds=round(time.perf_counter() - built, 4),
            )
            outcome = build.outcome(pushed=True)
            outcome.rebuilds, outcome.base = attempt, str(base) if base is not None else None
            return self.with_bases(outcome, targets)
        raise AssertionError("unreachable")

    def _flush(self) -> None:
        """The build's objects to disk as one pack: the push reads them from there. A batch
        that would take the namespace past its quota is refused."""
        if self.pending is not None:
            with self.quota.room() as room:
                try:
                    self.pending.flush(room)
                except PackTooLarge:
                    raise CacheQuotaExceeded(self.quota.quota) from None

    def _discard(self) -> None:
        if self.pending is not None:
            self.pending.discard()

    def _tidy(self, busy: bool = False) -> None:
        """Merge or repack the cache's packs once they pile up (never during a build); while
        `busy`, only from twice as many packs on (a tidy that copies every pack delays the
        next batch by up to half a second in a burst)."""
        if self.repo is None:
            return
        repo = self.repo
        packs = pack_count(repo.repo)
        self._packs_gauge.set(packs)
        metrics.LIBGIT2_CACHED.set(pygit2.settings.cached_memory[0])
        if packs < (2 * self.tidy_at if busy else self.tidy_at):
            return
        started = time.perf_counter()
        result: TidyResult | None = None
        try:
            with repo.cache_lock.exclusive(), self.quota.room() as room:
                result = tidy(repo.repo, self.garbage, room)
        except (OSError, CacheBusy) as exc:  # a full disk or quota, or the namespace's
            # other writers' turn: the cache stays as it was, and works
            self.tidy_at = packs + PACK_LIMIT
            self.log.warning("cache.tidy_failed", error=str(exc))
            return
        finally:
            if result is None or result.kind != "none":
                self._drop_repo()  # open afresh: this instance maps removed packs
                heap.trim()  # what the repack read, and the dropped instance held
        # Packs in a progression: look again after the next batch's pack.
        self.tidy_at = max(PACK_LIMIT, result.packs + 1)
        self._packs_gauge.set(result.packs)
        if result.kind == "none":
            return
        if result.kind == "repack":
            self.garbage = False
        metrics.REPACKS.inc()
        self.log.info(
            "cache.tidied",
            kind=result.kind,
            objects=result.objects,
            packs_removed=result.packs_removed,
            loose_removed=result.loose_removed,
            seconds=round(time.perf_counter() - started, 3),
        )
