"""Resolver tiers over the in-memory fact index (no sockets)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from kubescribe import metrics
from kubescribe.attribution.decode import (
    FACT_COLLECTION,
    FACT_DELETE,
    FACT_NAMED,
    FACT_WRITE,
    Fact,
)
from kubescribe.attribution.facts import keyed
from kubescribe.attribution.requests import RecordedRequestAuthors
from kubescribe.attribution.resolver import AuditAuthorResolver
from kubescribe.mirror.authors import UNRESOLVED, Author, ObjectEvent
from kubescribe.store.memory import MemoryFactStore

ALICE = Author("alice", "alice@users.kubescribe.invalid")
BOB = Author("bob", "bob@users.kubescribe.invalid")
ADMIN = Author("admin", "admin@users.kubescribe.invalid")


def fact(kind: str, author: Author, **kw: object) -> Fact:
    now = time.time()
    base: dict[str, object] = {
        "kind": kind,
        "verb": {
            "write": "patch",
            "delete": "delete",
            "collection": "deletecollection",
            "named": "patch",
        }[kind],
        "author": author,
        "username": author.name,
        "group": "",
        "resource": "configmaps",
        "namespace": "ns",
        "name": "cm",
        "received": now - 0.1,
        "completed": now,
    }
    base.update(kw)
    return Fact(**base)  # type: ignore[arg-type]


def change(op: str = "UPDATE", uid: str = "u-1", rv: str = "10", name: str = "cm") -> ObjectEvent:
    return ObjectEvent(uid, rv, "", "configmaps", "ns", name, op)


def outcome(name: str) -> float:
    return (
        metrics.REGISTRY.get_sample_value("kubescribe_attribution_total", {"outcome": name}) or 0.0
    )


async def test_exact_join_by_uid_and_resource_version_a_later_no_op_does_not_count() -> None:
    store = MemoryFactStore()
    now = time.time()
    alice = fact(FACT_WRITE, ALICE, uid="u-1", resource_version="10", completed=now - 1)
    # A no-op write received after alice's write completed returns the same version: it
    # cannot have produced it (in whatever order the facts arrive).
    no_op = fact(FACT_WRITE, BOB, uid="u-1", resource_version="10", received=now - 0.5)
    await store.add("local", keyed([no_op]))
    await store.add("local", keyed([alice]))
    resolver = AuditAuthorResolver(store, "local", grace=0)
    before = outcome("exact")
    assert await resolver.author_of(change(), time.monotonic()) == ALICE
    assert outcome("exact") == before + 1


async def test_overlapping_writes_of_one_version_by_different_authors_are_ambiguous() -> None:
    store = MemoryFactStore()
    now = time.time()
    first = fact(FACT_WRITE, ALICE, uid="u-1", resource_version="10", completed=now - 1)
    # Received before alice's write completed: nothing proves which one wrote version 10.
    rival = fact(FACT_WRITE, BOB, uid="u-1", resource_version="10", received=now - 1.5)
    same = fact(FACT_WRITE, ALICE, uid="u-2", resource_version="3", received=now - 1.5)
    await store.add("local", keyed([first, rival, same, replace(same, completed=now - 2)]))
    # An hour's grace: were ambiguity to wait for it, the test's timeout would end the test.
    resolver = AuditAuthorResolver(store, "local", grace=3600)
    before = outcome("ambiguous")
    started = time.monotonic()
    # Contradicting facts answer the sentinel itself (not None: nothing may guess instead).
    assert await resolver.author_of(change(), started) == UNRESOLVED
    assert outcome("ambiguous") == before + 1
    # Facts that name the same author agree.
    assert await resolver.author_of(change(uid="u-2", rv="3"), started) == ALICE


async def test_the_answer_carries_the_username_and_two_users_behind_one_name_are_ambiguous() -> (
    None
):
    store = MemoryFactStore()
    now = time.time()
    ops = Author("Ops", "ops@example.org")
    one = fact(FACT_WRITE, ops, username="ops-1", uid="u-1", resource_version="10")
    await store.add("local", keyed([one]))
    resolver = AuditAuthorResolver(store, "local", grace=0)
    answer = await resolver.author_of(change(), time.monotonic())
    assert answer == ops
    assert answer is not None
    assert answer.user == "ops-1"  # spec.ignore.changesBy matches on it
    # Another user with the same display name and email overlapping for that version.
    two = fact(FACT_WRITE, ops, username="ops-2", uid="u-1", resource_version="10")
    two = replace(two, received=now - 5)
    await store.add("local", keyed([two]))
    assert await resolver.author_of(change(), time.monotonic()) is UNRESOLVED


async def test_routes_are_isolated() -> None:
    store = MemoryFactStore()
    await store.add("other", keyed([fact(FACT_WRITE, BOB, uid="u-1", resource_version="10")]))
    resolver = AuditAuthorResolver(store, "local", grace=0)
    assert await resolver.author_of(change(), time.monotonic()) is None


async def test_unresolved_after_the_grace_counted_from_observation() -> None:
    store = MemoryFactStore()
    # An hour's grace of which all but 50 ms was used up before the lookup: counted from the
    # lookup instead, the wait would outlast the test's timeout.
    resolver = AuditAuthorResolver(store, "local", grace=3600)
    before = outcome("unresolved")
    observed = time.monotonic() - 3600 + 0.05
    assert await resolver.author_of(change(), observed) is None
    assert outcome("unresolved") == before + 1


async def test_a_fact_arriving_within_the_grace_resolves_the_waiting_lookup() -> None:
    store = MemoryFactStore()
    resolver = AuditAuthorResolver(store, "local", grace=5)
    lookup = asyncio.create_task(resolver.author_of(change(), time.monotonic()))
    await asyncio.sleep(0)  # the lookup is now waiting on the route
    assert not lookup.done()
    await store.add("local", keyed([fact(FACT_WRITE, BOB, uid="u-9", resource_version="1")]))
    await asyncio.sleep(0)
    assert not lookup.done()  # an unrelated fact wakes it, but does not resolve it
    await store.add("local", keyed([fact(FACT_WRITE, ALICE, uid="u-1", resource_version="10")]))
    assert await asyncio.wait_for(lookup, 1) == ALICE


async def test_finalizer_held_delete_is_authored_by_who_asked_for_the_delete() -> None:
    store = MemoryFactStore()
    await store.add(
        "local",
        keyed(
            [
                fact(FACT_DELETE, ALICE, uid="u-1", resource_version="17"),
                # The admin removes the finalizer; the final DELETED event has version 18.
                fact(FACT_WRITE, ADMIN, uid="u-1", resource_version="18"),
            ]
        ),
    )
    resolver = AuditAuthorResolver(store, "local", grace=0)
    before = outcome("delete")
    assert await resolver.author_of(change("DELETE", rv="18"), time.monotonic()) == ALICE
    assert outcome("delete") == before + 1
    # The MODIFIED event that set deletionTimestamp joins the delete by its version too.
    assert await resolver.author_of(change("UPDATE", rv="17"), time.monotonic()) == ALICE


async def test_deletecollection_window_attributes_deletes_without_per_object_facts() -> None:
    store = MemoryFactStore()
    await store.add("local", keyed([fact(FACT_COLLECTION, BOB, name="", namespace="ns")]))
    resolver = AuditAuthorResolver(store, "local", grace=0)
    before = outcome("collection")
    assert await resolver.author_of(change("DELETE", uid="u-5"), time.monotonic()) == BOB
    assert outcome("collection") == before + 1
    # Another namespace, or a delete observed long after the request, is not covered.
    other = ObjectEvent("u-6", "3", "", "configmaps", "elsewhere", "x", "DELETE")
    assert await resolver.author_of(other, time.monotonic()) is None
    assert await resolver.author_of(change("DELETE", uid="u-7"), time.monotonic() - 60) is None
    # Updates are never attributed by a collection window.
    assert await resolver.author_of(change("UPDATE", uid="u-5"), time.monotonic()) is None


async def test_per_object_collection_facts_count_as_collection() -> None:
    store = MemoryFactStore()
    listed = fact(FACT_DELETE, BOB, uid="u-3", verb="deletecollection")
    await store.add("local", keyed([listed]))
    resolver = AuditAuthorResolver(store, "local", grace=0)
    before = outcome("collection")
    observed = time.monotonic() - 3600  # held by a finalizer for an hour: uid still joins
    assert await resolver.author_of(change("DELETE", uid="u-3"), observed) == BOB
    assert outcome("collection") == before + 1


async def test_memory_index_is_bounded_and_counts_evictions() -> None:
    store = MemoryFactStore(max_records=3)
    labels = {"source": "local", "reason": "capacity"}
    evicted = metrics.REGISTRY.get_sample_value(
        "kubescribe_attribution_facts_evicted_total", labels
    )
    facts = [fact(FACT_WRITE, ALICE, uid=f"u-{i}", resource_version="1") for i in range(5)]
    await store.add("local", keyed(facts))
    assert len(store) == 3
    assert not store.find("local", "rv/u-0/1")
    assert store.find("local", "rv/u-4/1")
    after = metrics.REGISTRY.get_sample_value("kubescribe_attribution_facts_evicted_total", labels)
    assert after == (evicted or 0) + 2
    assert (
        metrics.REGISTRY.get_sample_value("kubescribe_attribution_facts", {"source": "local"}) == 3
    )


async def test_each_fact_source_has_its_own_bound() -> None:
    store = MemoryFactStore(max_records=3, limits={"@commitrequests": 2})
    authors = RecordedRequestAuthors(store, grace=0)
    await authors.record("ns", "save", "cr-1", ALICE)
    await store.add("other", keyed([fact(FACT_WRITE, BOB, uid="o-1", resource_version="1")]))
    flood = [fact(FACT_WRITE, ADMIN, uid=f"u-{i}", resource_version="1") for i in range(50)]
    await store.add("local", keyed(flood))
    assert store.count("local") == 3
    assert await authors.author_of_request("ns", "save", "cr-1") == ALICE
    assert store.find("other", "rv/o-1/1")
    for i in range(2, 6):
        await authors.record("ns", f"save-{i}", f"cr-{i}", BOB)
    assert store.count("@commitrequests") == 2
    assert store.count("local") == 3
    assert store.count("other") == 1


async def test_memory_index_expires_old_records() -> None:
    now = [1000.0]
    store = MemoryFactStore(retention=60, clock=lambda: now[0])
    await store.add("local", keyed([fact(FACT_WRITE, ALICE, uid="old", resource_version="1")]))
    now[0] += 61
    await store.add("local", keyed([fact(FACT_WRITE, ALICE, uid="new", resource_version="1")]))
    assert not store.find("local", "rv/old/1")
    assert store.find("local", "rv/new/1")


async def test_commit_request_authors_conflicting_records_name_nobody() -> None:
    authors = RecordedRequestAuthors(MemoryFactStore(), grace=0)
    await authors.record("ns", "save", "cr-1", ALICE)
    await authors.record("ns", "save", "cr-1", ALICE)  # a replayed review agrees
    assert await authors.author_of_request("ns", "save", "cr-1") == ALICE
    await authors.record("ns", "save", "cr-1", BOB)  # one uid, two requesters: neither is proven
    assert await authors.author_of_request("ns", "save", "cr-1") is None
    assert await authors.author_of_request("ns", "save", "") == BOB  # by name: the latest
    assert await authors.author_of_request("ns", "save", "cr-other") is None
    assert await authors.author_of_request("ns", "missing", "") is None


async def test_a_request_record_keeps_the_username_and_groups_for_access_reviews() -> None:
    authors = RecordedRequestAuthors(MemoryFactStore(), grace=0)
    ci = Author("CI bot", "ci@example.org", user="system:serviceaccount:ci:deployer")
    await authors.record("ns", "save", "cr-1", ci, ("system:serviceaccounts", "deployers"))
    found = await authors.author_of_request("ns", "save", "cr-1")
    assert found == ci
    assert found is not None
    assert found.user == "system:serviceaccount:ci:deployer"
    assert await authors.groups_of_request("ns", "save", "cr-1") == (
        "system:serviceaccounts",
        "deployers",
    )
    assert await authors.groups_of_request("ns", "other", "cr-9") == ()
    await authors.record("ns", "save", "cr-1", BOB)  # contradicting records: no groups either
    assert await authors.groups_of_request("ns", "save", "cr-1") == ()


WIDGETS = {"group": "demo.kubescribe.test", "resource": "widgets"}


def widget(op: str, name: str = "w1") -> ObjectEvent:
    return ObjectEvent("u-9", "7", "demo.kubescribe.test", "widgets", "ns", name, op)


async def test_writes_to_an_aggregated_api_join_by_name_and_creates_by_collection() -> None:
    store = MemoryFactStore()
    create = fact(FACT_NAMED, ALICE, verb="create", name="", **WIDGETS)
    update = fact(FACT_NAMED, ALICE, verb="update", name="w1", **WIDGETS)
    await store.add("local", keyed([create, update]))
    resolver = AuditAuthorResolver(store, "local", grace=0)
    before = outcome("named")
    assert await resolver.author_of(widget("CREATE"), time.monotonic()) == ALICE
    assert await resolver.author_of(widget("UPDATE"), time.monotonic()) == ALICE
    assert outcome("named") == before + 2
    # Another object's update, another namespace's create, a delete: no named fact is theirs.
    assert await resolver.author_of(widget("UPDATE", "w2"), time.monotonic()) is None
    other_ns = ObjectEvent("u-8", "3", "demo.kubescribe.test", "widgets", "ns2", "w1", "CREATE")
    assert await resolver.author_of(other_ns, time.monotonic()) is None
    assert await resolver.author_of(widget("DELETE"), time.monotonic()) is None


async def test_concurrent_creates_by_two_users_name_nobody() -> None:
    store = MemoryFactStore()
    await store.add(
        "local",
        keyed([fact(FACT_NAMED, user, verb="create", name="", **WIDGETS) for user in (ALICE, BOB)]),
    )
    resolver = AuditAuthorResolver(store, "local", grace=0)
    before = outcome("ambiguous")
    assert await resolver.author_of(widget("CREATE"), time.monotonic()) == UNRESOLVED
    assert outcome("ambiguous") == before + 1
    # Two creates by one user agree.
    same = MemoryFactStore()
    await same.add(
        "local",
        keyed([fact(FACT_NAMED, ALICE, verb="create", name="", **WIDGETS) for _ in range(2)]),
    )
    assert (
        await AuditAuthorResolver(same, "local", grace=0).author_of(
            widget("CREATE"), time.monotonic()
        )
        == ALICE
    )


async def test_a_named_fact_outside_the_window_or_against_an_exact_fact_does_not_count() -> None:
    store = MemoryFactStore()
    now = time.time()
    stale = fact(FACT_NAMED, BOB, verb="update", received=now - 10, completed=now - 9.9, **WIDGETS)
    later = fact(FACT_NAMED, BOB, verb="update", received=now + 5, completed=now + 5.1, **WIDGETS)
    await store.add("local", keyed([replace(stale, name="w1"), replace(later, name="w1")]))
    resolver = AuditAuthorResolver(store, "local", grace=0)
    assert await resolver.author_of(widget("UPDATE"), time.monotonic()) is None
    # An exact fact (a response was recorded) wins over any named one.
    named = fact(FACT_NAMED, BOB, verb="update", name="w1", **WIDGETS)
    exact = fact(FACT_WRITE, ALICE, uid="u-9", resource_version="7", name="w1", **WIDGETS)
    await store.add("local", keyed([named, exact]))
    assert await resolver.author_of(widget("UPDATE"), time.monotonic()) == ALICE


async def test_a_named_fact_waits_for_the_grace_an_exact_fact_may_still_come() -> None:
    store = MemoryFactStore()
    await store.add("local", keyed([fact(FACT_NAMED, BOB, verb="update", name="w1", **WIDGETS)]))
    resolver = AuditAuthorResolver(store, "local", grace=3600)
    lookup = asyncio.ensure_future(resolver.author_of(widget("UPDATE"), time.monotonic()))
    await asyncio.sleep(0)
    exact = fact(FACT_WRITE, ALICE, uid="u-9", resource_version="7", name="w1", **WIDGETS)
    await store.add("local", keyed([exact]))
    assert await lookup == ALICE
