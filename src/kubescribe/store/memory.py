"""A bounded in-memory fact index (single replica, no extra services).

Records are kept per route (a fact source: an audit route, or the admission webhook's reserved
route) under their lookup keys, in arrival order. Each route has its own bound, by count and by
age, so one source can never evict another's records: the oldest records of the route go first,
counted in `kubescribe_attribution_facts_evicted_total{source,reason=capacity|expired}`. Waiters
on a route wake when it gets new records.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence

from kubescribe import metrics
from kubescribe.waits import wait_event

Record = Mapping[str, str]
MARK = "mark"  # a record that only says how far a route has told (`attribution.facts`)


class _Route:
    """One route's records: seq -> (keys, record, added_at), oldest first, and the index."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.entries: OrderedDict[int, tuple[tuple[str, ...], Record, float]] = OrderedDict()
        self.index: dict[str, deque[int]] = {}
        self.facts = 0  # records ever indexed (marks apart), for route health
        self.last_at = 0.0  # wall clock of the last record
        self.told_until = 0.0  # the latest `completed` of its records, never past `last_at`


class MemoryFactStore:
    """Implements the attribution fact-index protocol (`add`, `find`, `wait`, `tally`).

    `max_records` bounds each route; `limits` gives some routes another bound.
    """

    def __init__(
        self,
        max_records: int = 100_000,
        retention: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
        limits: Mapping[str, int] | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if max_records < 1 or any(n < 1 for n in (limits or {}).values()):
            raise ValueError("record bounds must be at least 1")
        self.max_records = max_records
        self.limits = dict(limits or {})
        self.retention = retention
        self.clock = clock
        self.wall = wall
        self._seq = 0
        self._routes: dict[str, _Route] = {}
        self._events: dict[str, asyncio.Event] = {}

    def __len__(self) -> int:
        return sum(len(r.entries) for r in self._routes.values())

    def count(self, route: str) -> int:
        """Records held for `route`."""
        held = self._routes.get(route)
        return len(held.entries) if held else 0

    async def add(self, route: str, records: Sequence[tuple[Sequence[str], Record]]) -> None:
        self.index(route, records)

    def index(self, route: str, records: Sequence[tuple[Sequence[str], Record]]) -> None:
        """Synchronous `add` (for backends that feed this index from elsewhere)."""
        if not records:
            return
        held = self._routes.get(route)
        if held is None:
            held = self._routes[route] = _Route(self.limits.get(route, self.max_records))
        now = self.clock()
        for keys, record in records:
            self._seq += 1
            key_tuple = tuple(dict.fromkeys(keys))
            held.entries[self._seq] = (key_tuple, dict(record), now)
            for key in key_tuple:
                held.index.setdefault(key, deque()).append(self._seq)
        self._evict(route, held, now)
        self._tell(route, held, records)
        metrics.FACTS.labels(route).set(len(held.entries))
        event = self._events.pop(route, None)
        if event is not None:
            event.set()

    def tally(self, route: str) -> tuple[int, float, float]:
        """Facts indexed for `route`, wall time of its last record, its watermark."""
        held = self._routes.get(route)
        return (held.facts, held.last_at, held.told_until) if held else (0, 0.0, 0.0)

    def _tell(
        self, route: str, held: _Route, records: Sequence[tuple[Sequence[str], Record]]
    ) -> None:
        """Route health: count, arrival and how far the records tell (a `completed` time read
        from a record is clamped to now: a clock ahead, or a hostile one, cannot claim later)."""
        held.last_at = now = self.wall()
        facts = sum(1 for _, r in records if r.get("kind") != MARK)
        held.facts += facts
        for _, record in records:
            try:
                told = float(record.get("completed", "0"))
            except (TypeError, ValueError):
                continue
            if not math.isnan(told):
                held.told_until = max(held.told_until, min(told, now))
        metrics.ROUTE_FACTS.labels(route).inc(facts)
        metrics.ROUTE_LAST_FACT.labels(route).set(now)
        metrics.ROUTE_TOLD_UNTIL.labels(route).set(held.told_until)

    def find(self, route: str, key: str) -> Sequence[Record]:
        held = self._routes.get(route)
        seqs = held.index.get(key) if held else None
        if not held or not seqs:
            return ()
        return [held.entries[s][1] for s in seqs if s in held.entries]

    async def wait(self, route: str, timeout: float) -> bool:
        event = self._events.get(route)
        if event is None:
            event = self._events[route] = asyncio.Event()
        if timeout <= 0:
            return False
        return await wait_event(event, timeout)

    async def close(self) -> None:
        """Nothing to release (the protocol's backends share a lifecycle)."""

    def _evict(self, route: str, held: _Route, now: float) -> None:
        expired = now - self.retention
        while held.entries:
            seq, (keys, _, added) = next(iter(held.entries.items()))
            if len(held.entries) > held.limit:
                reason = "capacity"
            elif added < expired:
                reason = "expired"
            else:
                break
            del held.entries[seq]
            for key in keys:
                seqs = held.index.get(key)
                if seqs and seqs[0] == seq:
                    seqs.popleft()
                if seqs is not None and not seqs:
                    del held.index[key]
            metrics.FACTS_EVICTED.labels(route, reason).inc()
