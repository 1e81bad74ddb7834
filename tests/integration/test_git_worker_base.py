"""The base branch observed by the writer when it fetches: no extra connection left open (a
later fetch must see the remote as it is), and what the report says of it."""

from __future__ import annotations

from collections.abc import Callable

from kubescribe import metrics
from kubescribe_devenv.gitremote import BareRemote, git
from tests.builders import target, upsert
from tests.support import WorkerHarness


def rejected() -> float:
    return float(metrics.PUSHES.labels("rejected")._value.get())


async def test_a_moved_remote_costs_one_rebuild_with_the_default_branch_observed(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    fetched = remote.tip()
    h = make(target())  # no baseBranch: the remote's default branch, main itself here
    await h.settle(upsert("a"))
    seen = h.last().base
    assert seen is not None
    assert (seen.name, seen.commit, seen.descends) == ("main", fetched, True)

    foreign = remote.commit_foreign("elsewhere.txt", "x\n", "Someone else")
    before = rejected()
    await h.settle(upsert("b"))
    assert rejected() - before == 1  # the fetch after it saw the foreign commit at once
    seen = h.last().base
    assert seen is not None
    assert (seen.name, seen.commit) == ("main", foreign)


async def test_a_base_branch_that_moves_on_is_no_longer_an_ancestor(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    base = remote.tip()
    assert base is not None
    git("update-ref", "refs/heads/mirror", base, cwd=remote.path)
    remote.commit_foreign("README.md", "hi\n", "Start the write branch", branch="mirror")
    h = make(target(base_branch="main"), branch="mirror")
    await h.settle(upsert("a"))
    seen = h.last().base
    assert seen is not None
    assert (seen.name, seen.commit, seen.descends) == ("main", base, True)

    moved = remote.commit_foreign("work.txt", "w\n", "Work on main")
    h.worker.refetch()
    await h.settle(upsert("b"))
    seen = h.last().base
    assert seen is not None
    assert (seen.name, seen.commit, seen.descends) == ("main", moved, False)
