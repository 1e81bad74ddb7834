"""A branch worker's metrics and notices, against a real bare remote: per-target series exist
while the worker writes the target and are removed when it stops writing it (reconfigured,
stopped), never taken from a newer worker of the same target; the age of the oldest pending
change; a rebuild on a foreign commit is a notice for the target's Events."""

from __future__ import annotations

from collections.abc import Callable

from kubescribe import metrics
from kubescribe.api import events as ev
from kubescribe.mirror.changes import TargetKey
from kubescribe.net.urls import normalize
from kubescribe_devenv.gitremote import BareRemote
from tests.builders import TARGET, target, upsert
from tests.support import WorkerHarness, until

OTHER = TargetKey("team", "other")


def series(key: TargetKey) -> dict[str, float]:
    """name -> value of every sample labelled with the target `key`."""
    return {
        sample.name: sample.value
        for family in metrics.REGISTRY.collect()
        for sample in family.samples
        if sample.labels.get("target") == str(key)
    }


def branch_series(remote: BareRemote) -> set[str]:
    label = f"{normalize(remote.url)}#main"
    return {
        sample.name
        for family in metrics.REGISTRY.collect()
        for sample in family.samples
        if sample.labels.get("branch") == label
    }


async def test_series_exist_while_the_worker_writes_the_target(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(target(), target(key=OTHER, folder="clusters/other"))
    await h.settle(upsert("a"), upsert("b"), upsert("c", target=OTHER))
    mine = series(TARGET)
    assert mine["kubescribe_target_documents"] == 2
    assert mine["kubescribe_target_refused_documents"] == 0
    assert mine["kubescribe_target_oldest_pending_change_seconds"] == 0
    assert mine["kubescribe_target_last_push_timestamp_seconds"] > 0
    assert series(OTHER)["kubescribe_target_documents"] == 1
    assert "kubescribe_queue_depth" in branch_series(remote)

    h.worker.configure([target()])  # OTHER is no longer written here
    assert series(OTHER) == {}
    assert series(TARGET)["kubescribe_target_documents"] == 2

    assert await h.worker.stop()
    assert series(TARGET) == {}
    assert branch_series(remote) == set()


async def test_a_stopping_worker_leaves_the_series_of_the_worker_that_took_its_target(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    old = make()
    await old.settle(upsert("a"))
    new = make(cache="cache-new")  # the same target, e.g. after a hand-back
    await new.settle(upsert("b"))
    assert await old.worker.stop()
    assert series(TARGET)["kubescribe_target_documents"] == 2
    assert await new.worker.stop()
    assert series(TARGET) == {}


async def test_the_oldest_pending_change_ages_until_it_is_pushed(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(start=False)  # nothing is written before start: the change waits
    change = upsert("a")
    h.worker.submit(change)
    await until(lambda: h.worker.pending_age(TARGET) > 0, "a pending change's age")
    assert series(TARGET)["kubescribe_target_oldest_pending_change_seconds"] > 0
    h.worker.start()
    await h.written(change)
    await until(lambda: h.worker.pending_age(TARGET) == 0, "nothing pending")


async def test_a_rebuild_on_a_foreign_commit_is_a_notice(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make()
    await h.settle(upsert("a"))
    assert h.last().notices == ()
    foreign = remote.commit_foreign("docs/README.md", "hello\n", "A human commit")
    await h.settle(upsert("b"))  # built on the tip it knew: rejected, rebuilt on `foreign`
    notices = {n.reason: n for n in h.last().notices}
    assert set(notices) == {ev.REBUILT}
    assert notices[ev.REBUILT].type == "Normal"
    assert foreign[:12] in notices[ev.REBUILT].message
    pushed = h.last().commit
    assert pushed is not None
    assert pushed[:12] in notices[ev.REBUILT].message
