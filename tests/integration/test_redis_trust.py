"""Redis is shared state, not an authority: against a real redis-server, entries the operator
did not sign (a forged audit fact, a rewritten cursor, a foreign object key, an entry moved from
another route or install) are ignored and counted; TLS with a password works."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError

from kubescribe import metrics
from kubescribe.attribution.decode import FACT_WRITE, Fact
from kubescribe.attribution.facts import keyed, to_record, version_key
from kubescribe.attribution.resolver import AuditAuthorResolver
from kubescribe.mirror.authors import Author, ObjectEvent
from kubescribe.store.redis import RedisFactStore
from kubescribe.store.redis_cursors import RedisCursorStore
from kubescribe.store.redis_options import RedisOptions
from kubescribe_devenv.pki import CertificateAuthority
from kubescribe_devenv.redis import DEV_HMAC_KEY, RedisServer, RedisTls

ALICE = Author("alice", "alice@users.kubescribe.invalid")
MALLORY = Author("cluster-admin", "admin@users.kubescribe.invalid", "audit")
KEY = DEV_HMAC_KEY.encode()


def write(uid: str, author: Author = ALICE) -> Fact:
    now = time.time()
    return Fact(
        kind=FACT_WRITE,
        verb="update",
        author=author,
        username=author.name,
        group="",
        resource="configmaps",
        namespace="ns",
        name=uid,
        uid=uid,
        resource_version="1",
        received=now - 0.1,
        completed=now,
    )


def event(uid: str) -> ObjectEvent:
    return ObjectEvent(uid, "1", "", "configmaps", "ns", uid, "UPDATE")


def rejected(kind: str) -> float:
    sample = metrics.REGISTRY.get_sample_value(
        "kubescribe_redis_entries_rejected_total", {"kind": kind}
    )
    return sample or 0.0


@pytest.fixture
def options(redis_server: RedisServer) -> RedisOptions:
    return RedisOptions(redis_server.url, KEY, key_prefix=f"test-{uuid.uuid4().hex[:8]}:")


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    """Whoever else reaches Redis."""
    client = aioredis.Redis.from_url(redis_server.url, decode_responses=True)
    yield client
    await client.aclose()


async def settled(store: RedisFactStore, route: str) -> None:
    """Wait until the tailer has read everything written to `route` so far: a signed marker
    written last has arrived."""
    marker = f"marker-{uuid.uuid4().hex[:6]}"
    await store.add(route, keyed([write(marker)]))
    resolver = AuditAuthorResolver(store, route, grace=10)
    assert await resolver.author_of(event(marker), time.monotonic()) == ALICE


async def test_a_forged_or_moved_fact_names_no_author(
    options: RedisOptions, raw: aioredis.Redis
) -> None:
    store = RedisFactStore(options, block=0.2)
    await store.start()
    try:
        stream = options.key_prefix + "facts:local"
        forged = write("u-forged", MALLORY)
        fields: dict[Any, Any] = {
            "keys": json.dumps([version_key("u-forged", "1")]),
            "record": json.dumps(to_record(forged), sort_keys=True),
        }
        await raw.xadd(stream, fields)
        await raw.xadd(stream, {**fields, "mac": "0" * 64})
        # A genuine entry of another route, copied into this one.
        await store.add("other", keyed([write("u-moved", MALLORY)]))
        await settled(store, "other")
        entries: Any = await raw.xrange(options.key_prefix + "facts:other", count=1)
        [(_, moved)] = entries
        await raw.xadd(stream, moved)
        before = rejected("fact")

        await settled(store, "local")

        resolver = AuditAuthorResolver(store, "local", grace=0)
        assert await resolver.author_of(event("u-forged"), time.monotonic()) is None
        assert await resolver.author_of(event("u-moved"), time.monotonic()) is None
        assert rejected("fact") == before + 3
    finally:
        await store.close()


async def test_a_rewritten_cursor_or_a_foreign_object_key_is_not_resumed(
    options: RedisOptions, raw: aioredis.Redis
) -> None:
    cursors = RedisCursorStore(options)
    try:
        await cursors.save("s", "fp", "100", [("ns", "a"), ("ns", "b")], [], replace=True)
        cursor = await cursors.load("s", "fp")
        assert cursor is not None
        assert cursor.resource_version == "100"
        assert cursor.known == {("ns", "a"), ("ns", "b")}

        # Someone adds an object key (the stream would then delete its file as "gone").
        known = options.key_prefix + "streams:known:s"
        await raw.sadd(known, "ns/planted", f"{'0' * 64} ns/planted-too")
        before = rejected("known")
        cursor = await cursors.load("s", "fp")
        assert cursor is not None
        assert cursor.known == {("ns", "a"), ("ns", "b")}
        assert rejected("known") == before + 2

        # Someone moves the cursor past changes not yet in Git.
        await raw.hset(options.key_prefix + "streams:cursor:s", "rv", "999999")
        before = rejected("cursor")
        assert await cursors.load("s", "fp") is None  # the stream lists afresh
        assert rejected("cursor") == before + 1
    finally:
        await cursors.close()


async def test_two_installs_share_one_redis_through_their_key_prefixes(
    redis_server: RedisServer, raw: aioredis.Redis
) -> None:
    run = uuid.uuid4().hex[:8]
    one = RedisOptions(redis_server.url, KEY, key_prefix=f"one-{run}:")
    two = RedisOptions(redis_server.url, KEY, key_prefix=f"two-{run}:")
    a, b = RedisFactStore(one, block=0.2), RedisFactStore(two, block=0.2)
    await a.start()
    await b.start()
    ca, cb = RedisCursorStore(one), RedisCursorStore(two)
    try:
        await a.add("local", keyed([write("u-one")]))
        await ca.save("s", "fp", "7", [("ns", "a")], [], replace=True)
        await settled(b, "local")
        assert not b.find("local", version_key("u-one", "1"))
        assert await cb.load("s", "fp") is None
        # Even with the same key, an entry copied from the other install is not accepted.
        entries: Any = await raw.xrange(f"one-{run}:facts:local", count=1)
        [(_, entry)] = entries
        await raw.xadd(f"two-{run}:facts:local", entry)
        cursor: Any = await raw.hgetall(f"one-{run}:streams:cursor:s")
        await raw.hset(f"two-{run}:streams:cursor:s", mapping=cursor)
        await settled(b, "local")
        assert not b.find("local", version_key("u-one", "1"))
        assert await cb.load("s", "fp") is None
    finally:
        for closing in (a, b, ca, cb):
            await closing.close()


@pytest.fixture
def tls_redis(tmp_path: Path) -> Iterator[RedisServer]:
    ca = CertificateAuthority("redis-test-ca")
    pair = ca.issue("redis", hosts=("127.0.0.1",))
    files = RedisTls(tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt")
    files.cert.write_bytes(pair.cert_pem)
    files.key.write_bytes(pair.key_pem)
    files.ca.write_bytes(ca.cert_pem)
    server = RedisServer(tmp_path / "redis", tls=files, password=uuid.uuid4().hex)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def test_rediss_with_a_ca_file_and_a_password(tls_redis: RedisServer) -> None:
    assert tls_redis.url.startswith("rediss://")
    assert tls_redis.tls is not None
    options = RedisOptions(
        tls_redis.url, KEY, password=tls_redis.password, ca_file=tls_redis.tls.ca
    )
    store, cursors = RedisFactStore(options, block=0.2), RedisCursorStore(options)
    await store.start()
    try:
        await settled(store, "local")
        await cursors.save("s", "fp", "3", [("ns", "a")], [], replace=True)
        cursor = await cursors.load("s", "fp")
        assert cursor is not None
        assert cursor.resource_version == "3"
    finally:
        await store.close()
        await cursors.close()
    # Without the CA the server's certificate is not trusted.
    untrusted = RedisCursorStore(RedisOptions(tls_redis.url, KEY, password=tls_redis.password))
    try:
        with pytest.raises(RedisConnectionError):
            await untrusted.load("s", "fp")
    finally:
        await untrusted.close()
