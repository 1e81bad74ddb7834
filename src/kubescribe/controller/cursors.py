"""Acknowledged resume cursors: saved after the push that makes a stream's changes durable.

Each stream keeps a `StreamJournal` of the object keys its events added or removed since the
last save. When the branch worker reports a push, the keys up to the pushed resourceVersion
are folded into one save for the `CursorStore`, written off the event loop's critical path by
`CursorKeeper.run`. A save that fails is merged with the next one and retried: only resuming is
degraded (a re-list instead of a watch from the cursor), never the mirror itself.

A stream that stops keeps its journal until what it submitted is acknowledged: a hand-over
stops a writer's streams before its worker's last push, and that push's cursor must still be
saved, or the new owner replays it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

import structlog

from kubescribe import metrics
from kubescribe.mirror.changes import Cursor
from kubescribe.store.cursors import CursorStore, ObjectKey
from kubescribe.waits import wait_event

log = structlog.get_logger(__name__)

RETRY = 2.0


def _version(rv: str) -> float:
    """resourceVersions of one API server are increasing integers in practice; anything else
    sorts last, so an acknowledgement then covers every entry before it."""
    try:
        return float(int(rv))
    except ValueError:
        return float("inf")


@dataclass
class Save:
    resource_version: str
    replace: bool = False
    added: set[ObjectKey] = field(default_factory=set)
    removed: set[ObjectKey] = field(default_factory=set)
    since: float = field(default_factory=time.monotonic)

    def then(self, later: Save) -> Save:
        """This save followed by `later`, as one."""
        if later.replace:
            return Save(later.resource_version, True, set(later.added), set(), self.since)
        added = (self.added - later.removed) | later.added
        removed = (self.removed - later.added) | later.removed
        return Save(later.resource_version, self.replace, added, removed, self.since)


class StreamJournal:
    """Object keys a stream's events changed since its last acknowledgement, in order."""

    def __init__(self, stream: str, fingerprint: str) -> None:
        self.stream = stream
        self.fingerprint = fingerprint
        self._snapshot: tuple[str, frozenset[ObjectKey]] | None = None
        self._entries: deque[tuple[str, ObjectKey, bool]] = deque()
        self._in_flight = 0  # changes submitted to the worker and not yet acknowledged

    def snapshot(self, rv: str, keys: Iterable[ObjectKey], count: int = 1) -> None:
        self._entries.clear()
        self._snapshot = (rv, frozenset(keys))
        self._in_flight += count

    @property
    def settled(self) -> bool:
        """Nothing this stream submitted waits in the worker."""
        return self._in_flight == 0

    def event(self, rv: str, key: ObjectKey, present: bool, *, submitted: bool) -> bool:
        """Record an event; True when it can be acknowledged at once (it was filtered out
        and nothing of this stream is waiting in the worker)."""
        self._entries.append((rv, key, present))
        if submitted:
            self._in_flight += int(submitted)
            return False
        return self._in_flight == 0

    def acknowledge(self, versions: list[str]) -> Save | None:
        """Changes carrying these resourceVersions were pushed (by the one worker this stream
        feeds, in order): the last covers the others."""
        return self.ack(max(versions, key=_version), len(versions))

    def ack(self, rv: str, count: int) -> Save | None:
        """`count` changes were pushed, the last at `rv`: what to save now."""
        self._in_flight = max(0, self._in_flight - count)
        limit = _version(rv)
        save: Save | None = None
        if self._snapshot is not None and _version(self._snapshot[0]) <= limit:
            save = Save(rv, True, set(self._snapshot[1]))
            self._snapshot = None
        while self._entries and _version(self._entries[0][0]) <= limit:
            _, key, present = self._entries.popleft()
            save = save or Save(rv)
            (save.removed.discard if present else save.added.discard)(key)
            (save.added.add if present else save.removed.add)(key)
        if save is None:
            return Save(rv)
        save.resource_version = rv
        return save


class SharedJournal(StreamJournal):
    """The journal of a stream shared by several targets (`controller.fanout`): their writers
    push in their own order, so the cursor moves only up to the last event before the oldest
    submission not yet acknowledged, never past a change another writer still holds."""

    def __init__(self, stream: str, fingerprint: str) -> None:
        super().__init__(stream, fingerprint)
        self._waiting: dict[str, int] = {}  # resourceVersion -> submissions not yet pushed

    def _wait(self, rv: str, count: int) -> None:
        if count > 0:
            self._waiting[rv] = self._waiting.get(rv, 0) + count
            self._in_flight += count

    def snapshot(self, rv: str, keys: Iterable[ObjectKey], count: int = 1) -> None:
        self._entries.clear()
        self._snapshot = (rv, frozenset(keys))
        self._wait(rv, count)

    def hold(self, rv: str, count: int = 1) -> None:
        """Keep the cursor before `rv` until as many acknowledgements of it came (a target
        joining the stream: its own snapshot, and what it buffered meanwhile)."""
        self._wait(rv, count)

    def event(self, rv: str, key: ObjectKey, present: bool, *, submitted: bool | int) -> bool:
        self._entries.append((rv, key, present))
        self._wait(rv, int(submitted))
        return not submitted and self._in_flight == 0

    def ack(self, rv: str, count: int) -> Save | None:
        return self.acknowledge([rv] * count)

    def acknowledge(self, versions: list[str]) -> Save | None:
        for rv in versions:
            left = self._waiting.get(rv, 0) - 1
            if left > 0:
                self._waiting[rv] = left
            else:
                self._waiting.pop(rv, None)
        self._in_flight = sum(self._waiting.values())
        floor = min((_version(rv) for rv in self._waiting), default=float("inf"))
        save: Save | None = None
        if self._snapshot is not None:
            if _version(self._snapshot[0]) >= floor:
                return None  # the snapshot itself is not in Git yet
            save = Save(self._snapshot[0], True, set(self._snapshot[1]))
            self._snapshot = None
        while self._entries and _version(self._entries[0][0]) < floor:
            rv, key, present = self._entries.popleft()
            save = save or Save(rv)
            (save.removed.discard if present else save.added.discard)(key)
            (save.added.add if present else save.removed.add)(key)
            save.resource_version = rv
        return save


class CursorKeeper:
    def __init__(self, store: CursorStore) -> None:
        self.store = store
        self._journals: dict[str, StreamJournal] = {}
        self._pending: dict[str, Save] = {}
        self._stopped: set[str] = set()  # streams whose journal waits for its last acks
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def journal(self, stream: str, fingerprint: str) -> StreamJournal:
        self._stopped.discard(stream)
        journal = self._journals[stream] = StreamJournal(stream, fingerprint)
        return journal

    def shared_journal(self, stream: str, fingerprint: str) -> SharedJournal:
        self._stopped.discard(stream)
        journal = self._journals[stream] = SharedJournal(stream, fingerprint)
        return journal

    def drop(self, stream: str) -> None:
        """The stream stopped: its journal goes once what it submitted is acknowledged and
        saved (at once when nothing is)."""
        journal = self._journals.get(stream)
        if journal is None:
            return
        if journal.settled and stream not in self._pending:
            del self._journals[stream]
        else:
            self._stopped.add(stream)

    def _forget_if_done(self, stream: str, journal: StreamJournal) -> None:
        if stream in self._stopped and journal.settled and stream not in self._pending:
            self._stopped.discard(stream)
            del self._journals[stream]

    def acked(self, cursors: Iterable[Cursor]) -> None:
        """The worker pushed changes carrying these cursors (called on the event loop)."""
        versions: dict[str, list[str]] = {}
        for cursor in cursors:
            versions.setdefault(cursor.stream, []).append(cursor.resource_version)
        for stream, acked in versions.items():
            journal = self._journals.get(stream)
            if journal is not None and (save := journal.acknowledge(acked)) is not None:
                self._queue(stream, save)

    def acked_at_once(self, stream: str, rv: str) -> None:
        journal = self._journals.get(stream)
        if journal is not None and (save := journal.ack(rv, 0)) is not None:
            self._queue(stream, save)

    def _queue(self, stream: str, save: Save) -> None:
        previous = self._pending.get(stream)
        self._pending[stream] = previous.then(save) if previous else save
        self._idle.clear()
        self._wake.set()

    async def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every queued save is written (a hand-over releases its Lease after)."""
        return await wait_event(self._idle, timeout)

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                stream, save = next(iter(self._pending.items()))
                del self._pending[stream]
                journal = self._journals.get(stream)
                if journal is None:
                    continue  # the stream is gone: its record is left as it was
                try:
                    await self.store.save(
                        stream,
                        journal.fingerprint,
                        save.resource_version,
                        save.added,
                        save.removed,
                        replace=save.replace,
                    )
                except Exception as exc:  # Redis down: merge with what comes next, retry
                    metrics.CURSOR_SAVES.labels("error").inc()
                    log.warning("cursor.save_failed", error=str(exc) or type(exc).__name__)
                    later = self._pending.pop(stream, None)
                    self._pending[stream] = save.then(later) if later else save
                    await asyncio.sleep(RETRY)
                    continue
                metrics.CURSOR_SAVES.labels("ok").inc()
                metrics.CURSOR_LAG.observe(time.monotonic() - save.since)
                self._forget_if_done(stream, journal)
            self._idle.set()
