"""Writers contending on one branch of a real bare remote (file://) never blame the network.

Several writers can share one cache repository (an old writer finishing while a new one starts
on the same branch after a hand-over), and several replicas push to one remote. A lost race is
`PushRejected`, a vanished bookkeeping ref is `LocalRefMissing`; `RemoteUnreachable` is only
for a remote that does not answer, and here it always answers.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pygit2
import pytest

from kubescribe.api import conditions as c
from kubescribe.git.repo import _SWEPT, CacheBusy, GitRepository, PushRejected, RemoteError
from kubescribe.git.tree import edit_tree
from kubescribe_devenv.gitremote import BareRemote, git
from tests.builders import path_of, upsert
from tests.support import WorkerHarness, until

_SIG = pygit2.Signature("k", "k@example.invalid")


def _write_until_landed(repo: GitRepository, name: str, reasons: Counter[str]) -> None:
    """Fetch, commit one file on the tip, push; again after each failure (as the writer does)."""
    for _ in range(50):
        try:
            base = repo.fetch("main")
            if base is None:  # a wrong answer: the branch is there all along
                reasons["fetch found no branch"] += 1
                continue
            tree = repo.repo[base].peel(pygit2.Tree).id
            blob = repo.repo.create_blob(name.encode())
            ours = repo.repo.create_commit(
                None, _SIG, _SIG, name, edit_tree(repo.repo, tree, {name: blob}), [base]
            )
            repo.push("main", ours, base)
            return
        except RemoteError as exc:
            reasons[exc.reason] += 1
    raise AssertionError(f"{name} never landed: {reasons}")


def _writers(remote: BareRemote, caches: list[Path], rounds: int) -> Counter[str]:
    """A writer per cache in `caches` (the same cache twice: two writers sharing it), each
    landing `rounds` commits; the reasons they met on the way."""
    reasons: Counter[str] = Counter()
    failures: list[BaseException] = []

    def run(writer: int) -> None:
        try:
            repo = GitRepository(remote.url, caches[writer])
            for n in range(rounds):
                _write_until_landed(repo, f"w{writer}/{n}", reasons)
        except BaseException as exc:  # surfaced in the test thread
            failures.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(caches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    return reasons


def test_two_writers_of_one_branch_in_one_cache_only_lose_races(
    tmp_path: Path, remote: BareRemote
) -> None:
    reasons = _writers(remote, [tmp_path / "cache"] * 2, rounds=15)
    assert set(reasons) <= {c.PUSH_REJECTED}, reasons
    files = set(remote.files())
    assert {f"w{w}/{n}" for w in range(2) for n in range(15)} <= files
    assert len(remote.log()) == 31  # one commit each on the seed, none overwritten
    assert "kubescribe" not in git("for-each-ref", cwd=remote.path)


def test_refs_deleted_on_the_remote_under_a_push_are_not_an_outage(
    tmp_path: Path, remote: BareRemote
) -> None:
    """A scratch ref created and deleted on the remote by another writer (as an older version
    did for every push), while two replicas (a cache each) fetch and push."""
    stop = threading.Event()

    def churn() -> None:
        other = pygit2.Repository(str(remote.path))
        tip = other.references["refs/heads/main"].target
        while not stop.is_set():
            for name in ("refs/kubescribe/incoming/main", "refs/heads/scratch"):
                # An older version of ours may hold or delete the same ref meanwhile.
                with contextlib.suppress(KeyError, OSError, pygit2.GitError):
                    other.references.create(name, tip, force=True)
                    other.references.delete(name)

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        reasons = _writers(remote, [tmp_path / "a", tmp_path / "b"], rounds=15)
    finally:
        stop.set()
        churner.join()
    assert set(reasons) <= {c.PUSH_REJECTED}, reasons
    assert {f"w{w}/{n}" for w in range(2) for n in range(15)} <= set(remote.files())


def test_lost_race_on_a_local_remote_is_push_rejected(tmp_path: Path, remote: BareRemote) -> None:
    """The compare-and-swap of a file:// push loses to a commit that landed after our fetch."""
    repo = GitRepository(remote.url, tmp_path / "cache")
    base = repo.fetch("main")
    assert base is not None
    tree = repo.repo[base].peel(pygit2.Tree).id
    ours = repo.repo.create_commit(None, _SIG, _SIG, "ours", tree, [base])
    theirs = remote.commit_foreign("x", "y\n", "theirs")
    with pytest.raises(PushRejected) as lost:
        repo.push("main", ours, base)
    assert lost.value.reason == c.PUSH_REJECTED
    assert remote.tip() == theirs


async def test_two_workers_of_one_branch_in_one_cache_never_report_unreachable(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    """An old writer finishing while a new one starts on the same branch (one cache)."""
    old, new = make(), make()
    names = [f"n{i}" for i in range(12)]
    for i, name in enumerate(names):
        (old if i % 2 else new).worker.submit(upsert(name))
    await until(
        lambda: old.worker.pending == 0 and new.worker.pending == 0,
        "both workers to push everything",
        timeout=120,
    )
    reported = {r.reason for r in old.reports + new.reports}
    assert c.REMOTE_UNREACHABLE not in reported
    assert {path_of(n) for n in names} <= set(remote.files())


def test_a_fetch_waits_for_the_shared_cache_only_so_long(
    tmp_path: Path, remote: BareRemote
) -> None:
    """Behind another writer's fetch that does not end, a fetch gives up with `CacheBusy`
    (retried soon) instead of waiting without bound; once it ends, fetches go on."""
    started, release = threading.Event(), threading.Event()

    def stalling() -> pygit2.RemoteCallbacks:
        callbacks = pygit2.RemoteCallbacks()

        def transfer_progress(_: object) -> None:
            started.set()
            release.wait(60)

        callbacks.transfer_progress = transfer_progress  # type: ignore[method-assign,assignment]
        return callbacks

    slow = GitRepository(remote.url, tmp_path / "cache", stalling)
    waiting = GitRepository(remote.url, tmp_path / "cache")
    waiting.turn_timeout = 0.2
    other = threading.Thread(target=slow.fetch, args=("main",))
    other.start()
    try:
        assert started.wait(30)
        with pytest.raises(CacheBusy) as busy:
            waiting.fetch("main")
        assert busy.value.reason == c.CACHE_BUSY
    finally:
        release.set()
        other.join()
    assert str(waiting.fetch("main")) == remote.tip()


def _recording(seen: list[int]) -> Callable[[], pygit2.RemoteCallbacks]:
    """Callbacks that record how many objects each fetch received."""

    def factory() -> pygit2.RemoteCallbacks:
        callbacks = pygit2.RemoteCallbacks()

        def transfer_progress(stats: pygit2.remotes.TransferProgress) -> None:
            seen.append(stats.received_objects)

        callbacks.transfer_progress = transfer_progress  # type: ignore[method-assign]
        return callbacks

    return factory


def test_a_writer_that_only_follows_a_branch_fetches_only_what_is_new(
    tmp_path: Path, remote: BareRemote
) -> None:
    """A replica that never pushed the branch (it follows another's pushes) is sent the new
    commit's objects, not the branch's history again; the tip still comes from the remote."""
    bare = pygit2.Repository(str(remote.path))
    tip = bare.references["refs/heads/main"].target
    for n in range(20):
        tree = edit_tree(
            bare, bare[tip].peel(pygit2.Tree).id, {f"f{n}": bare.create_blob(b"%d" % n)}
        )
        tip = bare.create_commit(None, _SIG, _SIG, f"c{n}", tree, [tip])
    bare.references["refs/heads/main"].set_target(tip)
    received: list[int] = []
    follower = GitRepository(remote.url, tmp_path / "cache", _recording(received))
    assert follower.fetch("main") == tip
    assert max(received) > 40  # the history: 21 commits, their trees and blobs
    received.clear()
    theirs = remote.commit_foreign("new.yaml", "x\n", "theirs")
    assert str(follower.fetch("main")) == theirs
    assert max(received) == 3  # the commit, its tree and the one new blob


def test_a_branch_gone_from_the_remote_is_gone_whatever_the_cache_says(
    tmp_path: Path, remote: BareRemote
) -> None:
    git("branch", "short-lived", "main", cwd=remote.path)
    repo = GitRepository(remote.url, tmp_path / "cache")
    assert str(repo.fetch("short-lived")) == remote.tip()
    git("branch", "-D", "short-lived", cwd=remote.path)
    assert repo.fetch("short-lived") is None
    assert "refs/remotes/origin/short-lived" not in repo.repo.references


def test_scratch_refs_left_in_a_cache_by_earlier_versions_are_swept(
    tmp_path: Path, remote: BareRemote
) -> None:
    """A process killed mid-push left its scratch refs in the cache; the next one removes
    them when it opens the cache and keeps the tracking refs."""
    first = GitRepository(remote.url, tmp_path / "cache")
    tip = first.fetch("main")
    assert tip is not None
    leftovers = ("refs/kubescribe/push/main", "refs/kubescribe/incoming/main")
    path = str(first.path)
    first.repo.free()
    cache = pygit2.Repository(path)
    for name in leftovers:
        cache.references.create(name, tip)
    cache.free()
    _SWEPT.discard(Path(path).absolute())  # as for a new process
    again = GitRepository(remote.url, tmp_path / "cache")
    assert not [r for r in again.repo.references if r.startswith("refs/kubescribe/")]
    assert again.repo.references["refs/remotes/origin/main"].target == tip
