"""The branch worker against a real bare repository over file://, read back with `git`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pygit2
import pytest

from kubescribe.git.repo import GitRepository, PushRejected, cache_path
from kubescribe.git.targets import (
    PlainRenderer,
    RefusedContent,
    TargetConfig,
)
from kubescribe.git.tree import edit_tree
from kubescribe.mirror.changes import Operation, PruneMode, TargetKey
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.layout import Layout
from kubescribe.mirror.window import WindowPolicy
from kubescribe.mirror.yamlfmt import dump_yaml, order_document
from kubescribe_devenv.gitremote import BareRemote, git
from tests.builders import (
    COMMITTER,
    FOLDER,
    SECRETS,
    SERVICES,
    TARGET,
    delete,
    document,
    ident,
    parents,
    path_of,
    read_doc,
    snapshot,
    target,
    upsert,
)
from tests.support import WorkerHarness, until


async def test_create_update_delete_one_commit_each(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    template = (
        "{operation} {kind} {group}/{version} {resource} {namespace} {name} {ref} {target} {path}"
    )
    h = make(target(change_template=template))
    p = path_of("a")

    await h.settle(upsert("a", k="1"))
    assert read_doc(remote, p) == document("a", k="1")
    await h.settle(upsert("a", op=Operation.UPDATE, k="2"))
    assert read_doc(remote, p)["data"] == {"k": "2"}
    await h.settle(delete("a"))
    assert p not in remote.files()

    log = remote.log()
    assert [c["message"] for c in log[:3]] == [
        f"{op} ConfigMap core/v1 configmaps ns1 a ns1/a team/mirror {p}"
        for op in ("DELETE", "UPDATE", "CREATE")
    ]
    assert len(log) == 4  # + the seed commit
    for commit in log[:3]:
        assert (commit["committer"], commit["committer_email"]) == (COMMITTER.name, COMMITTER.email)
        assert (commit["author"], commit["author_email"]) == (COMMITTER.name, COMMITTER.email)
    report = h.last()
    assert report.ok
    assert report.commit == log[0]["sha"]
    assert report.documents == 0
    assert report.pushed_at is not None


async def test_default_messages(remote: BareRemote, make: Callable[..., WorkerHarness]) -> None:
    h = make()
    await h.settle(upsert("a"))
    await h.settle(snapshot({ident("b"): document("b")}))
    assert [c["message"] for c in remote.log()[:2]] == [
        "Snapshot configmaps in ns1: 1 added, 0 updated, 1 removed",
        "CREATE ConfigMap ns1/a",
    ]


async def test_noop_makes_no_commit(remote: BareRemote, make: Callable[..., WorkerHarness]) -> None:
    h = make()
    await h.settle(upsert("a", k="1"))
    commits = len(remote.log())
    # Same content (status-only update), delete of a missing document, identical snapshot.
    await h.settle(
        upsert("a", op=Operation.UPDATE, k="1"),
        delete("never-existed"),
        snapshot({ident("a"): document("a", k="1")}),
    )
    assert len(remote.log()) == commits
    assert h.last().ok
    assert h.last().message == "Up to date"


@pytest.mark.parametrize("window", [0.0, 1.0], ids=["alone", "windowed"])
async def test_a_replay_by_another_replica_of_what_git_holds_makes_no_commit(
    remote: BareRemote, make: Callable[..., WorkerHarness], window: float
) -> None:
    first = make()
    await first.settle(upsert("kept", k="1"), upsert("gone", k="1"))
    await first.settle(upsert("kept", op=Operation.UPDATE, k="2"), delete("gone"))
    await first.worker.stop(timeout=5)
    tip = remote.tip()
    # The current state of each object, replayed by a new owner with a fresh cache: the
    # content Git holds for a live object, a delete of a file Git no longer holds.
    second = make(target(window=WindowPolicy(window)), cache="fresh-cache")
    await second.settle(upsert("kept", op=Operation.UPDATE, k="2"), delete("gone"))
    assert remote.tip() == tip
    assert second.last().ok
    assert second.last().message == "Up to date"


@pytest.mark.parametrize(
    ("prune", "left", "retained"),
    [
        (PruneMode.ALWAYS, {"a"}, 0),
        (PruneMode.ON_EVENT, {"a", "unobserved"}, 1),
        (PruneMode.NEVER, {"a", "observed", "unobserved"}, 2),
    ],
)
async def test_snapshot_prune_modes(
    remote: BareRemote,
    make: Callable[..., WorkerHarness],
    prune: PruneMode,
    left: set[str],
    retained: int,
) -> None:
    h = make(target(prune))
    await h.settle(
        upsert("a"),
        upsert("observed"),
        upsert("unobserved"),
        upsert("other-ns", ns="ns2"),
        upsert("svc", rtype=SERVICES),
    )
    commits = len(remote.log())
    await h.settle(
        snapshot({ident("a"): document("a", k="new")}, deleted=frozenset({ident("observed")}))
    )
    files = set(remote.files())
    configmaps_ns1 = {
        p.rsplit("/", 1)[1].removesuffix(".yaml") for p in files if "/ns1/core/configmaps/" in p
    }
    assert configmaps_ns1 == left
    # Outside the snapshot's scope nothing is touched: other namespaces, other kinds.
    assert path_of("other-ns", ns="ns2") in files
    assert path_of("svc", rtype=SERVICES) in files
    assert len(remote.log()) == commits + 1  # one commit for the whole snapshot
    assert h.last().retained == retained
    assert h.last().documents == len(left) + 2


async def test_snapshot_of_all_namespaces_sweeps_every_namespace(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make()
    await h.settle(upsert("a", ns="ns1"), upsert("b", ns="ns2"), upsert("svc", rtype=SERVICES))
    await h.settle(snapshot({ident("a"): document("a")}, ns=""))
    assert set(remote.files()) == {path_of("a"), path_of("svc", rtype=SERVICES)}


async def test_live_delete_under_each_prune_mode(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    for prune, kept in (
        (PruneMode.ALWAYS, False),
        (PruneMode.ON_EVENT, False),
        (PruneMode.NEVER, True),
    ):
        name = f"x-{prune}".lower()
        h = make(target(prune), cache=f"cache-{prune}")
        await h.settle(upsert(name))
        await h.settle(delete(name))
        assert (path_of(name) in remote.files()) is kept
        assert h.last().retained == (1 if kept else 0)


async def test_existing_file_at_custom_path_is_edited_in_place(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    custom = f"{FOLDER}/apps/my-config.yaml"
    hand = (
        "# maintained by hand once\n"
        "kind: ConfigMap\napiVersion: v1\nmetadata:\n  namespace: ns1\n  name: a\n"
    )
    remote.commit_foreign(custom, hand, "Add a ConfigMap by hand")
    h = make()
    await h.settle(upsert("a", op=Operation.UPDATE, k="v"))
    assert custom in remote.files()
    assert path_of("a") not in remote.files()
    assert read_doc(remote, custom) == document("a", k="v")
    await h.settle(delete("a"))
    assert custom not in remote.files()


async def test_foreign_commit_is_kept_and_ours_lands_on_top(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make()
    await h.settle(upsert("a"))
    foreign = remote.commit_foreign("docs/README.md", "hello\n", "A human commit")
    await h.settle(upsert("b"))
    log = remote.log()
    assert log[0]["message"] == "CREATE ConfigMap ns1/b"
    assert parents(remote, log[0]["sha"]) == [foreign]
    assert {"docs/README.md", path_of("a"), path_of("b")} <= set(remote.files())


async def test_unreachable_remote_converges_without_new_changes(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make()
    await h.settle(upsert("a"), upsert("doomed"))
    acks_before = len(h.acks)
    away = remote.path.with_name("away.git")
    remote.path.rename(away)
    h.worker.submit(first := upsert("b"))
    await until(lambda: any(not r.ok for r in h.reports), "a failure report")
    failure = next(r for r in h.reports if not r.ok)
    assert failure.reason == "RemoteUnreachable"
    # Changes keep coming while the remote is away.
    h.worker.submit(second := upsert("c", k="1"))
    h.worker.submit(third := upsert("c", op=Operation.UPDATE, k="2"))
    h.worker.submit(gone := delete("doomed"))
    # A failed retry keeps the batch, with the two versions of "c" collapsed into the last.
    await until(lambda: h.worker.pending == 3, "a failed retry")
    assert len(h.acks) == acks_before  # nothing acknowledged while nothing was pushed
    away.rename(remote.path)
    commits = len(remote.log())
    # No new submission: the worker retries on its own.
    await until(lambda: h.worker.pending == 0 and h.last().ok, "the self-scheduled retry")
    files = set(remote.files())
    assert {path_of("a"), path_of("b"), path_of("c")} <= files
    assert path_of("doomed") not in files
    assert read_doc(remote, path_of("c"))["data"] == {"k": "2"}
    assert len(h.acks) == acks_before + 1  # one push carried everything
    assert {first.cursor, second.cursor, third.cursor, gone.cursor} <= set(h.acks[-1])
    assert [c["message"] for c in remote.log()[: len(remote.log()) - commits]] == [
        "DELETE ConfigMap ns1/doomed",
        "UPDATE ConfigMap ns1/c",
        "CREATE ConfigMap ns1/b",
    ]


async def test_refused_document_is_not_written_and_others_are(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    class NoSecrets(PlainRenderer):
        def render(
            self,
            identity: Identity,
            rtype: ResourceType,
            document: Mapping[str, Any],
            previous: bytes | None,
        ) -> bytes:
            if rtype.kind == "Secret":
                raise RefusedContent("EncryptionMissing", "no age recipients configured")
            return super().render(identity, rtype, document, previous)

    h = make(target(renderer=NoSecrets()))
    await h.settle(upsert("s", rtype=SECRETS, password="hunter2"), upsert("a"))
    files = set(remote.files())
    assert path_of("a") in files
    assert path_of("s", rtype=SECRETS) not in files
    refused = [r for report in h.reports for r in report.refused]
    assert refused == [
        (ident("s", rtype=SECRETS), "EncryptionMissing", "no age recipients configured")
    ]
    assert h.last().ok


async def test_acknowledged_only_after_the_push(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make()
    items = [upsert(f"cm-{i}") for i in range(5)]
    for item in items:
        h.worker.submit(item)
    await until(lambda: {i.cursor for i in items} <= h.acked, "acks")
    for cursors, files in zip(h.acks, h.files_at_ack, strict=True):
        for c in cursors:
            item = next(i for i in items if i.cursor == c)
            assert path_of(item.identity.name) in files


async def test_restart_with_equal_snapshot_makes_no_commit(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    docs = {ident(f"cm-{i}"): document(f"cm-{i}", k=str(i)) for i in range(20)}
    first = make()
    await first.settle(snapshot(docs))
    await first.worker.stop(timeout=5)
    commits = len(remote.log())
    second = make(cache="fresh-cache")
    await second.settle(snapshot(docs))
    assert len(remote.log()) == commits
    assert second.last().ok
    assert second.last().documents == 20


async def test_stale_local_cache_is_not_evidence(
    remote: BareRemote, make: Callable[..., WorkerHarness], tmp_path: Path
) -> None:
    first = make()
    await first.settle(upsert("a"))
    await first.worker.stop(timeout=5)
    # A killed process left a commit in the cache that never reached the remote; it holds the
    # very file the next snapshot wants, and every local ref points at it.
    store = pygit2.Repository(str(cache_path(tmp_path / "cache", remote.url)))
    tip = store.revparse_single(remote.tip() or "")
    ghost = dump_yaml(order_document(document("ghost"))).encode()
    tree = edit_tree(store, tip.peel(pygit2.Tree).id, {path_of("ghost"): store.create_blob(ghost)})
    sig = pygit2.Signature("crashed", "crashed@example.invalid")
    local = store.create_commit(None, sig, sig, "never pushed", tree, [tip.id])
    for ref in ("refs/heads/main", "refs/remotes/origin/main", "refs/kubescribe/push/main"):
        store.references.create(ref, local, force=True)

    second = make(target(PruneMode.NEVER))  # same cache dir
    await second.settle(snapshot({ident("a"): document("a"), ident("ghost"): document("ghost")}))
    assert path_of("ghost") in remote.files()
    assert "never pushed" not in [c["message"] for c in remote.log()]


async def test_creates_a_branch_missing_on_the_remote(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    git("symbolic-ref", "HEAD", "refs/heads/none", cwd=remote.path)  # no default branch
    h = make(branch="mirror")
    await h.settle(upsert("a"))
    log = remote.log("mirror")
    assert len(log) == 1
    assert parents(remote, log[0]["sha"]) == []  # an orphan root only without a default
    assert remote.files("mirror") == [path_of("a")]
    assert len(remote.log()) == 1  # main untouched


async def test_move_between_plain_and_encrypted(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    class FakeSops(PlainRenderer):
        """Stands in for SOPS: marks its output and records what it was given."""

        def __init__(self) -> None:
            self.previous: list[bytes | None] = []

        def encrypted(self, rtype: ResourceType) -> bool:
            return True

        def render(
            self,
            identity: Identity,
            rtype: ResourceType,
            document: Mapping[str, Any],
            previous: bytes | None,
        ) -> bytes:
            self.previous.append(previous)
            return super().render(identity, rtype, document, previous) + b"sops:\n  version: fake\n"

    h = make()
    await h.settle(upsert("a", k="1"))
    sops = FakeSops()
    h.worker.configure([target(renderer=sops)])
    await h.settle(upsert("a", op=Operation.UPDATE, k="1"))
    encrypted_path = path_of("a").removesuffix(".yaml") + ".sops.yaml"
    assert set(remote.files()) == {encrypted_path}
    assert remote.log()[0]["message"] == "UPDATE ConfigMap ns1/a"
    await h.settle(upsert("a", op=Operation.UPDATE, k="2"))
    assert sops.previous[0] is None  # the plain file is no previous ciphertext
    assert sops.previous[1] is not None
    assert b"version: fake" in sops.previous[1]
    h.worker.configure([target()])
    await h.settle(upsert("a", op=Operation.UPDATE, k="2"))
    assert set(remote.files()) == {path_of("a")}


async def test_path_conflict_is_refused(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    remote.commit_foreign(path_of("a"), "not a kubernetes object: true\n", "Someone's file")
    h = make()
    await h.settle(upsert("a"), upsert("b"))
    assert remote.read(path_of("a")) == "not a kubernetes object: true\n"
    assert path_of("b") in remote.files()
    assert [(r[0], r[1]) for r in h.last().refused] == [(ident("a"), "PathConflict")]


async def test_targets_share_a_branch(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    other = TargetKey("team", "other")
    h = make(target(), target(key=other, folder="clusters/prod"))
    await h.settle(upsert("a"), upsert("a", target=other))
    await h.settle(snapshot({}, target=other))
    assert set(remote.files()) == {path_of("a")}
    assert h.last(other).documents == 0
    assert h.last(TARGET).documents == 1
    with pytest.raises(ValueError, match="overlapping"):
        h.worker.configure([target(), target(key=other, folder="clusters")])


async def test_stop_flushes_the_queue(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make()
    for i in range(20):
        h.worker.submit(upsert(f"cm-{i}"))
    assert await h.worker.stop(timeout=20)
    assert len(remote.files()) == 20
    assert len(remote.log()) == 21


async def test_ten_thousand_document_snapshot(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    docs = {ident(f"cm-{i:05}"): document(f"cm-{i:05}", k=str(i)) for i in range(10_000)}
    h = make()
    await h.settle(snapshot(docs))
    assert len(remote.files()) == 10_000
    assert (
        remote.log()[0]["message"]
        == "Snapshot configmaps in ns1: 10000 added, 0 updated, 0 removed"
    )
    await h.settle(upsert("cm-00042", op=Operation.UPDATE, k="changed"))
    assert read_doc(remote, path_of("cm-00042"))["data"] == {"k": "changed"}
    assert h.last().documents == 10_000


async def test_stop_during_an_outage_gives_up_in_time(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    h = make()
    await h.settle(upsert("a"))
    remote.path.rename(remote.path.with_name("away.git"))
    h.worker.submit(upsert("b"))
    await until(lambda: any(not r.ok for r in h.reports), "a failure report")
    assert not await h.worker.stop(timeout=1.5)  # bounded: it returns, without the push
    # One attempt right away, then the usual backoff: no busy loop until the deadline.
    assert sum(not r.ok for r in h.reports) <= 4
    assert not h.acks[1:]  # "b" was never acknowledged


async def test_a_stop_given_up_by_its_caller_still_stops_the_writer(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    """A shutdown past its own bound cancels the writers' stops: a writer left running would
    go on taking and pushing items after the Leases are gone (a replica overran its stop so)."""
    h = make()
    await h.settle(upsert("a"))
    remote.path.rename(remote.path.with_name("away.git"))
    h.worker.submit(upsert("b"))
    await until(lambda: any(not r.ok for r in h.reports), "a failure report")
    stopping = asyncio.create_task(h.worker.stop(timeout=60))
    await asyncio.sleep(0)  # one step: the stop is under way, waiting for the writer
    stopping.cancel()
    await asyncio.wait({stopping})
    await until(lambda: not h.worker.running, "the writer's task ended")
    remote.path.with_name("away.git").rename(remote.path)
    assert not h.acks[1:]  # "b" was never acknowledged: the next owner replays it


def test_local_push_never_overwrites_a_foreign_commit(tmp_path: Path, remote: BareRemote) -> None:
    """file:// pushes compare and swap: a branch that moved since our base is not overwritten."""
    repo = GitRepository(remote.url, tmp_path / "cache")
    base = repo.fetch("main")
    assert base is not None
    sig = pygit2.Signature("k", "k@example.invalid")
    tree = repo.repo[base].peel(pygit2.Tree).id
    ours = repo.repo.create_commit(None, sig, sig, "ours", tree, [base])
    foreign = remote.commit_foreign("README.md", "by hand\n", "foreign")
    with pytest.raises(PushRejected):
        repo.push("main", ours, base)
    assert remote.tip() == foreign
    new_base = repo.fetch("main")
    assert new_base is not None
    again = repo.repo.create_commit(None, sig, sig, "ours again", tree, [new_base])
    repo.push("main", again, new_base)
    assert [c["sha"] for c in remote.log()[:2]] == [str(again), foreign]
    assert "kubescribe" not in git("for-each-ref", cwd=remote.path)


class _NamedLayout(Layout):
    """Puts documents whose name starts with `bad` at a path taken from the name: what a
    GitTarget could not configure through the CRD, to prove the worker isolates it anyway."""

    def path_for(self, identity: Identity, rtype: ResourceType, *, encrypted: bool = False) -> str:
        if identity.name.startswith("bad"):
            return identity.name.removeprefix("bad").replace("|", "/") + ".yaml"
        return super().path_for(identity, rtype, encrypted=encrypted)


@pytest.mark.parametrize(
    "bad",
    ["bad.git|x", "badx|GIT~1|y", "bad.g\u200cit|x", "badx|a\0b"],
    ids=["dotgit", "ntfs", "hfs", "libgit2-refuses"],
)
async def test_an_unwritable_document_turns_only_its_target_red(
    remote: BareRemote, make: Callable[..., WorkerHarness], bad: str
) -> None:
    """One target's document Git will not store is refused with InvalidPath and stays listed
    as failing; the other target on the branch, and the target's other documents, are
    committed and pushed as usual."""
    other = TargetKey("team", "other")
    broken = TargetConfig(TARGET, FOLDER, _NamedLayout(), PruneMode.ALWAYS, PlainRenderer())
    h = make(broken, target(key=other, folder="clusters/prod"))
    docs = {ident(bad): document(bad), ident("fine"): document("fine")}
    await h.settle(snapshot(docs), upsert("a", target=other))
    assert set(remote.files()) == {path_of("fine"), path_of("a", folder="clusters/prod")}
    [(identity, reason, message)] = h.last(TARGET).failing
    assert (identity, reason) == (ident(bad), "InvalidPath")
    assert message.startswith(FOLDER + "/")
    assert "not written" in h.last(TARGET).message
    assert not h.last(other).failing

    await h.settle(upsert("b", target=other))  # the branch keeps moving
    assert path_of("b", folder="clusters/prod") in remote.files()
    await h.settle(upsert("fine", op=Operation.UPDATE, k="2"))
    assert read_doc(remote, path_of("fine"))["data"] == {"k": "2"}
    assert [f[:2] for f in h.last(TARGET).failing] == [(ident(bad), "InvalidPath")]

    await h.settle(delete(bad))  # gone from the cluster: nothing left that fails
    assert h.last(TARGET).failing == []


async def test_a_target_folder_git_refuses_blocks_only_that_target(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    other = TargetKey("team", "other")
    broken = target()
    object.__setattr__(broken, "folder", "clusters/.git")  # a path stored before the CRD rule
    h = make(broken, target(key=other, folder="clusters/prod"))
    await h.settle(upsert("a"), upsert("a", target=other))
    assert set(remote.files()) == {path_of("a", folder="clusters/prod")}
    assert [f[:2] for f in h.last(TARGET).failing] == [(ident("a"), "InvalidPath")]
    assert h.last(other).ok


async def test_a_document_already_at_an_hfs_spelling_of_git_is_edited_in_place(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    """The refusal is about new paths: a file someone committed at a path that only a
    strict server would refuse is still the document's home."""
    odd = f"{FOLDER}/.g\u200cit/a.yaml"
    remote.commit_foreign(odd, dump_yaml(order_document(document("a", k="1"))), "Put by hand")
    h = make()
    await h.settle(upsert("a", op=Operation.UPDATE, k="2"))
    assert read_doc(remote, odd)["data"] == {"k": "2"}
    assert h.last().failing == []


async def test_a_worker_that_lost_its_branch_writes_nothing_more(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    """A lost Lease: what is queued is neither written nor acknowledged (the new owner replays
    it from the cursor); `stop` would have written it over the new owner's commits."""
    h = make(target(window=WindowPolicy(60.0)))
    tip = remote.tip()
    late = upsert("a", k="1")
    h.worker.submit(late)  # waits in the open commit window
    await h.worker.abandon()
    assert remote.tip() == tip
    assert late.cursor not in h.acked
