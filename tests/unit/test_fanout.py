"""One shared stream feeds many targets: each gets its own namespace's objects and snapshot, a
late target joins by one list, and the shared cursor never passes a change a writer holds."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kubescribe.controller.cursors import SharedJournal
from kubescribe.controller.fanout import FanOut
from kubescribe.controller.streams import Initial, StreamSpec, TargetStream
from kubescribe.kube.informer import ObjectKey
from kubescribe.mirror.changes import Change, Cursor, Operation, Snapshot, TargetKey
from kubescribe.mirror.identity import ResourceType
from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY

CM = ResourceType("", "v1", "configmaps", "ConfigMap", True)
SHARED = "shared|core/v1/configmaps"


def cm(ns: str, name: str, rv: str = "7") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv},
        "data": {"a": "1"},
    }


def stream(ns: str, out: list[Change | Snapshot]) -> TargetStream:
    spec = StreamSpec(TargetKey(ns, "mirror"), CM, ns, (None,), frozenset(Operation))
    return TargetStream(spec, DEFAULT_NOISE_POLICY, out.append, lambda: 1.0, cursor_key=SHARED)


def names(item: Change | Snapshot) -> set[str]:
    if isinstance(item, Snapshot):
        return {identity.name for identity in item.documents}
    return {item.identity.name}


async def gather(fanout: FanOut, objects: list[dict[str, Any]], rv: str) -> None:
    """A whole initial state through the fan-out, as the informer delivers it."""
    fanout.on_listing()
    prepared = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objects}
    await fanout.on_snapshot({k: fanout.prepare(o) for k, o in prepared.items()}, set(), rv)


async def no_list(_: TargetStream) -> tuple[Mapping[ObjectKey, Initial], str]:
    raise AssertionError("no target joins late here")


async def test_each_target_gets_only_its_namespace_of_the_shared_state_and_events() -> None:
    a_out: list[Change | Snapshot] = []
    b_out: list[Change | Snapshot] = []
    fanout = FanOut(SHARED, no_list)
    fanout.add(stream("a", a_out))
    fanout.add(stream("b", b_out))
    await gather(fanout, [cm("a", "one"), cm("b", "two"), cm("c", "other")], "10")
    ((a_snap,), (b_snap,)) = a_out, b_out
    assert isinstance(a_snap, Snapshot)
    assert a_snap.namespace == "a"
    assert (names(a_snap), names(b_snap)) == ({"one"}, {"two"})
    assert a_snap.cursor == Cursor(SHARED, "10")

    await fanout.on_event("ADDED", cm("b", "three", "11"), "11")
    await fanout.on_event("ADDED", cm("c", "nobody", "12"), "12")
    assert len(a_out) == 1
    assert names(b_out[-1]) == {"three"}


async def test_a_relisted_gap_deletes_only_in_each_targets_namespace() -> None:
    a_out: list[Change | Snapshot] = []
    fanout = FanOut(SHARED, no_list)
    fanout.add(stream("a", a_out))
    fanout.on_listing()
    await fanout.on_snapshot({}, {("a", "gone"), ("b", "elsewhere")}, "20")
    (snap,) = a_out
    assert isinstance(snap, Snapshot)
    assert {i.name for i in snap.deleted} == {"gone"}


async def test_a_late_target_lists_once_and_gets_only_what_is_newer_than_its_list() -> None:
    listed = asyncio.Event()
    release = asyncio.Event()

    async def list_b(s: TargetStream) -> tuple[Mapping[ObjectKey, Initial], str]:
        listed.set()
        await release.wait()
        return {("b", "old"): s.prepare(cm("b", "old", "12"))}, "13"

    journal = SharedJournal(SHARED, "fp")
    acked: list[list[Cursor]] = []
    fanout = FanOut(SHARED, list_b, journal=journal, acked=acked.append)
    a_out: list[Change | Snapshot] = []
    b_out: list[Change | Snapshot] = []
    fanout.add(stream("a", a_out))
    await gather(fanout, [cm("a", "one")], "10")
    sub = fanout.add(stream("b", b_out))
    joining = sub.task
    assert joining is not None
    await listed.wait()
    # While it lists: one event its list already holds, one that came after.
    await fanout.on_event("MODIFIED", cm("b", "old", "12"), "12")
    await fanout.on_event("ADDED", cm("b", "new", "14"), "14")
    assert b_out == []
    release.set()
    await joining
    snap, change = b_out
    assert isinstance(snap, Snapshot)
    assert names(snap) == {"old"}
    assert isinstance(change, Change)
    assert change.identity.name == "new"
    assert acked == [[Cursor(SHARED, "10")]]  # the hold at the stream's place is released


async def test_a_new_initial_state_overtakes_a_join_under_way() -> None:
    release = asyncio.Event()

    async def slow(s: TargetStream) -> tuple[Mapping[ObjectKey, Initial], str]:
        await release.wait()
        return {("b", "stale"): s.prepare(cm("b", "stale"))}, "11"

    fanout = FanOut(SHARED, slow)
    a_out: list[Change | Snapshot] = []
    b_out: list[Change | Snapshot] = []
    fanout.add(stream("a", a_out))
    await gather(fanout, [], "10")
    joining = fanout.add(stream("b", b_out)).task
    assert joining is not None
    await asyncio.sleep(0)  # the join is under way
    await gather(fanout, [cm("b", "fresh")], "30")  # a 410 Gone: listed again
    release.set()
    await asyncio.gather(joining, return_exceptions=True)
    (snap,) = b_out
    assert names(snap) == {"fresh"}


async def test_a_target_that_left_gets_nothing() -> None:
    out: list[Change | Snapshot] = []
    fanout = FanOut(SHARED, no_list)
    fanout.add(stream("a", out))
    await gather(fanout, [], "10")
    fanout.remove(stream("a", []).spec.key)
    await fanout.on_event("ADDED", cm("a", "late", "11"), "11")
    assert len(out) == 1


def test_the_shared_cursor_waits_for_the_slowest_writer() -> None:
    journal = SharedJournal(SHARED, "fp")
    journal.snapshot("10", [], count=2)  # two targets' snapshots
    journal.event("11", ("a", "x"), True, submitted=1)  # writer A
    journal.event("12", ("b", "y"), True, submitted=1)  # writer B
    journal.event("13", ("c", "noise"), True, submitted=0)
    assert journal.acknowledge(["10"]) is None  # one snapshot still unpushed
    save = journal.acknowledge(["10", "12"])  # B pushed first
    assert save is not None
    assert (save.resource_version, save.replace) == ("10", True)
    assert journal.acknowledge([]) is None  # 11 still held by A: nothing past it
    later = journal.acknowledge(["11"])
    assert later is not None
    assert later.resource_version == "13"
    assert later.added == {("a", "x"), ("b", "y"), ("c", "noise")}
    assert journal.settled
