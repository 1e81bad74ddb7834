"""A file:// push sends exactly what the remote lacks, as one pack, and moves the branch only
by compare-and-swap; the remote's packs are merged as they pile up; `git fsck` on the remote
proves nothing is missing."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import pygit2

from kubescribe.git.localpush import compare_and_swap, missing_objects, send_objects
from kubescribe.git.repack import PACK_LIMIT, merge_shared, pack_count
from kubescribe.git.tree import edit_tree
from kubescribe_devenv.gitremote import git

_SIG = pygit2.Signature("k", "k@example.invalid")


def _commit(
    repo: pygit2.Repository, parent: pygit2.Oid | None, files: dict[str, bytes | None]
) -> pygit2.Oid:
    base = repo[parent].peel(pygit2.Tree).id if parent else repo.TreeBuilder().write()
    edits = {p: (repo.create_blob(d) if d is not None else None) for p, d in files.items()}
    tree = edit_tree(repo, base, edits)
    return repo.create_commit(None, _SIG, _SIG, "m", tree, [parent] if parent else [])


def _pair(tmp_path: Path) -> tuple[pygit2.Repository, pygit2.Repository]:
    source = pygit2.init_repository(str(tmp_path / "cache.git"), bare=True)
    target = pygit2.init_repository(str(tmp_path / "remote.git"), bare=True)
    return source, target


def _fsck(target: pygit2.Repository, tip: pygit2.Oid) -> None:
    target.references.create("refs/heads/main", tip, force=True)
    git("fsck", "--strict", "--no-dangling", cwd=Path(target.path))


def test_sends_only_what_changed_since_a_commit_the_remote_holds(tmp_path: Path) -> None:
    source, target = _pair(tmp_path)
    base = _commit(
        source,
        None,
        {"a/b/keep.yaml": b"keep", "a/b/edit.yaml": b"v1", "gone/x.yaml": b"x", "top": b"t"},
    )
    send_objects(source, target, base)
    _fsck(target, base)
    one = _commit(source, base, {"a/b/edit.yaml": b"v2", "gone/x.yaml": None})
    two = _commit(source, one, {"new/deep/er/n.yaml": b"n"})
    missing = set(missing_objects(source, target, two))
    assert source.create_blob(b"keep") not in missing
    assert source.create_blob(b"t") not in missing
    assert {one, two, source.create_blob(b"v2"), source.create_blob(b"n")} <= missing
    assert send_objects(source, target, two) == len(missing)
    _fsck(target, two)
    assert missing_objects(source, target, two) == []  # nothing twice


def test_an_orphan_root_sends_its_whole_tree(tmp_path: Path) -> None:
    source, target = _pair(tmp_path)
    root = _commit(source, None, {"x/y/z.yaml": b"z", "w.yaml": b"w"})
    assert send_objects(source, target, root) == 6  # commit, 3 trees, 2 blobs
    _fsck(target, root)


def test_a_blob_the_remote_holds_elsewhere_is_not_sent(tmp_path: Path) -> None:
    source, target = _pair(tmp_path)
    base = _commit(source, None, {"a.yaml": b"same"})
    send_objects(source, target, base)
    moved = _commit(source, base, {"b/a.yaml": b"same"})
    assert source.create_blob(b"same") not in missing_objects(source, target, moved)
    send_objects(source, target, moved)
    _fsck(target, moved)


def test_compare_and_swap_moves_only_from_the_expected_tip(tmp_path: Path) -> None:
    source, target = _pair(tmp_path)
    base = _commit(source, None, {"a": b"1"})
    ours = _commit(source, base, {"a": b"2"})
    theirs = _commit(source, base, {"a": b"3"})
    for tip in (ours, theirs):
        send_objects(source, target, tip)
    assert compare_and_swap(target, "main", base, None) is None  # created
    assert compare_and_swap(target, "main", theirs, base) is None
    assert compare_and_swap(target, "main", ours, base) == "main moved on the remote"
    assert compare_and_swap(target, "new", ours, base) == "new was deleted on the remote"
    assert target.references["refs/heads/main"].target == theirs


def _pushed(source: pygit2.Repository, target: pygit2.Repository, tip: pygit2.Oid) -> None:
    """What a push to a file:// remote does: the objects as one pack, then the branch."""
    send_objects(source, target, tip)
    ref = target.references.get("refs/heads/main")
    expected = ref.peel(pygit2.Commit).id if ref else None
    assert compare_and_swap(target, "main", tip, expected) is None


def _piled_up(tmp_path: Path) -> pygit2.Repository:
    """A remote that got more pushes (so packs) than merges start from, none merged."""
    source, target = _pair(tmp_path)
    tip = None
    for i in range(PACK_LIMIT + 2):
        tip = _commit(source, tip, {"a": b"%d" % i})
        _pushed(source, target, tip)
    return target


def test_pushes_to_a_local_remote_keep_its_packs_few(tmp_path: Path) -> None:
    source, target = _pair(tmp_path)
    tip = None
    for i in range(40):
        tip = _commit(source, tip, {f"d{i % 7}/f{i}.yaml": b"v%d" % i, "top": b"t%d" % i})
        _pushed(source, target, tip)
        merge_shared(target)
        assert pack_count(target) <= PACK_LIMIT + 1
    assert tip is not None
    git("fsck", "--strict", "--no-dangling", cwd=Path(target.path))
    assert git("rev-list", "--count", "main", cwd=Path(target.path)).strip() == "40"
    files = git("ls-tree", "-r", "--name-only", "main", cwd=Path(target.path)).split()
    assert len(files) == 41


def test_a_merge_keeps_what_no_reference_reaches_and_the_packs_git_manages(
    tmp_path: Path,
) -> None:
    source, target = _pair(tmp_path)
    tip = _commit(source, None, {"a": b"0"})
    _pushed(source, target, tip)
    kept = next((Path(target.path) / "objects" / "pack").glob("pack-*.idx"))
    kept.with_suffix(".keep").write_text("a pack Git keeps\n")
    # another writer's push under way: its objects are there, its branch not yet
    pending = _commit(source, tip, {"pending": b"under way"})
    send_objects(source, target, pending)
    for i in range(PACK_LIMIT + 1):
        tip = _commit(source, tip, {"a": b"%d" % (i + 1)})
        _pushed(source, target, tip)
    result = merge_shared(target)
    assert result is not None
    assert result.packs_removed >= 2
    target = pygit2.Repository(target.path)  # afresh: the instance maps removed packs
    assert pending in target
    assert source.create_blob(b"under way") in target
    assert kept.exists()
    assert kept.with_suffix(".pack").exists()
    git("fsck", "--strict", cwd=Path(target.path))


def test_a_merge_under_way_elsewhere_is_left_to_it(tmp_path: Path) -> None:
    target = _piled_up(tmp_path)
    packs = pack_count(target)
    fd = os.open(Path(target.path) / "objects" / "pack", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another writer's merge
        assert merge_shared(target) is None
        assert pack_count(target) == packs
    finally:
        os.close(fd)
    assert merge_shared(target) is not None
    assert pack_count(target) < packs


def test_a_file_that_is_no_pack_index_is_left_alone(tmp_path: Path) -> None:
    target = _piled_up(tmp_path)
    # claims one object, holds a megabyte: never read whole into memory, never removed
    bogus = Path(target.path) / "objects" / "pack" / ("pack-" + "0" * 40 + ".idx")
    bogus.write_bytes(b"\xfftOc\0\0\0\2" + (1).to_bytes(4, "big") * 256 + b"x" * (1 << 20))
    result = merge_shared(target)
    assert result is not None
    assert bogus.exists()
    git("fsck", "--strict", cwd=Path(target.path))
