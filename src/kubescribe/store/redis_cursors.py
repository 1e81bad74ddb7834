"""Resume cursors in Redis (imported only with `--redis-url`).

Per stream: a hash `<prefix>cursor:<stream>` with the resourceVersion and fingerprint, and a set
`<prefix>known:<stream>` of object keys. One MULTI/EXEC writes both, so a reader never sees a
cursor with the known set of another moment.
"""

from __future__ import annotations

from collections.abc import Iterable

import redis.asyncio as aioredis

from kubescribe.store.cursors import ObjectKey, StreamCursor, decode_key, encode_key

DEFAULT_PREFIX = "kubescribe:streams:"
_CHUNK = 5000


class RedisCursorStore:
    def __init__(self, url: str, *, prefix: str = DEFAULT_PREFIX) -> None:
        self.prefix = prefix
        self._client: aioredis.Redis = aioredis.Redis.from_url(
            url, decode_responses=True, socket_timeout=10.0, socket_connect_timeout=5.0
        )

    async def load(self, stream: str, fingerprint: str) -> StreamCursor | None:
        record = await self._client.hgetall(f"{self.prefix}cursor:{stream}")
        if not record or record.get("fingerprint") != fingerprint or not record.get("rv"):
            return None
        members = await self._client.smembers(f"{self.prefix}known:{stream}")
        return StreamCursor(str(record["rv"]), frozenset(decode_key(str(m)) for m in members))

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
        known = f"{self.prefix}known:{stream}"
        adds, removes = [encode_key(k) for k in added], [encode_key(k) for k in removed]
        async with self._client.pipeline(transaction=True) as pipe:
            if replace:
                pipe.delete(known)
            for i in range(0, len(adds), _CHUNK):
                pipe.sadd(known, *adds[i : i + _CHUNK])
            for i in range(0, len(removes), _CHUNK):
                pipe.srem(known, *removes[i : i + _CHUNK])
            pipe.hset(
                f"{self.prefix}cursor:{stream}",
                mapping={"rv": resource_version, "fingerprint": fingerprint},
            )
            await pipe.execute()

    async def close(self) -> None:
        await self._client.aclose()
