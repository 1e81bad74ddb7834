"""Route health and the watermark (no sockets): a lookup stops waiting out the grace once its
route is silent or has told what came after the change, a fact present still names the author,
and no record read from a route (a hostile mark) can raise or claim a time past now."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import cast

import pytest

from kubescribe.api.models import ClusterProviderSpec
from kubescribe.attribution.decode import FACT_DELETE, Fact, decode_events
from kubescribe.attribution.facts import keyed
from kubescribe.attribution.health import (
    SETTLED_SILENT,
    SETTLED_WATERMARK,
    RouteReports,
    RouteWatch,
    attribution_status,
)
from kubescribe.attribution.resolver import AuditAuthorResolver
from kubescribe.controller.clusters import ClusterProviders
from kubescribe.controller.plan import ClusterPlan, Problem, ProviderPlan
from kubescribe.controller.providers import Providers
from kubescribe.kube.client import KubeClient
from kubescribe.mirror.authors import Author, ObjectEvent
from kubescribe.store.memory import MemoryFactStore

ALICE = Author("alice", "alice@users.kubescribe.invalid")
HOUR = 3600.0  # a grace no test outlives: were the lookup to wait it out, the guard fails


def delete(uid: str = "u-1") -> ObjectEvent:
    return ObjectEvent(uid, "11", "", "configmaps", "ns", "cm", "DELETE")


def mark(at: float) -> list[tuple[tuple[str, ...], dict[str, str]]]:
    return [((), {"kind": "mark", "completed": repr(at)})]


async def test_a_mark_that_arrives_while_a_lookup_waits_ends_the_wait_with_no_author() -> None:
    store = MemoryFactStore()
    resolver = AuditAuthorResolver(store, "local", grace=HOUR, routes=RouteWatch(store))
    observed = time.monotonic() - 5  # observed 5 s ago: a batch of now tells what came after
    lookup = asyncio.create_task(resolver.author_of(delete(), observed))
    await asyncio.sleep(0)  # the lookup runs up to its wait on the route
    assert not lookup.done()  # no record yet: the route may still tell
    await store.add("local", mark(time.time()))
    async with asyncio.timeout(10):
        assert await lookup is None


async def test_past_the_watermark_a_lookup_settles_at_once_and_a_fact_still_names_its_author() -> (
    None
):
    store = MemoryFactStore()
    watch = RouteWatch(store, margin=0.0)
    resolver = AuditAuthorResolver(store, "local", grace=HOUR, routes=watch)
    observed = time.monotonic()
    now = time.time()
    await store.add("local", mark(now))
    assert watch.settled("local", now - 1) == SETTLED_WATERMARK
    async with asyncio.timeout(10):
        assert await resolver.author_of(delete(), observed - 1) is None
    gone = Fact(
        kind=FACT_DELETE, verb="delete", author=ALICE, username="alice", group="",
        resource="configmaps", namespace="ns", name="cm", uid="u-2", received=now, completed=now,
    )  # fmt: skip
    await store.add("local", keyed([gone]))
    async with asyncio.timeout(10):
        found = await resolver.author_of(delete("u-2"), observed - 1)
    assert found is not None
    assert (found.name, found.email) == (ALICE.name, ALICE.email)


async def test_a_silent_route_settles_and_a_route_that_speaks_does_not() -> None:
    store = MemoryFactStore()
    clock = [1000.0]
    watch = RouteWatch(store, silent_after=30, wall=lambda: clock[0])
    assert watch.settled("local", 1000.0) is None  # just started: not silent yet
    clock[0] += 31
    assert watch.settled("local", 1000.0) == SETTLED_SILENT
    assert watch.health("local").silent
    resolver = AuditAuthorResolver(store, "local", grace=HOUR, routes=watch)
    async with asyncio.timeout(10):
        assert await resolver.author_of(delete(), time.monotonic()) is None
    off = RouteWatch(store, silent_after=0, wall=lambda: clock[0] + HOUR)
    assert off.settled("local", 0.0) is None  # 0: never silent


@pytest.mark.parametrize(
    "completed", ["nan", "inf", "-inf", "1e400", "-5", "garbage", "", "0x10", "1" * 5000]
)
async def test_a_hostile_mark_never_raises_nor_claims_a_time_past_now(completed: str) -> None:
    store = MemoryFactStore()
    before = time.time()
    await store.add("local", [((), {"kind": "mark", "completed": completed})])
    facts, last, told = store.tally("local")
    assert facts == 0
    assert last >= before
    assert 0.0 <= told <= time.time()
    attribution_status([RouteWatch(store).health("local")])  # renders


def test_an_audit_batch_marks_its_latest_completed_event_also_when_nothing_became_a_fact() -> None:
    events = [
        {"stage": "ResponseComplete", "verb": "get", "stageTimestamp": "2026-01-01T00:00:05Z"},
        {"stage": "ResponseStarted", "verb": "watch", "stageTimestamp": "2026-01-01T00:09:00Z"},
        {"stage": "ResponseComplete", "verb": "list", "stageTimestamp": "not a time"},
        "not an event",
    ]
    decoded = decode_events({"kind": "EventList", "items": events})
    assert decoded.facts == []
    assert decoded.latest == 1767225605.0
    assert keyed(decoded.facts, decoded.latest) == [
        ((), {"kind": "mark", "completed": "1767225605.0"})
    ]


def test_the_status_names_each_route_and_is_refreshed_at_most_once_a_period() -> None:
    store = MemoryFactStore()
    store.index("local", mark(time.time()))
    ticks = [0.0]
    reports = RouteReports(RouteWatch(store), ("local", "@admission"), clock=lambda: ticks[0])
    first = reports.status()
    assert [(r["name"], r["source"], r["silent"]) for r in first["routes"]] == [
        ("local", "audit", False),
        ("@admission", "admission", False),
    ]
    assert "lastFactTime" in first
    assert "lastFactTime" not in first["routes"][1]
    store.index("@admission", [(("k",), {"kind": "write", "completed": "1"})])
    assert reports.status() == first  # within the period: the same status, no rewrite
    ticks[0] += 61
    assert reports.status()["routes"][1]["facts"] == 1


def test_a_route_falling_silent_shows_at_once_within_the_period() -> None:
    store = MemoryFactStore()
    wall = [1000.0]
    reports = RouteReports(RouteWatch(store, silent_after=30, wall=lambda: wall[0]), ("local",))
    assert reports.status()["routes"][0]["silent"] is False
    wall[0] += 31
    assert reports.status()["routes"][0]["silent"] is True


async def test_a_lookup_that_waits_while_its_route_falls_silent_stops_then() -> None:
    store = MemoryFactStore()
    watch = RouteWatch(store, silent_after=0.2)  # no record ever comes to wake the wait
    resolver = AuditAuthorResolver(store, "local", grace=HOUR, routes=watch)
    async with asyncio.timeout(10):
        assert await resolver.author_of(delete(), time.monotonic()) is None
    assert watch.health("local").silent


def test_a_cluster_provider_shows_its_audit_route_and_a_git_provider_the_own_routes() -> None:
    store = MemoryFactStore()
    store.index("remote", mark(time.time()))
    reports = RouteReports(RouteWatch(store), ("local",))
    clusters = ClusterProviders(cast(KubeClient, None), routes=reports)
    spec = ClusterProviderSpec.model_validate(
        {"kubeconfigSecretRef": {"namespace": "ns", "name": "k"}, "auditRoute": "remote"}
    )
    _, extra = clusters.status(ClusterPlan("remote-cluster", 1, spec))
    [route] = extra["attribution"]["routes"]
    assert (route["name"], route["facts"], route["silent"]) == ("remote", 0, False)
    assert route["watermark"]
    without = ClusterProviderSpec.model_validate(
        {"kubeconfigSecretRef": {"namespace": "ns", "name": "k"}}
    )
    assert "attribution" not in clusters.status(ClusterPlan("other", 1, without))[1]
    providers = Providers(cast(KubeClient, None), cache_dir=Path("unused"), routes=reports)
    plan = ProviderPlan(("ns", "git"), 1, None, problem=Problem("InvalidSpec", "bad"))
    assert [r["name"] for r in providers.status(plan)[1]["attribution"]["routes"]] == ["local"]
