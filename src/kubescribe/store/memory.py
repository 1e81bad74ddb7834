"""A bounded in-memory fact index (single replica, no extra services).

Records are kept per route under their lookup keys, in arrival order. The index is bounded by
count and by age: the oldest records go first, counted in
`kubescribe_attribution_facts_evicted_total{reason=capacity|expired}`. Waiters on a route wake
when it gets new records.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping, Sequence

from kubescribe import metrics

Record = Mapping[str, str]


class MemoryFactStore:
    """Implements the attribution fact-index protocol (`add`, `find`, `wait`)."""

    def __init__(
        self,
        max_records: int = 100_000,
        retention: float = 900.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_records < 1:
            raise ValueError("max_records must be at least 1")
        self.max_records = max_records
        self.retention = retention
        self.clock = clock
        self._seq = 0
        # seq -> (route, keys, record, added_at), oldest first
        self._entries: OrderedDict[int, tuple[str, tuple[str, ...], Record, float]] = OrderedDict()
        self._index: dict[tuple[str, str], deque[int]] = {}
        self._events: dict[str, asyncio.Event] = {}

    def __len__(self) -> int:
        return len(self._entries)

    async def add(self, route: str, records: Sequence[tuple[Sequence[str], Record]]) -> None:
        self.index(route, records)

    def index(self, route: str, records: Sequence[tuple[Sequence[str], Record]]) -> None:
        """Synchronous `add` (for backends that feed this index from elsewhere)."""
        if not records:
            return
        now = self.clock()
        for keys, record in records:
            self._seq += 1
            seq = self._seq
            key_tuple = tuple(dict.fromkeys(keys))
            self._entries[seq] = (route, key_tuple, dict(record), now)
            for key in key_tuple:
                self._index.setdefault((route, key), deque()).append(seq)
        self._evict(now)
        metrics.FACTS.set(len(self._entries))
        event = self._events.pop(route, None)
        if event is not None:
            event.set()

    def find(self, route: str, key: str) -> Sequence[Record]:
        seqs = self._index.get((route, key))
        if not seqs:
            return ()
        return [self._entries[s][2] for s in seqs if s in self._entries]

    async def wait(self, route: str, timeout: float) -> bool:
        event = self._events.get(route)
        if event is None:
            event = self._events[route] = asyncio.Event()
        if timeout <= 0:
            return False
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
            return True
        return False

    async def close(self) -> None:
        """Nothing to release (the protocol's backends share a lifecycle)."""

    def _evict(self, now: float) -> None:
        expired = now - self.retention
        while self._entries:
            seq, (route, keys, _, added) = next(iter(self._entries.items()))
            if len(self._entries) > self.max_records:
                reason = "capacity"
            elif added < expired:
                reason = "expired"
            else:
                break
            del self._entries[seq]
            for key in keys:
                seqs = self._index.get((route, key))
                if seqs and seqs[0] == seq:
                    seqs.popleft()
                if seqs is not None and not seqs:
                    del self._index[(route, key)]
            metrics.FACTS_EVICTED.labels(reason).inc()
