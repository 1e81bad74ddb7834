"""One watch stream of a type shared by every target that reads it (issue #35).

A `FanOut` is the sink of one informer of a (cluster, type) across all namespaces. Each target
keeps its own stream rules as a `TargetStream` (namespace, selectors, noise, content, operations)
and its own snapshot: of a shared initial state it gets the objects of its namespace only, so the
sweep of orphans that follows a snapshot stays in its own folder and namespace.

A target that joins a stream already running lists its own namespace once (a LIST, not one more
watch) while the stream keeps what arrives for it meanwhile; its snapshot is that list, and of
what was kept only what is newer than the list follows it. A target that leaves is no longer
handed anything. A new initial state of the whole stream (a start, a 410 Gone) goes to every
target, a join under way included.

Several writers push the targets' changes, each in its own order: the shared cursor
(`SharedJournal`) moves only past events that every writer has pushed, and a join holds it
before the join until the target's snapshot and what it kept are handed over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from kubescribe.controller.cursors import SharedJournal
from kubescribe.controller.streams import Initial, TargetStream
from kubescribe.kube.informer import Backoff, ObjectKey, key_of
from kubescribe.mirror.changes import Cursor
from kubescribe.mirror.replay import version

log = structlog.get_logger(__name__)

Prepared = tuple[tuple[str, Initial], ...]  # (target stream key, what it keeps), per object
Lister = Callable[[TargetStream], Awaitable[tuple[Mapping[ObjectKey, Initial], str]]]
Event = tuple[str, dict[str, Any], str]  # type, object, resourceVersion


@dataclass(eq=False)
class Subscriber:
    """One target's stream within a shared one."""

    stream: TargetStream
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    gathered: bool = False  # in the initial state being gathered (it gets its snapshot)
    joining: bool = False  # listing its own namespace; `kept` holds what came meanwhile
    kept: list[Event] = field(default_factory=list)
    after: int | None = None  # its snapshot holds every event up to this resourceVersion
    task: asyncio.Task[None] | None = None

    @property
    def key(self) -> str:
        return self.stream.spec.key

    def reads(self, namespace: str) -> bool:
        own = self.stream.spec.namespace
        return not own or not self.stream.spec.rtype.namespaced or own == namespace


def _newer(rv: str, than: int | None) -> bool:
    number = version(rv)
    return than is None or number is None or number > than


class FanOut:
    """The sink of a shared informer: hands each event to the target streams that read its
    namespace. `acked` is the cursor keeper's acknowledgement (a join's hold is released
    through it); `ack_now` moves the cursor past events no target took."""

    def __init__(
        self,
        key: str,
        lister: Lister,
        *,
        journal: SharedJournal | None = None,
        acked: Callable[[list[Cursor]], None] | None = None,
        ack_now: Callable[[str, str], None] | None = None,
        retry: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.key = key
        self.lister = lister
        self.journal = journal
        self.acked = acked
        self.ack_now = ack_now
        self.retry = retry
        self.subscribers: dict[str, Subscriber] = {}
        self._by_namespace: dict[str, list[Subscriber]] = {}
        self._wide: list[Subscriber] = []
        self._gathering = False
        self._epoch = 0  # counts initial states: a join started before a newer one is void
        self._started = False  # an initial state was delivered (or the stream resumed)
        self._last: str | None = None  # the newest resourceVersion handed on

    # -- who reads ----------------------------------------------------------------------------
    def add(self, stream: TargetStream, *, resumed: bool = False) -> Subscriber:
        """A target's stream joins: before the first initial state it is part of it (or, on
        a resumed stream, it is up to date); later it lists its own namespace."""
        sub = Subscriber(stream)
        self.subscribers[sub.key] = sub
        self._index()
        if resumed:
            sub.synced.set()
            self._started = True
        elif self._started or self._gathering:
            sub.joining = True
            if not self._gathering:
                self._join(sub)
        return sub

    def remove(self, key: str) -> None:
        sub = self.subscribers.pop(key, None)
        if sub is None:
            return
        self._index()
        if sub.task is not None:
            sub.task.cancel()

    def close(self) -> None:
        for sub in self.subscribers.values():
            if sub.task is not None:
                sub.task.cancel()

    def _index(self) -> None:
        self._by_namespace, self._wide = {}, []
        for sub in self.subscribers.values():
            own = sub.stream.spec.namespace
            if own and sub.stream.spec.rtype.namespaced:
                self._by_namespace.setdefault(own, []).append(sub)
            else:
                self._wide.append(sub)

    def _readers(self, namespace: str) -> list[Subscriber]:
        return [*self._by_namespace.get(namespace, ()), *self._wide]

    # -- the informer's side ------------------------------------------------------------------
    def on_listing(self) -> None:
        """A new initial state is being gathered: every target gets its part of it."""
        self._gathering = True
        self._epoch += 1
        for sub in self.subscribers.values():
            sub.gathered = True

    def prepare(self, obj: dict[str, Any]) -> Prepared:
        namespace = key_of(obj)[0]
        return tuple(
            (sub.key, sub.stream.prepare(obj)) for sub in self._readers(namespace) if sub.gathered
        )

    async def on_snapshot(
        self, objects: Mapping[ObjectKey, Prepared], deleted: set[ObjectKey], rv: str
    ) -> None:
        self._gathering, self._started, self._last = False, True, rv
        recipients = [s for s in self.subscribers.values() if s.gathered]
        parts: dict[str, dict[ObjectKey, Initial]] = {s.key: {} for s in recipients}
        for object_key, prepared in objects.items():
            for key, initial in prepared:
                if key in parts:
                    parts[key][object_key] = initial
        if self.journal is not None:
            self.journal.snapshot(rv, objects, count=len(recipients))
        for sub in recipients:
            if sub.task is not None:
                sub.task.cancel()
            sub.joining, sub.kept, sub.after, sub.task, sub.gathered = False, [], None, None, False
            gone = {k for k in deleted if sub.reads(k[0])}
            await sub.stream.on_snapshot(parts[sub.key], gone, rv)
            sub.synced.set()
        for sub in self.subscribers.values():
            if sub.joining and sub.task is None:
                self._join(sub)  # it came while the state was gathered, without its part
        if not recipients and self.ack_now is not None and self.journal is not None:
            self.ack_now(self.key, rv)

    async def on_event(self, event_type: str, obj: dict[str, Any], rv: str) -> None:
        self._last = rv
        taken: list[TargetStream] = []
        for sub in self._readers(key_of(obj)[0]):
            if sub.joining:
                sub.kept.append((event_type, obj, rv))
            elif _newer(rv, sub.after) and self._hand(sub, event_type, obj, rv):
                taken.append(sub.stream)
        self._journal(event_type, obj, rv, len(taken))
        for stream in taken:
            if stream.room is not None:
                await stream.room()

    async def on_stale(self, event_type: str, obj: dict[str, Any], rv: str) -> None:
        """A replayed event its object has moved past: only the cursor moves."""
        self._last = rv
        self._journal(event_type, obj, rv, 0)

    def _hand(self, sub: Subscriber, event_type: str, obj: dict[str, Any], rv: str) -> bool:
        change = sub.stream.change(event_type, obj, rv)
        if change is None:
            return False
        sub.stream.submit(change)
        return True

    def _journal(self, event_type: str, obj: dict[str, Any], rv: str, submitted: int) -> None:
        if self.journal is None:
            return
        present = event_type != "DELETED"
        settled = self.journal.event(rv, key_of(obj), present, submitted=submitted)
        if settled and self.ack_now is not None:
            self.ack_now(self.key, rv)

    # -- joining ------------------------------------------------------------------------------
    def _join(self, sub: Subscriber) -> None:
        sub.task = asyncio.create_task(self._joined(sub, self._epoch))

    async def _joined(self, sub: Subscriber, epoch: int) -> None:
        hold = self._last
        if self.journal is not None and hold is not None:
            self.journal.hold(hold)
        try:
            objects, rv = await self._list(sub)
            if epoch != self._epoch or self.subscribers.get(sub.key) is not sub:
                return  # a newer initial state (or its leaving) overtook the join
            await self._hand_over(sub, objects, rv)
        finally:
            if self.journal is not None and hold is not None and self.acked is not None:
                self.acked([Cursor(self.key, hold)])
            if sub.task is asyncio.current_task():
                sub.task = None

    async def _list(self, sub: Subscriber) -> tuple[Mapping[ObjectKey, Initial], str]:
        backoff = Backoff()
        while True:
            sub.kept = []  # a LIST answers everything before it: keep only what comes during
            try:
                return await self.lister(sub.stream)
            except Exception as exc:  # any failure: list again, later
                log.warning(
                    "watch.join_failed",
                    stream=sub.key,
                    error=str(exc) or type(exc).__name__,
                )
                await self.retry(backoff.next())

    async def _hand_over(
        self, sub: Subscriber, objects: Mapping[ObjectKey, Initial], rv: str
    ) -> None:
        """The joined target's snapshot, then what it kept that is newer than its list."""
        kept, sub.kept, sub.joining, sub.after = sub.kept, [], False, version(rv)
        if self.journal is not None:
            self.journal.hold(rv)
        await sub.stream.on_snapshot(objects, set(), rv)
        sub.synced.set()
        for event_type, obj, event_rv in _after(kept, sub.after):
            if self._hand(sub, event_type, obj, event_rv):
                if self.journal is not None:
                    self.journal.hold(event_rv)
                if sub.stream.room is not None:
                    await sub.stream.room()


def _after(events: Iterable[Event], rv: int | None) -> list[Event]:
    return [e for e in events if _newer(e[2], rv)]
