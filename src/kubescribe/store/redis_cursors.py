"""Resume cursors in Redis (imported only with `--redis-url`).

Per stream: a hash `<prefix>streams:cursor:<stream>` with the resourceVersion, fingerprint and
their signature, and a set `<prefix>streams:known:<stream>` of object keys, each member signed
on its own (`<signature> <namespace>/<name>`: saves add and remove members without reading the
set). One MULTI/EXEC writes both, so a reader never sees a cursor with the known set of another
moment.

A cursor without a valid signature is not resumed from (the stream lists afresh) and a member
without one is left out; both are counted in `kubescribe_redis_entries_rejected_total`. Whoever
can write to Redis can still delete entries or replay this stream's own older ones: that costs
what running without Redis costs (a re-list), never a foreign cursor or object key.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis.asyncio as aioredis

from kubescribe import metrics
from kubescribe.store.cursors import ObjectKey, StreamCursor, decode_key, encode_key
from kubescribe.store.redis_client import connect
from kubescribe.store.redis_options import EntrySigner, RedisOptions

_CHUNK = 5000


class RedisCursorStore:
    def __init__(self, options: RedisOptions) -> None:
        self.prefix = options.key_prefix + "streams:"
        self.signer: EntrySigner = options.signer()
        self._client: aioredis.Redis = connect(options, socket_timeout=10.0)

    async def load(self, stream: str, fingerprint: str) -> StreamCursor | None:
        name = f"{self.prefix}cursor:{stream}"
        record = await self._client.hgetall(name)
        if not record:
            return None
        rv, signature = str(record.get("rv") or ""), str(record.get("mac") or "")
        stored = str(record.get("fingerprint") or "")
        if not self.signer.verify(name, _cursor_payload(rv, stored), signature):
            metrics.REDIS_REJECTED.labels("cursor").inc()
            return None
        if stored != fingerprint or not rv:
            return None
        known = f"{self.prefix}known:{stream}"
        members = await self._client.smembers(known)
        keys = set()
        for member in members:
            signature, _, text = str(member).partition(" ")
            if self.signer.verify(known, text, signature):
                keys.add(decode_key(text))
            else:
                metrics.REDIS_REJECTED.labels("known").inc()
        return StreamCursor(rv, frozenset(keys))

    async def save(
        self,
        stream: str,
        fingerprint: str,
        resource_version: str,
        added: Iterable[ObjectKey],
        removed: Iterable[ObjectKey],
        *,
        replace: bool,
    ) -> None:
        name, known = f"{self.prefix}cursor:{stream}", f"{self.prefix}known:{stream}"
        adds = [self._member(known, k) for k in added]
        removes = [self._member(known, k) for k in removed]
        async with self._client.pipeline(transaction=True) as pipe:
            if replace:
                pipe.delete(known)
            for i in range(0, len(adds), _CHUNK):
                pipe.sadd(known, *adds[i : i + _CHUNK])
            for i in range(0, len(removes), _CHUNK):
                pipe.srem(known, *removes[i : i + _CHUNK])
            signature = self.signer.sign(name, _cursor_payload(resource_version, fingerprint))
            pipe.hset(
                name,
                mapping={"rv": resource_version, "fingerprint": fingerprint, "mac": signature},
            )
            await pipe.execute()

    async def close(self) -> None:
        await self._client.aclose()

    def _member(self, known: str, key: ObjectKey) -> str:
        text = encode_key(key)
        return f"{self.signer.sign(known, text)} {text}"


def _cursor_payload(resource_version: str, fingerprint: str) -> str:
    return f"{resource_version}\n{fingerprint}"
