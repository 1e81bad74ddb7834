"""The Redis Streams fact index against a real redis-server: shared between replicas, read back
after a restart, routes kept apart, and a Redis outage costs nothing but sharing."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack

import pytest
import redis.asyncio as aioredis

from kubescribe import metrics
from kubescribe.attribution.decode import FACT_WRITE, Fact
from kubescribe.attribution.facts import keyed
from kubescribe.attribution.health import RouteWatch
from kubescribe.attribution.requests import RecordedRequestAuthors
from kubescribe.attribution.resolver import AuditAuthorResolver
from kubescribe.mirror.authors import Author, ObjectEvent
from kubescribe.store.redis import RedisFactStore
from kubescribe.store.redis_options import RedisOptions
from kubescribe_devenv.controlplane import free_port
from kubescribe_devenv.redis import DEV_HMAC_KEY, RedisServer

ALICE = Author("alice", "alice@users.kubescribe.invalid")


def write(uid: str, rv: str = "1", author: Author = ALICE) -> Fact:
    now = time.time()
    return Fact(
        kind=FACT_WRITE,
        verb="create",
        author=author,
        username=author.name,
        group="",
        resource="configmaps",
        namespace="ns",
        name=uid,
        uid=uid,
        resource_version=rv,
        received=now,
        completed=now,
    )


def event(uid: str, rv: str = "1") -> ObjectEvent:
    return ObjectEvent(uid, rv, "", "configmaps", "ns", uid, "CREATE")


@pytest.fixture
async def replicas(redis_server: RedisServer) -> AsyncIterator[Callable[..., RedisFactStore]]:
    """Start fact stores sharing one Redis and one key prefix (like replicas)."""
    options = RedisOptions(
        redis_server.url,
        DEV_HMAC_KEY.encode(),
        key_prefix=f"kubescribe-test:{uuid.uuid4().hex[:8]}:",
    )
    async with AsyncExitStack() as stack:

        def start(**kw: object) -> RedisFactStore:
            store = RedisFactStore(options, block=0.5, **kw)  # type: ignore[arg-type]
            stack.push_async_callback(store.close)
            return store

        yield start


async def test_a_fact_received_by_one_replica_resolves_on_another(
    replicas: Callable[..., RedisFactStore],
) -> None:
    a, b = replicas(), replicas()
    await a.start()
    await b.start()
    # A grace far longer than the wait: the author can only come from the stream waking it.
    resolver = AuditAuthorResolver(b, "local", grace=600)
    lookup = asyncio.create_task(resolver.author_of(event("u-1"), time.monotonic()))
    await a.add("local", keyed([write("u-1")]))
    assert await asyncio.wait_for(lookup, 60) == ALICE


async def test_a_replica_started_later_reads_recent_facts_back(
    replicas: Callable[..., RedisFactStore],
) -> None:
    first = replicas()
    await first.start()
    await first.add("local", keyed([write("u-2")]))
    await first.close()

    restarted = replicas()
    await restarted.start()
    resolver = AuditAuthorResolver(restarted, "local", grace=5)
    assert await resolver.author_of(event("u-2"), time.monotonic()) == ALICE


async def test_routes_stay_apart_in_redis(replicas: Callable[..., RedisFactStore]) -> None:
    a, b = replicas(), replicas()
    await a.start()
    await b.start()
    await a.add("other-cluster", keyed([write("u-3")]))
    await a.add("local", keyed([write("u-marker")]))
    resolver = AuditAuthorResolver(b, "local", grace=5)
    assert await resolver.author_of(event("u-marker"), time.monotonic()) == ALICE
    # The marker arrived on `local` after the other route's fact was written: not visible.
    assert not b.find("local", "rv/u-3/1")
    assert await AuditAuthorResolver(b, "local", grace=0).author_of(event("u-3"), 0) is None


async def test_commit_request_records_are_shared(replicas: Callable[..., RedisFactStore]) -> None:
    a, b = replicas(), replicas()
    await a.start()
    await b.start()
    await RecordedRequestAuthors(a).record("ns", "save", "cr-1", ALICE)
    assert await RecordedRequestAuthors(b, grace=5).author_of_request("ns", "save", "cr-1") == (
        ALICE
    )


async def test_streams_are_bounded(
    replicas: Callable[..., RedisFactStore], redis_server: RedisServer
) -> None:
    store = replicas(max_stream_length=100)
    await store.start()
    for batch in range(10):
        await store.add("local", keyed([write(f"u-{batch}-{i}") for i in range(100)]))
    client = aioredis.Redis.from_url(redis_server.url)
    try:
        length = await client.xlen(store.prefix + "local")
    finally:
        await client.aclose()
    assert 100 <= length < 1000


async def test_redis_down_costs_sharing_not_facts() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    dead = RedisFactStore(RedisOptions(url, DEV_HMAC_KEY.encode()), block=0.2)
    errors = metrics.REGISTRY.get_sample_value("kubescribe_fact_store_errors_total", {"op": "add"})
    await dead.start()
    try:
        await dead.add("local", keyed([write("u-9")]))
        resolver = AuditAuthorResolver(dead, "local", grace=0)
        assert await resolver.author_of(event("u-9"), time.monotonic()) == ALICE
    finally:
        await dead.close()
    after = metrics.REGISTRY.get_sample_value("kubescribe_fact_store_errors_total", {"op": "add"})
    assert after == (errors or 0) + 1


async def test_a_route_s_watermark_told_to_one_replica_ends_a_wait_on_another(
    replicas: Callable[..., RedisFactStore],
) -> None:
    a, b = replicas(), replicas()
    await a.start()
    await b.start()
    # A delete observed 5 s ago whose fact never comes; the grace is far longer than the test.
    resolver = AuditAuthorResolver(b, "local", grace=600, routes=RouteWatch(b))
    gone = ObjectEvent("u-9", "2", "", "configmaps", "ns", "u-9", "DELETE")
    lookup = asyncio.create_task(resolver.author_of(gone, time.monotonic() - 5))
    await a.add("local", keyed([write("u-other")], latest=time.time()))
    assert await asyncio.wait_for(lookup, 60) is None
    facts, last, told = b.tally("local")
    assert facts == 1
    assert 0 < told <= last
