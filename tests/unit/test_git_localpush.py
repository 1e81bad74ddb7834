"""A file:// push sends exactly what the remote lacks, as one pack, and moves the branch only
by compare-and-swap; `git fsck` on the remote proves nothing is missing."""

from __future__ import annotations

from pathlib import Path

import pygit2

from kubescribe.git.localpush import compare_and_swap, missing_objects, send_objects
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
