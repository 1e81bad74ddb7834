"""The worker's intake (authors, windows, CommitRequest handles) with a fake clock, a fake
resolver and a list as the commit queue: no Git, no sockets."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field

from kubescribe import metrics
from kubescribe.api.conditions import NOTHING_TO_COMMIT, TARGET_NOT_WRITABLE, WORKER_STOPPED
from kubescribe.attribution.decode import FACT_WRITE, Fact
from kubescribe.attribution.facts import keyed
from kubescribe.attribution.resolver import AuditAuthorResolver
from kubescribe.git.intake import Intake
from kubescribe.git.records import Group, Skipped
from kubescribe.mirror.authors import (
    UNRESOLVED,
    AttributionMode,
    Author,
    AuthorResolver,
    ObjectEvent,
)
from kubescribe.mirror.changes import Change, Cursor, Operation, Snapshot, TargetKey
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.ignore import NO_IGNORE, IgnoreRule
from kubescribe.mirror.window import CloseReason, WindowPolicy
from kubescribe.store.memory import MemoryFactStore

CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)
A = TargetKey("ns", "a")
B = TargetKey("ns", "b")
COMMITTER = Author("kubescribe", "kubescribe@example.invalid")
ALICE = Author("alice", "alice@example.invalid")


@dataclass(frozen=True)
class Settings:
    folder: str = "f"
    window: WindowPolicy = field(default_factory=lambda: WindowPolicy(5))
    attribution: AttributionMode = AttributionMode.CONFIGURED
    infer_authors: bool = False
    ignore: IgnoreRule = NO_IGNORE


def change(name: str, target: TargetKey = A, author: Author | None = None) -> Change:
    identity = Identity("", "ConfigMap", "ns", name)
    return Change(
        target,
        Operation.CREATE,
        identity,
        CONFIGMAPS,
        {},
        0.0,
        Cursor("s", name),
        uid=f"uid-{name}",
        author=author,
    )


class Resolver:
    def __init__(self) -> None:
        self.events: list[ObjectEvent] = []
        self.answers: dict[str, asyncio.Future[Author | None]] = {}
        self.unresolved_streak = 0

    def answer(self, name: str, author: Author | None) -> None:
        self.answers[name].set_result(author)

    async def author_of(self, event: ObjectEvent, observed_at: float) -> Author | None:
        self.events.append(event)
        future: asyncio.Future[Author | None] = asyncio.get_running_loop().create_future()
        self.answers[event.name] = future
        return await future


class Fixture:
    def __init__(self, resolver: AuthorResolver | None = None, **targets: Settings) -> None:
        self.now = 100.0
        self.out: list[Change | Snapshot | Group | Skipped] = []
        self.wakes = 0
        self.targets = {TargetKey("ns", k): v for k, v in targets.items()}
        self.intake = Intake(
            branch="main",
            committer=COMMITTER,
            settings=self.targets.get,
            emit=self.out.append,
            wake=self._wake,
            resolver=resolver,
            clock=lambda: self.now,
        )

    def _wake(self) -> None:
        self.wakes += 1

    def names(self) -> list[object]:
        return [
            [c.identity.name for c in item.changes] if isinstance(item, Group) else _name(item)
            for item in self.out
        ]


def _name(item: Change | Snapshot | Skipped) -> str:
    if isinstance(item, Skipped):
        return f"skipped {item.cursor.resource_version}"
    return item.identity.name if isinstance(item, Change) else "snapshot"


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_window_zero_configured_author_is_the_fast_path() -> None:
    f = Fixture(a=Settings(window=WindowPolicy(0)))
    item = change("x", author=ALICE)

    f.intake.enter(item)

    assert len(f.out) == 1
    out = f.out[0]
    assert isinstance(out, Change)
    assert out.author is None  # configured-author: the committer, whoever acted
    assert f.intake.pending == 0


def test_silence_closes_the_window_into_a_group() -> None:
    f = Fixture(a=Settings())
    f.intake.enter(change("one"))
    f.now += 3
    f.intake.enter(change("two"))

    assert f.out == []
    assert f.intake.next_deadline() == 108
    f.now = 107.9
    f.intake.close_due()
    assert f.out == []
    f.now = 108
    f.intake.close_due()
    [group] = f.out
    assert isinstance(group, Group)
    assert group.reason is CloseReason.SILENCE
    assert group.author is None  # the committer
    assert [c.cursor for c in group.changes] == group.cursors


def test_snapshot_closes_the_window_first_and_is_never_grouped() -> None:
    f = Fixture(a=Settings())
    f.intake.enter(change("one"))
    f.intake.enter(Snapshot(A, CONFIGMAPS, "ns", {}, 0.0))

    assert f.names() == [["one"], "snapshot"]
    first = f.out[0]
    assert isinstance(first, Group)
    assert first.reason is CloseReason.TARGET


async def test_resolution_is_concurrent_and_fifo_per_target() -> None:
    resolver = Resolver()
    attributed = Settings(window=WindowPolicy(0), attribution=AttributionMode.ATTRIBUTED)
    f = Fixture(resolver, a=attributed, b=attributed)
    f.intake.enter(change("slow"))
    f.intake.enter(change("fast"))
    f.intake.enter(Snapshot(A, CONFIGMAPS, "ns", {}, 0.0))
    f.intake.enter(change("other", B))
    await settle()

    assert [e.name for e in resolver.events] == ["slow", "fast", "other"]
    assert resolver.events[0].uid == "uid-slow"
    assert resolver.events[0].resource_version == "slow"
    resolver.answer("fast", ALICE)
    resolver.answer("other", ALICE)
    await settle()
    assert f.names() == ["other"]  # target b does not wait for target a
    assert f.intake.pending == 3

    resolver.answer("slow", None)
    await settle()
    assert f.names() == ["other", "slow", "fast", "snapshot"]
    authors = [item.author for item in f.out if isinstance(item, Change)]
    assert authors == [ALICE, UNRESOLVED, ALICE]


async def test_a_change_with_an_author_is_not_resolved_again() -> None:
    resolver = Resolver()
    f = Fixture(
        resolver, a=Settings(window=WindowPolicy(0), attribution=AttributionMode.ATTRIBUTED)
    )
    f.intake.enter(change("known", author=ALICE))
    await settle()
    assert resolver.events == []
    assert f.names() == ["known"]


async def test_shutdown_admits_unresolved_changes_and_closes_windows() -> None:
    resolver = Resolver()
    f = Fixture(resolver, a=Settings(attribution=AttributionMode.ATTRIBUTED))
    f.intake.enter(change("waiting"))
    await settle()
    held = f.intake.hold(A, ALICE)

    f.intake.shutdown()

    [group] = f.out
    assert isinstance(group, Group)
    assert group.reason is CloseReason.SHUTDOWN
    assert group.author == UNRESOLVED
    assert held.future.result().reason == WORKER_STOPPED
    f.intake.enter(change("late"))
    assert f.names()[-1] == "late"  # after shutdown: no windows


async def test_contradicting_facts_give_the_sentinel_not_a_guessed_manager() -> None:
    """Two audit facts name different authors of one version: nothing proves who wrote it, so
    `inferFromManagedFields` must not fill in a guess (the field manager is whoever wrote last,
    which the contradiction leaves open)."""
    store = MemoryFactStore()
    facts = [
        Fact(
            kind=FACT_WRITE,
            verb="patch",
            author=who,
            username=who.name,
            group="",
            resource="configmaps",
            namespace="ns",
            name="x",
            uid="uid-x",
            resource_version="x",
            received=10.0,
            completed=11.0,
        )
        for who in (ALICE, Author("mallory", "mallory@example.invalid"))
    ]
    await store.add("local", keyed(facts))
    resolver = AuditAuthorResolver(store, "local", grace=0)
    inferred = Settings(
        window=WindowPolicy(0), attribution=AttributionMode.ATTRIBUTED, infer_authors=True
    )
    f = Fixture(resolver, a=inferred)
    f.intake.enter(dataclasses.replace(change("x"), field_manager="kubectl-edit"))
    for _ in range(50):
        if f.out:
            break
        await asyncio.sleep(0.01)
    [out] = f.out
    assert isinstance(out, Change)
    assert out.author == UNRESOLVED


async def test_request_closes_only_its_authors_window() -> None:
    f = Fixture(a=Settings(attribution=AttributionMode.ATTRIBUTED))
    f.intake.enter(change("alices", author=ALICE))
    mine = f.intake.hold(A, ALICE)
    other = f.intake.hold(A, None)  # unknown requester: only an unresolved window

    nothing = await f.intake.fire(other, "not yours")
    assert nothing.reason == NOTHING_TO_COMMIT
    f.intake.fire(mine, "Alice's release")

    [group] = f.out
    assert isinstance(group, Group)
    assert (group.reason, group.message, group.request) == (
        CloseReason.REQUEST,
        "Alice's release",
        mine,
    )
    assert not mine.future.done()  # resolved by the worker after the push


async def test_fire_waits_behind_pending_resolutions() -> None:
    resolver = Resolver()
    f = Fixture(
        resolver, a=Settings(window=WindowPolicy(0), attribution=AttributionMode.ATTRIBUTED)
    )
    handle = f.intake.hold(A, UNRESOLVED)
    f.intake.enter(change("before-the-request"))
    await settle()
    f.intake.fire(handle, "Save")
    assert f.out == []  # the marker waits in the target's FIFO

    resolver.answer("before-the-request", None)
    await settle()
    [group] = f.out
    assert isinstance(group, Group)
    assert group.message == "Save"
    assert [c.identity.name for c in group.changes] == ["before-the-request"]


async def test_a_request_for_a_removed_target_fails_and_its_window_closes() -> None:
    f = Fixture(a=Settings(), b=Settings())
    f.intake.enter(change("x"))
    handle = f.intake.hold(A, None)
    targets = dict(f.targets)
    del f.targets[A]

    f.intake.reconfigure(targets.get, f.targets.get)

    assert handle.future.result().reason == TARGET_NOT_WRITABLE
    [group] = f.out
    assert isinstance(group, Group)
    assert group.reason is CloseReason.TARGET


def test_reconfiguring_the_window_to_zero_closes_it_and_a_longer_one_keeps_it() -> None:
    f = Fixture(a=Settings())
    f.intake.enter(change("x"))
    old = dict(f.targets)
    f.targets[A] = Settings(window=WindowPolicy(60))
    f.intake.reconfigure(old.get, f.targets.get)
    assert f.out == []
    assert f.intake.next_deadline() == 160

    old = dict(f.targets)
    f.targets[A] = Settings(window=WindowPolicy(0))
    f.intake.reconfigure(old.get, f.targets.get)
    assert f.names() == [["x"]]


async def test_hold_on_an_unknown_target_fails_at_once() -> None:
    f = Fixture(a=Settings())
    handle = f.intake.hold(B, None)
    assert handle.future.result().reason == TARGET_NOT_WRITABLE


# -- spec.ignore.changesBy ------------------------------------------------------------------
FLUX_USER = "system:serviceaccount:flux-system:kustomize-controller"
FLUX = Author(FLUX_USER, "kustomize-controller@flux-system.invalid", user=FLUX_USER)
BOB = Author("Bob", "bob@example.invalid", user="bob")


def ignored(by: str) -> float:
    sample = metrics.REGISTRY.get_sample_value(
        "kubescribe_changes_ignored_total", {"target_namespace": "ns", "by": by}
    )
    return sample or 0.0


def unattributed() -> float:
    sample = metrics.REGISTRY.get_sample_value(
        "kubescribe_ignore_unattributed_total", {"target_namespace": "ns"}
    )
    return sample or 0.0


def by_manager(name: str, manager: str) -> Change:
    return dataclasses.replace(change(name), field_manager=manager)


async def test_a_listed_field_manager_is_dropped_without_asking_for_an_author() -> None:
    resolver = Resolver()
    rule = IgnoreRule.parse(users=["bob"], field_managers=["kustomize-controller"])
    f = Fixture(resolver, a=Settings(window=WindowPolicy(0), ignore=rule))
    before = ignored("fieldmanager")

    f.intake.enter(by_manager("flux", "kustomize-controller"))
    await settle()

    assert resolver.events == []  # dropped whoever made it: no wait for attribution
    assert f.names() == ["skipped flux"]  # its cursor goes on, in order, with nothing to write
    assert ignored("fieldmanager") == before + 1


async def test_configured_author_resolves_only_to_match_and_commits_as_the_committer() -> None:
    resolver = Resolver()
    rule = IgnoreRule.parse(service_accounts=["flux-system/kustomize-controller"])
    f = Fixture(resolver, a=Settings(window=WindowPolicy(0), ignore=rule))
    before = ignored("serviceaccount")

    f.intake.enter(by_manager("flux", "kubectl-client-side-apply"))
    f.intake.enter(by_manager("bob", "kubectl-edit"))
    await settle()
    assert [e.name for e in resolver.events] == ["flux", "bob"]
    resolver.answer("bob", BOB)
    resolver.answer("flux", FLUX)
    await settle()

    assert f.names() == ["skipped flux", "bob"]  # FIFO: bob's change waited behind flux's
    [_, bobs] = f.out
    assert isinstance(bobs, Change)
    assert bobs.author is None
    assert ignored("serviceaccount") == before + 1


async def test_no_author_known_records_the_change_and_counts_it() -> None:
    resolver = Resolver()
    rule = IgnoreRule.parse(users=["bob"])
    f = Fixture(resolver, a=Settings(window=WindowPolicy(0), ignore=rule))
    g = Fixture(None, a=Settings(window=WindowPolicy(0), ignore=rule))  # attribution not wired
    before = unattributed()

    f.intake.enter(change("late"))
    await settle()
    resolver.answer("late", None)  # nothing within the grace
    f.intake.enter(change("ambiguous"))
    await settle()
    resolver.answer("ambiguous", UNRESOLVED)
    await settle()
    g.intake.enter(change("unwired"))

    assert f.names() == ["late", "ambiguous"]
    assert g.names() == ["unwired"]
    assert unattributed() == before + 3


async def test_a_dropped_change_rides_with_the_open_window_without_moving_its_deadline() -> None:
    """Its cursor may be acknowledged only after the window's changes are pushed (they came
    first), and Flux writing now and then must not keep an operator's window open."""
    rule = IgnoreRule.parse(field_managers=["kustomize-controller"])
    f = Fixture(a=Settings(ignore=rule))
    f.intake.enter(change("mine", author=ALICE))
    deadline = f.intake.next_deadline()
    f.now += 3
    f.intake.enter(by_manager("flux", "kustomize-controller"))

    assert f.out == []
    assert f.intake.next_deadline() == deadline
    f.now = 106
    f.intake.close_due()
    [group] = f.out
    assert isinstance(group, Group)
    assert [c.identity.name for c in group.changes] == ["mine"]
    assert group.cursors == [Cursor("s", "mine"), Cursor("s", "flux")]


async def test_a_listed_user_is_dropped_with_attributed_authors_too() -> None:
    resolver = Resolver()
    attributed = Settings(
        window=WindowPolicy(0),
        attribution=AttributionMode.ATTRIBUTED,
        ignore=IgnoreRule.parse(users=["bob"]),
    )
    f = Fixture(resolver, a=attributed)
    f.intake.enter(change("bob"))
    f.intake.enter(change("alice"))
    await settle()
    resolver.answer("bob", BOB)
    resolver.answer("alice", dataclasses.replace(ALICE, user="alice"))
    await settle()

    assert f.names() == ["skipped bob", "alice"]
