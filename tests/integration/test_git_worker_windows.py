"""Commit windows, commit authors and CommitRequest handles in the branch worker, against a
real bare repository over file:// (read back with `git`)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from kubescribe import metrics
from kubescribe.api.conditions import NOTHING_TO_COMMIT, PUSHED, TARGET_NOT_WRITABLE, WORKER_STOPPED
from kubescribe.git.records import RequestOutcome
from kubescribe.git.targets import PlainRenderer, RefusedContent, TargetConfig
from kubescribe.git.worker import BranchWorker
from kubescribe.mirror.authors import UNRESOLVED, AttributionMode, Author, ObjectEvent
from kubescribe.mirror.changes import Change, Operation, PruneMode, TargetKey
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.ignore import IgnoreRule
from kubescribe.mirror.layout import Layout
from kubescribe.mirror.window import WindowPolicy
from kubescribe_devenv.gitremote import BareRemote, git
from tests.builders import (
    COMMITTER,
    FOLDER,
    TARGET,
    document,
    ident,
    path_of,
    read_doc,
    snapshot,
    upsert,
)
from tests.support import WorkerHarness, until

OTHER = TargetKey("team", "other")
ALICE = Author("alice", "alice@example.invalid")
BOB = Author("bob", "bob@example.invalid")
LONG = WindowPolicy(60.0)
ATTRIBUTED = AttributionMode.ATTRIBUTED


def config(
    key: TargetKey = TARGET,
    folder: str = FOLDER,
    window: WindowPolicy = LONG,
    renderer: Any = None,
    **kw: Any,
) -> TargetConfig:
    return TargetConfig(
        key, folder, Layout(), PruneMode.ALWAYS, renderer or PlainRenderer(), window=window, **kw
    )


def by(author: Author | None, change: Change) -> Change:
    return Change(
        change.target,
        change.operation,
        change.identity,
        change.rtype,
        change.document,
        change.observed_at,
        change.cursor,
        change.uid,
        author,
    )


def for_target(change: Change, target: TargetKey) -> Change:
    return Change(
        target,
        change.operation,
        change.identity,
        change.rtype,
        change.document,
        change.observed_at,
        change.cursor,
        change.uid,
    )


class Resolver:
    """An AuthorResolver whose answers the test releases one by one (by object name)."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.unresolved_streak = 0
        self.answers: dict[str, asyncio.Future[Author | None]] = {}

    def answer(self, name: str, author: Author | None) -> None:
        self._future(name).set_result(author)

    def _future(self, name: str) -> asyncio.Future[Author | None]:
        if name not in self.answers:
            self.answers[name] = asyncio.get_running_loop().create_future()
        return self.answers[name]

    async def author_of(self, event: ObjectEvent, observed_at: float) -> Author | None:
        self.asked.append(event.name)
        assert event.resource == "configmaps"
        assert event.operation in ("CREATE", "UPDATE", "DELETE")
        return await self._future(event.name)


@pytest.fixture
async def make(remote: BareRemote, tmp_path: Path) -> AsyncIterator[Callable[..., WorkerHarness]]:
    """Workers with a cache each, commit windows (`config()`) and optionally a resolver."""
    started: list[WorkerHarness] = []

    def factory(
        *targets: TargetConfig, resolver: Resolver | None = None, max_rebuilds: int = 5
    ) -> WorkerHarness:
        h = WorkerHarness(
            remote.url,
            tmp_path / f"cache{len(started)}",
            resolver=resolver,
            max_rebuilds=max_rebuilds,
        )
        h.worker.configure(list(targets) or [config()])
        h.worker.start()
        started.append(h)
        return h

    yield factory
    for h in started:
        await h.worker.stop(timeout=5)


def closed(reason: str) -> float:
    return float(metrics.WINDOWS_CLOSED.labels(reason)._value.get())


def subjects(remote: BareRemote, n: int) -> list[str]:
    return [c["message"].split("\n")[0] for c in remote.log()[:n]]


async def test_a_burst_in_the_window_is_one_commit_and_one_push(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config(window=WindowPolicy(0.3)))
    commits, silence = len(remote.log()), closed("silence")
    items = [upsert("a"), upsert("b"), upsert("c", k="1"), upsert("c", op=Operation.UPDATE, k="2")]
    for item in items:
        h.worker.submit(item)
    await h.written(*items)

    log = remote.log()
    assert len(log) == commits + 1
    assert len(h.acks) == 1  # one push
    assert log[0]["message"] == (
        "4 changes: 3 created, 1 updated (ConfigMap)\n\n"
        "CREATE ConfigMap ns1/a\nCREATE ConfigMap ns1/b\nCREATE ConfigMap ns1/c\n"
        "UPDATE ConfigMap ns1/c"
    )
    assert (log[0]["author"], log[0]["committer"]) == (COMMITTER.name, COMMITTER.name)
    assert closed("silence") == silence + 1
    assert h.reports[-1].commit == log[0]["sha"]

    later = upsert("d")
    h.worker.submit(later)
    await h.written(later)
    assert subjects(remote, 1) == ["CREATE ConfigMap ns1/d"]  # one change: its own message
    assert len(remote.log()) == commits + 2


async def test_an_open_window_holds_back_only_its_own_target(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config(), config(OTHER, "other", window=WindowPolicy(0)))
    shutdown = closed("shutdown")
    waiting, other = upsert("waiting"), for_target(upsert("quick"), OTHER)
    h.worker.submit(waiting)
    h.worker.submit(other)
    await h.written(other)

    assert path_of("quick", folder="other") in remote.files()
    assert path_of("waiting") not in remote.files()
    assert waiting.cursor not in h.acked  # not acknowledged while the window is open
    assert h.worker.pending == 1

    assert await h.worker.stop(timeout=10)
    assert path_of("waiting") in remote.files()
    assert waiting.cursor in h.acked
    assert closed("shutdown") == shutdown + 1


async def test_authors_split_windows_and_become_commit_authors(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config(attribution=ATTRIBUTED))
    author_closed = closed("author")
    items = [
        by(ALICE, upsert("a1")),
        by(ALICE, upsert("a2")),
        by(BOB, upsert("b1")),
        upsert("nobody"),  # attribution found no one (and no resolver): the sentinel
    ]
    for item in items:
        h.worker.submit(item)
    await h.worker.stop(timeout=10)

    log = remote.log()[:3]
    assert [(c["author"], c["author_email"]) for c in log] == [
        (UNRESOLVED.name, UNRESOLVED.email),
        (BOB.name, BOB.email),
        (ALICE.name, ALICE.email),
    ]
    assert {(c["committer"], c["committer_email"]) for c in log} == {
        (COMMITTER.name, COMMITTER.email)
    }
    assert [c["message"].split("\n")[0] for c in log] == [
        "CREATE ConfigMap ns1/nobody",
        "CREATE ConfigMap ns1/b1",
        "2 changes: 2 created (ConfigMap)",
    ]
    assert closed("author") == author_closed + 2


async def test_configured_author_ignores_actors(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config(window=WindowPolicy(0)))
    item = by(ALICE, upsert("a"))
    h.worker.submit(item)
    await h.written(item)
    commit = remote.log()[0]
    assert (commit["author"], commit["author_email"]) == (COMMITTER.name, COMMITTER.email)


async def test_authors_resolve_concurrently_in_order_per_target(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    resolver = Resolver()
    h = make(
        config(window=WindowPolicy(0), attribution=ATTRIBUTED),
        config(OTHER, "other", window=WindowPolicy(0), attribution=ATTRIBUTED),
        resolver=resolver,
    )
    slow, fast, elsewhere = upsert("slow"), upsert("fast"), for_target(upsert("else"), OTHER)
    for item in (slow, fast, elsewhere):
        h.worker.submit(item)
    await until(lambda: len(resolver.asked) == 3, "all three resolutions started")

    resolver.answer("else", BOB)
    resolver.answer("fast", ALICE)
    await h.written(elsewhere)  # another target never waits behind this one
    assert fast.cursor not in h.acked  # FIFO per target: behind the slow resolution

    resolver.answer("slow", None)
    await h.written(slow, fast)
    log = remote.log()
    assert [(c["message"], c["author"]) for c in log[:2]] == [
        ("CREATE ConfigMap ns1/fast", ALICE.name),
        ("CREATE ConfigMap ns1/slow", UNRESOLVED.name),
    ]


async def test_a_snapshot_closes_the_window_and_is_the_committers(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config(attribution=ATTRIBUTED))
    change = by(ALICE, upsert("a", k="old"))
    snap = snapshot({ident("a"): document("a", k="new"), ident("b"): document("b")})
    h.worker.submit(change)
    h.worker.submit(snap)
    await h.written(change, snap)

    log = remote.log()[:2]
    assert [c["message"].split(":")[0] for c in log] == [
        "Snapshot configmaps in ns1",
        "CREATE ConfigMap ns1/a",
    ]
    assert [c["author"] for c in log] == [COMMITTER.name, ALICE.name]
    assert "new" in remote.read(path_of("a"))


async def test_the_size_cap_splits_a_window(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config(window=WindowPolicy(60, max_changes=2)))
    items = [upsert(f"c{i}") for i in range(5)]
    for item in items:
        h.worker.submit(item)
    await h.written(*items[:4])  # two full windows were closed by size
    assert items[4].cursor not in h.acked
    await h.worker.stop(timeout=10)
    assert subjects(remote, 3) == [
        "CREATE ConfigMap ns1/c4",
        "2 changes: 2 created (ConfigMap)",
        "2 changes: 2 created (ConfigMap)",
    ]


async def test_setting_the_window_to_zero_closes_it(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config())
    items = [upsert("a"), upsert("b")]
    for item in items:
        h.worker.submit(item)
    await asyncio.sleep(0)
    assert h.worker.pending == 2
    h.worker.configure([config(window=WindowPolicy(0))])
    await h.written(*items)
    assert subjects(remote, 1) == ["2 changes: 2 created (ConfigMap)"]


async def test_request_closes_the_window_with_its_message(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make()
    items = [upsert("a"), upsert("b", ns="ns2")]
    handle = h.worker.hold(TARGET, None)
    for item in items:
        h.worker.submit(item)

    outcome = await asyncio.wait_for(h.worker.fire(handle, "Release 1.2\n"), 20)

    assert outcome.reason == PUSHED
    assert outcome.ok
    assert outcome.sha == remote.tip()
    assert (outcome.branch, outcome.changes) == ("main", 2)
    assert remote.log()[0]["message"] == (
        "Release 1.2\n\nCREATE ConfigMap ns1/a\nCREATE ConfigMap ns2/b"
    )
    assert {path_of("a"), path_of("b", ns="ns2")} <= set(remote.files())


async def test_request_with_nothing_open_has_nothing_to_commit(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make()
    handle = h.worker.hold(TARGET, None)
    outcome = await asyncio.wait_for(h.worker.fire(handle, "Nothing"), 5)
    assert outcome.reason == NOTHING_TO_COMMIT
    assert outcome.ok
    assert outcome.sha is None
    assert len(remote.log()) == 1


async def test_request_never_closes_another_authors_window(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config(attribution=ATTRIBUTED))
    h.worker.submit(by(BOB, upsert("bobs")))
    handle = h.worker.hold(TARGET, ALICE)

    outcome = await asyncio.wait_for(h.worker.fire(handle, "Alice's release"), 5)

    assert outcome.reason == NOTHING_TO_COMMIT
    assert "by alice" in outcome.message
    assert h.worker.pending == 1  # Bob's window is still open
    assert len(remote.log()) == 1


async def test_a_held_request_groups_changes_even_with_window_zero(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config(window=WindowPolicy(0)))
    handle = h.worker.hold(TARGET, None)
    items = [upsert("a"), upsert("b"), upsert("c")]
    for item in items:
        h.worker.submit(item)
    await asyncio.sleep(0.3)
    assert len(remote.log()) == 1  # held: nothing committed yet

    outcome = await asyncio.wait_for(h.worker.fire(handle, "Three at once"), 20)
    assert outcome.reason == PUSHED
    assert outcome.sha == remote.tip()
    assert len(remote.log()) == 2


async def test_request_fails_when_its_target_is_no_longer_written(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config(), config(OTHER, "other"))
    handle = h.worker.hold(TARGET, None)
    h.worker.submit(upsert("a"))
    h.worker.configure([config(OTHER, "other")])  # e.g. suspended
    outcome = await asyncio.wait_for(handle.future, 5)
    assert outcome.reason == TARGET_NOT_WRITABLE
    assert not outcome.ok


class Refusing(PlainRenderer):
    def render(
        self,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
        previous: bytes | None,
    ) -> bytes:
        if identity.name.startswith("secret"):
            raise RefusedContent("EncryptionMissing", "no recipients to encrypt to")
        return super().render(identity, rtype, document, previous)


async def test_request_with_refused_documents_fails_with_the_reason(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config(renderer=Refusing()))
    handle = h.worker.hold(TARGET, None)
    h.worker.submit(upsert("secret-a"))
    outcome = await asyncio.wait_for(h.worker.fire(handle, "Save"), 20)
    assert outcome.reason == "EncryptionMissing"
    assert outcome.message == "no recipients to encrypt to"
    assert outcome.sha is None
    assert not outcome.ok


async def test_request_sha_is_the_rebuilt_commit_after_a_rejected_push(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config(window=WindowPolicy(0)))
    first = upsert("first")
    h.worker.submit(first)
    await h.written(first)  # the worker now believes it knows the remote tip
    foreign = remote.commit_foreign("README.md", "by hand\n", "A commit the worker has not seen")
    handle = h.worker.hold(TARGET, None)
    h.worker.submit(upsert("second"))

    outcome: RequestOutcome = await asyncio.wait_for(h.worker.fire(handle, "Second"), 20)

    assert outcome.reason == PUSHED
    assert outcome.sha == remote.tip()
    parents = git("rev-list", "--parents", "-n", "1", str(outcome.sha), cwd=remote.path).split()
    assert parents[1:] == [foreign]


async def test_windows_use_the_clock_they_are_given(remote: BareRemote, tmp_path: Path) -> None:
    now = [1000.0]
    worker = BranchWorker(
        remote.url, "main", cache_dir=tmp_path / "c", committer=COMMITTER, clock=lambda: now[0]
    )
    worker.configure([config(window=WindowPolicy(5))])
    worker.start()
    try:
        change = upsert("a")
        worker.submit(change)
        await asyncio.sleep(0.2)
        assert worker.pending == 1
        now[0] += 5
        worker.configure([config(window=WindowPolicy(5))])  # any wake-up re-checks deadlines
        await until(lambda: worker.pending == 0, "the window to close")
        await until(lambda: path_of("a") in remote.files(), "the file")
    finally:
        await worker.stop(timeout=5)


async def test_a_stopped_worker_ends_the_requests_it_could_not_push(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make()
    first = upsert("first")
    h.worker.configure([config(window=WindowPolicy(0))])
    h.worker.submit(first)
    await h.written(first)
    away = remote.path.with_name("away.git")
    remote.path.rename(away)
    try:
        handle = h.worker.hold(TARGET, None)
        h.worker.submit(upsert("second"))
        future = h.worker.fire(handle, "Never pushed")
        await until(lambda: bool(h.reports) and not h.reports[-1].ok, "a failed push")
        assert not future.done()  # the worker keeps retrying; no timeout ends the request
        assert not await h.worker.stop(timeout=0.5)
        outcome = await asyncio.wait_for(future, 5)
        assert outcome.reason == WORKER_STOPPED
    finally:
        away.rename(remote.path)


# -- spec.ignore.changesBy ------------------------------------------------------------------
FLUX = IgnoreRule.parse(field_managers=["kustomize-controller"])


def from_manager(change: Change, manager: str) -> Change:
    return dataclasses.replace(change, field_manager=manager)


async def test_an_ignored_change_alone_is_acknowledged_without_a_commit(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config(window=WindowPolicy(0), ignore=FLUX))
    mine = upsert("app", k="1")
    h.worker.submit(mine)
    await h.written(mine)
    commits, tip = len(remote.log()), remote.tip()

    flux = from_manager(upsert("app", op=Operation.UPDATE, k="2"), "kustomize-controller")
    h.worker.submit(flux)
    await h.written(flux)  # its cursor moves on: a restart does not replay it

    assert (len(remote.log()), remote.tip()) == (commits, tip)
    assert read_doc(remote, path_of("app"))["data"] == {"k": "1"}
    later = upsert("app", op=Operation.UPDATE, k="3", extra="x")
    h.worker.submit(later)
    await h.written(later)
    assert read_doc(remote, path_of("app"))["data"] == {"k": "3", "extra": "x"}
    assert len(remote.log()) == commits + 1


async def test_an_ignored_change_is_acknowledged_only_with_the_window_before_it(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make(config(ignore=FLUX), config(OTHER, "other", window=WindowPolicy(0)))
    mine = upsert("mine")  # in a long window
    flux = from_manager(upsert("flux"), "kustomize-controller")
    other = for_target(upsert("quick"), OTHER)
    for item in (mine, flux, other):
        h.worker.submit(item)
    await h.written(other)
    assert mine.cursor not in h.acked
    assert flux.cursor not in h.acked  # acknowledging it would skip `mine` on a restart

    assert await h.worker.stop(timeout=10)
    assert {mine.cursor, flux.cursor} <= h.acked
    assert path_of("mine") in remote.files()
    assert path_of("flux") not in remote.files()
