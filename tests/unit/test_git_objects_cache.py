"""The in-memory pending objects of a build and the tidying of the object cache."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pygit2
import pytest
from pygit2.enums import FileMode

from kubescribe.git import repack as repack_module
from kubescribe.git.pending import PendingObjects
from kubescribe.git.repack import (
    PACK_LIMIT,
    TidyFailed,
    pack_count,
    packs_to_merge,
    repack,
    tidy,
)

SIG = pygit2.Signature("t", "t@example.invalid", 0, 0)


def files_under(repo: pygit2.Repository) -> list[Path]:
    return sorted(p for p in (Path(repo.path) / "objects").rglob("*") if p.is_file())


@pytest.fixture(params=["in process", "in a child"])
def where(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each tidy runs in the operator's process, or (as a large one does) in a child."""
    monkeypatch.setattr(repack_module, "CHILD_FROM", 10**9 if request.param == "in process" else 1)
    return str(request.param)


def fsck(repo: pygit2.Repository) -> None:
    done = subprocess.run(
        ["git", "fsck", "--full", "--strict", "--no-dangling"],
        cwd=repo.path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def commit_file(
    repo: pygit2.Repository, parent: pygit2.Oid | None, name: str, data: bytes
) -> pygit2.Oid:
    base = repo[parent].peel(pygit2.Tree) if parent is not None else None
    builder = repo.TreeBuilder(base) if base is not None else repo.TreeBuilder()
    sub = repo.TreeBuilder()
    sub.insert(name, repo.create_blob(data), FileMode.BLOB)
    builder.insert("dir", sub.write(), FileMode.TREE)
    return repo.create_commit(None, SIG, SIG, name, builder.write(), [parent] if parent else [])


def test_objects_stay_in_memory_until_flushed_as_one_pack(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "c.git"), bare=True)
    pending = PendingObjects(repo)
    tip = commit_file(repo, None, "a", b"one")
    tip = commit_file(repo, tip, "b", b"two")
    assert files_under(repo) == []  # nothing on disk yet
    assert len(pending) == 8  # per commit: a blob, two trees, the commit
    # Everything reads back through the repository while pending.
    commit = repo[tip]
    assert isinstance(commit, pygit2.Commit)
    assert commit.tree["dir/b"].data == b"two"
    assert repo.odb.read(commit.parents[0].id)[0] == pygit2.enums.ObjectType.COMMIT

    assert pending.flush() == 8
    assert len(pending) == 0
    assert pack_count(repo) == 1
    assert not [p for p in files_under(repo) if "pack" not in p.parts]
    repo.references.create("refs/heads/main", tip)
    fsck(repo)
    # An object already on disk is not written again.
    repo.create_blob(b"one")
    assert len(pending) == 0


def test_discard_drops_a_thrown_away_build(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "c.git"), bare=True)
    pending = PendingObjects(repo)
    blob = repo.create_blob(b"never pushed")
    pending.discard()
    assert blob not in repo.odb
    assert pending.flush() == 0
    assert pack_count(repo) == 0


def test_tidy_merges_small_packs_then_repacks_and_drops_garbage(tmp_path: Path, where: str) -> None:
    repo = pygit2.init_repository(str(tmp_path / "c.git"), bare=True)
    pending = PendingObjects(repo)
    tip = None
    for i in range(40):  # a large first pack, then one small pack per "batch"
        tip = commit_file(repo, tip, f"f{i}", b"x" * i)
        if i >= 30 or i == 29:
            pending.flush()
    garbage = repo.create_blob(b"from a build that was thrown away")
    pending.flush()
    assert tip is not None
    repo.references.create("refs/remotes/origin/main", tip)
    assert pack_count(repo) == 12

    merged = tidy(repo)
    assert merged.kind == "merge"
    assert merged.packs_removed == 11
    repo = pygit2.Repository(repo.path)
    assert pack_count(repo) == 2
    assert repo[garbage].read_raw() == b"from a build that was thrown away"  # a merge keeps all
    fsck(repo)

    loose = repo.create_blob(b"loose")  # no pending backend on this instance: a loose file
    assert any(len(p.parent.name) == 2 for p in files_under(repo))
    result = repack(repo)
    assert result.kind == "repack"
    assert result.loose_removed == 1
    repo = pygit2.Repository(repo.path)
    assert pack_count(repo) == 1
    assert garbage not in repo.odb
    assert loose not in repo.odb
    blob = repo[tip].peel(pygit2.Tree)["dir/f39"]
    assert isinstance(blob, pygit2.Blob)
    assert blob.data == b"x" * 39
    fsck(repo)


@pytest.mark.parametrize("garbage", [True, False])
def test_a_tidy_of_every_pack_repacks_only_when_there_may_be_garbage(
    tmp_path: Path, garbage: bool, where: str
) -> None:
    """Seven packs of about one size: the merge takes them all. With garbage possible (a
    failed push, an earlier process) the reachable objects are repacked and the rest dropped;
    without, the packs are copied into one (no walk of every commit's trees)."""
    repo = pygit2.init_repository(str(tmp_path / "c.git"), bare=True)
    pending = PendingObjects(repo)
    tip = None
    for i in range(6):
        tip = commit_file(repo, tip, f"f{i}", b"%d" % i)
        pending.flush()
    unreachable = repo.create_blob(b"from a push that failed, or one that did not")
    pending.flush()
    assert tip is not None
    repo.references.create("refs/heads/main", tip)
    result = tidy(repo, garbage=garbage)
    assert (result.kind, result.packs) == ("repack" if garbage else "merge", 1)
    repo = pygit2.Repository(repo.path)
    assert pack_count(repo) == 1
    assert (unreachable in repo.odb) is not garbage
    fsck(repo)


def test_a_tidy_that_fails_in_its_child_says_why_and_leaves_the_packs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(repack_module, "CHILD_FROM", 1)
    repo = pygit2.init_repository(str(tmp_path / "c.git"), bare=True)
    pending = PendingObjects(repo)
    tip = None
    for i in range(PACK_LIMIT):
        tip = commit_file(repo, tip, f"f{i}", b"%d" % i)
        pending.flush()
    assert tip is not None
    repo.references.create("refs/heads/main", tip)
    packs = sorted((Path(repo.path) / "objects" / "pack").glob("pack-*.pack"))
    packs[0].chmod(0o644)
    packs[0].write_bytes(packs[0].read_bytes()[:20])  # a pack cut short
    before = files_under(repo)
    with pytest.raises(TidyFailed, match=r"the tidy process failed: .+"):
        tidy(repo)
    assert files_under(repo) == before


def test_packs_to_merge_keeps_a_geometric_progression() -> None:
    assert packs_to_merge([]) == 0
    assert packs_to_merge([5]) == 0
    assert packs_to_merge([1, 3, 9, 27]) == 0  # each holds twice all smaller ones together
    assert packs_to_merge([1, 1, 10, 100]) == 2
    assert packs_to_merge([4, 4, 4, 120]) == 3
    assert packs_to_merge([1, 1, 3, 9, 27]) == 5  # the merge rolls up: everything


def test_a_long_run_rewrites_each_object_a_few_times_and_keeps_few_packs() -> None:
    """20,000 batches of 6 objects, tidied as the writer does (from 8 packs on)."""
    packs: list[int] = []
    written = rewritten = 0
    most = 0
    tidy_at = PACK_LIMIT
    for _ in range(20_000):
        packs.append(6)
        written += 6
        most = max(most, len(packs))
        if len(packs) < tidy_at:
            continue
        packs.sort()
        merge = packs_to_merge(packs)
        if merge:
            merged = sum(packs[:merge])
            rewritten += merged
            packs = [merged, *packs[merge:]]
        tidy_at = max(PACK_LIMIT, len(packs) + 1)
    assert most <= 12
    assert rewritten < 12 * written  # logarithmic: merging into one pack each time is quadratic


def test_a_tree_nested_thousands_deep_is_tidied(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "c.git"), bare=True)
    pending = PendingObjects(repo)
    tree = repo.TreeBuilder()
    tree.insert("a.yaml", repo.create_blob(b"deep"), FileMode.BLOB)
    oid = tree.write()
    for _ in range(3000):  # far past Python's recursion limit: a fetched tree can nest so
        parent = repo.TreeBuilder()
        parent.insert("d", oid, FileMode.TREE)
        oid = parent.write()
    tip = repo.create_commit(None, SIG, SIG, "deep", oid, [])
    garbage = repo.create_blob(b"from a build that was thrown away")
    pending.flush()
    repo.references.create("refs/remotes/origin/main", tip)

    assert repack(repo).kind == "repack"
    repo = pygit2.Repository(repo.path)
    assert garbage not in repo.odb
    blob = repo[tip].peel(pygit2.Tree)["/".join(["d"] * 3000 + ["a.yaml"])]
    assert isinstance(blob, pygit2.Blob)
    assert blob.data == b"deep"
    fsck(repo)
