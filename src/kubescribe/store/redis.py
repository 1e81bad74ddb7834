"""A fact index shared through Redis Streams (several replicas, or facts that outlive a restart).

`add` appends each record to the route's stream (`XADD <prefix><route> MAXLEN ~ N`). Every
replica tails the streams of the routes it uses (`XREAD BLOCK`, no consumer group: each replica
needs every fact) into a local bounded `MemoryFactStore`, which answers `find` and `wait`.
A route first used after start is read back `retention` seconds, so a replica that starts
late (or restarts) still finds recent facts.

Redis being down costs author fidelity only: `add` then indexes locally (this replica still
finds the facts it received) and counts `kubescribe_fact_store_errors_total{op="add"}`; the
tailer retries with backoff. The socket timeout stays above BLOCK (redis-py 8 defaults it to
5 s, which would cut longer blocking reads).

Each entry carries an HMAC of its keys, its record and its stream's name (`EntrySigner`): an
entry someone else wrote into Redis, or copied from another stream, is ignored and counted in
`kubescribe_redis_entries_rejected_total{kind="fact"}`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.exceptions import RedisError

from kubescribe import metrics
from kubescribe.store.memory import MemoryFactStore
from kubescribe.store.redis_client import connect
from kubescribe.store.redis_options import EntrySigner, RedisOptions
from kubescribe.waits import wait_event

IDLE_PING_SECONDS = 10.0  # how often an idle fact store checks that Redis answers

log = structlog.get_logger(__name__)

Record = Mapping[str, str]


class RedisFactStore:
    """The attribution fact-index protocol (`add`, `find`, `wait`, `tally`) over Redis."""

    def __init__(
        self,
        options: RedisOptions,
        *,
        max_stream_length: int = 100_000,
        retention: float = 900.0,
        block: float = 1.0,
        local: MemoryFactStore | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.prefix = options.key_prefix + "facts:"
        self.signer = options.signer()
        self.max_stream_length = max_stream_length
        self.retention = retention
        self.block = block
        self.local = local if local is not None else MemoryFactStore(retention=retention)
        self.wall = wall
        self._client: aioredis.Redis = connect(options, socket_timeout=block + 5.0)
        self._cursors: dict[str, str] = {}
        self._new_route = asyncio.Event()
        self._stopping = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._tail(), name="fact-store-tail")

    async def close(self) -> None:
        """Stop tailing (between two reads: cancelling redis-py mid-command can hang on its
        connection pool) and release the connections."""
        self._stopping.set()
        self._new_route.set()
        task, self._task = self._task, None
        if task is not None:
            done, _ = await asyncio.wait([task], timeout=self.block + 2.0)
            if not done:
                task.cancel()
                await asyncio.wait([task], timeout=1.0)
        await self._client.aclose()

    async def __aenter__(self) -> RedisFactStore:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- protocol --------------------------------------------------------------------------
    async def add(self, route: str, records: Sequence[tuple[Sequence[str], Record]]) -> None:
        if not records:
            return
        self.follow(route)
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                stream = self.prefix + route
                for keys, record in records:
                    pipe.xadd(
                        stream,
                        _encode(self.signer, stream, keys, record),
                        maxlen=self.max_stream_length,
                        approximate=True,
                    )
                await pipe.execute()
            metrics.REDIS_UP.labels("facts").set(1)
        except (RedisError, OSError) as exc:
            metrics.REDIS_UP.labels("facts").set(0)
            metrics.FACT_STORE_ERRORS.labels("add").inc()
            log.warning("facts.redis_add_failed", route=route, error=str(exc))
            self.local.index(route, records)

    def find(self, route: str, key: str) -> Sequence[Record]:
        self.follow(route)
        return self.local.find(route, key)

    async def wait(self, route: str, timeout: float) -> bool:
        self.follow(route)
        return await self.local.wait(route, timeout)

    def tally(self, route: str) -> tuple[int, float, float]:
        self.follow(route)
        return self.local.tally(route)

    def follow(self, route: str) -> None:
        """Tail `route`'s stream from `retention` seconds ago (once per route)."""
        if route not in self._cursors:
            since_ms = max(0, int((self.wall() - self.retention) * 1000))
            self._cursors[route] = f"{since_ms}-0"
            self._new_route.set()

    # -- tailer ----------------------------------------------------------------------------
    async def _ping(self) -> None:
        try:
            await self._client.ping()
        except (RedisError, OSError) as exc:
            metrics.REDIS_UP.labels("facts").set(0)
            log.warning("facts.redis_ping_failed", error=str(exc))
        else:
            metrics.REDIS_UP.labels("facts").set(1)

    async def _tail(self) -> None:
        backoff = 0.2
        while not self._stopping.is_set():
            if not self._cursors:  # nothing to tail yet: still say whether Redis answers
                await self._ping()
                await wait_event(self._new_route, IDLE_PING_SECONDS)
                continue
            self._new_route.clear()
            streams: dict[Any, Any] = {self.prefix + r: c for r, c in self._cursors.items()}
            try:
                reply: Any = await self._client.xread(
                    streams, count=1000, block=int(self.block * 1000)
                )
            except (RedisError, OSError) as exc:
                metrics.REDIS_UP.labels("facts").set(0)
                metrics.FACT_STORE_ERRORS.labels("read").inc()
                log.warning("facts.redis_read_failed", error=str(exc), retry_in=backoff)
                await wait_event(self._stopping, backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.2
            metrics.REDIS_UP.labels("facts").set(1)
            for stream, entries in _stream_entries(reply):
                route = stream.removeprefix(self.prefix)
                batch = []
                for entry_id, fields in entries:
                    self._cursors[route] = entry_id
                    decoded = _decode(self.signer, stream, fields)
                    if decoded is not None:
                        batch.append(decoded)
                    else:
                        metrics.REDIS_REJECTED.labels("fact").inc()
                self.local.index(route, batch)


def _encode(
    signer: EntrySigner, stream: str, keys: Sequence[str], record: Record
) -> dict[Any, Any]:
    fields = {"keys": json.dumps(list(keys)), "record": json.dumps(dict(record), sort_keys=True)}
    fields["mac"] = signer.sign(stream, _signed(fields))
    return fields


def _signed(fields: Mapping[str, str]) -> str:
    return fields["keys"] + "\n" + fields["record"]


def _decode(
    signer: EntrySigner, stream: str, fields: Mapping[str, str]
) -> tuple[list[str], dict[str, str]] | None:
    """The keys and record of an entry this install signed; None for any other entry."""
    try:
        if not signer.verify(stream, _signed(fields), fields["mac"]):
            return None
        keys = json.loads(fields["keys"])
        record = json.loads(fields["record"])
    except (KeyError, ValueError, TypeError):
        return None
    if not isinstance(keys, list) or not isinstance(record, dict):
        return None
    return [str(k) for k in keys], {str(k): str(v) for k, v in record.items()}


def _stream_entries(reply: Any) -> list[tuple[str, list[tuple[str, Mapping[str, str]]]]]:
    """An XREAD reply (RESP2): a list of [stream, [(id, fields), ...]]."""
    out = []
    for stream, entries in reply or []:
        out.append((str(stream), [(str(i), f) for i, f in entries if f is not None]))
    return out
