"""Which replica writes which branch: rendezvous hashing and Lease liveness, no I/O."""

from __future__ import annotations

from collections import Counter

from kubescribe.controller.sharding import (
    LeaseObserver,
    LeaseRecord,
    lease_name,
    live_members,
    may_take,
    rendezvous_owner,
)


def record(name: str, holder: str, renew: str, duration: float = 10.0) -> LeaseRecord:
    return LeaseRecord(name, holder, renew, duration, "1")


def test_writers_spread_evenly_and_a_leaving_replica_moves_only_its_own() -> None:
    keys = [f"ns\nhttps://git.example/r{i}\nmain" for i in range(600)]
    three = {k: rendezvous_owner(k, ["r1", "r2", "r3"]) for k in keys}
    counts = Counter(three.values())
    assert set(counts) == {"r1", "r2", "r3"}
    assert min(counts.values()) > 150  # about 200 each
    two = {k: rendezvous_owner(k, ["r1", "r3"]) for k in keys}
    moved = [k for k in keys if three[k] != two[k]]
    assert moved
    assert all(three[k] == "r2" for k in moved)


def test_no_members_no_owner() -> None:
    assert rendezvous_owner("k", []) is None


def test_lease_names_are_dns_labels_and_stable() -> None:
    name = lease_name("kubescribe-writer", "team-a\nssh://git@h/org/repo\nrelease/v1")
    assert name == lease_name("kubescribe-writer", "team-a\nssh://git@h/org/repo\nrelease/v1")
    assert len(name) <= 63
    assert name.replace("-", "").isalnum()
    assert name.islower()


def test_a_lease_is_alive_while_it_changes_by_the_local_clock_not_its_timestamp() -> None:
    observer = LeaseObserver()
    lease = record("m1", "r1", "1999-01-01T00:00:00.000000Z")  # an old clock on its node
    observer.observe(lease, now=100.0)
    assert observer.alive(lease, now=105.0)
    assert not observer.alive(lease, now=110.5)  # unchanged for longer than its duration
    renewed = record("m1", "r1", "1999-01-01T00:00:08.000000Z")
    observer.observe(renewed, now=110.6)
    assert observer.alive(renewed, now=115.0)


def test_live_members_always_include_this_replica() -> None:
    observer = LeaseObserver()
    leases = [record("m1", "r1", "t1"), record("m2", "r2", "t1")]
    for lease in leases:
        observer.observe(lease, now=0.0)
    assert live_members(leases, observer, 5.0, me="r3") == {"r1", "r2", "r3"}
    assert live_members(leases, observer, 20.0, me="r3") == {"r3"}


def test_a_writer_lease_is_taken_only_when_free_ours_or_expired() -> None:
    observer = LeaseObserver()
    held = record("w", "r1", "t1")
    observer.observe(held, now=0.0)
    assert may_take(None, observer, 0.0, "r2")
    assert may_take(record("w", "", "t1"), observer, 0.0, "r2")  # released
    assert may_take(held, observer, 0.0, "r1")
    assert not may_take(held, observer, 5.0, "r2")
    assert may_take(held, observer, 10.5, "r2")
