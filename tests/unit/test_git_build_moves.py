"""A build for a target moved to another folder: what goes from the folder it left, and what
stays (other targets' folders, the new folder inside the old one, other types, other modes)."""

from __future__ import annotations

from pathlib import Path

import pygit2
import structlog

from kubescribe.git.build import Build
from kubescribe.git.buildcache import BuildCache
from kubescribe.git.chain import read_file
from kubescribe.git.tree import edit_tree
from kubescribe.mirror.changes import PruneMode, TargetKey
from kubescribe.mirror.identity import ResourceType
from kubescribe.mirror.yamlfmt import dump_yaml
from tests.builders import COMMITTER, TARGET, document, ident, path_of, snapshot, target

SECRETS = ResourceType("", "v1", "secrets", "Secret", True)
OTHER = TargetKey("team", "other")


def files(build: Build) -> set[str]:
    head = build.head
    assert head is not None
    out: set[str] = set()

    def walk(tree: pygit2.Tree, prefix: str) -> None:
        for entry in tree:
            if isinstance(entry, pygit2.Tree):
                walk(entry, f"{prefix}{entry.name}/")
            else:
                out.add(f"{prefix}{entry.name}")

    walk(build.repo[head].peel(pygit2.Tree), "")
    return out


def moved_build(tmp_path: Path, old: str, new: str, other: bool = True, **kw: object) -> Build:
    """A build whose base holds ConfigMaps a, b and Secret s under `old`, a ConfigMap of another
    target under `old/other`, and a README; the target now writes `new`."""
    repo = pygit2.init_repository(str(tmp_path / "store.git"), bare=True)
    blobs = {
        path_of("a", folder=old): document("a"),
        path_of("b", folder=old): document("b"),
        path_of("s", rtype=SECRETS, folder=old): document("s", rtype=SECRETS),
        path_of("o", folder=f"{old}/other"): document("o"),
    }
    edits = {p: repo.create_blob(dump_yaml(d).encode()) for p, d in blobs.items()}
    edits[f"{old}/README.md"] = repo.create_blob(b"hand written\n")
    tree = edit_tree(repo, None, edits)
    sig = pygit2.Signature("someone", "someone@example.invalid")
    base = repo.create_commit(None, sig, sig, "base", tree, [])
    targets = {TARGET: target(folder=new, moved_from=old, **kw)}  # type: ignore[arg-type]
    if other:
        targets[OTHER] = target(key=OTHER, folder=f"{old}/other")
    return Build(repo, BuildCache(), COMMITTER, structlog.get_logger(), base, targets)


def test_a_snapshot_after_a_move_takes_its_type_out_of_the_old_folder_in_one_commit(
    tmp_path: Path,
) -> None:
    build = moved_build(tmp_path, "old", "new")
    build.apply(snapshot({ident("a"): document("a")}))
    kept = files(build)
    assert path_of("a", folder="new") in kept
    assert path_of("a", folder="old") not in kept
    assert path_of("b", folder="old") not in kept  # gone from the cluster: not moved, removed
    assert path_of("s", rtype=SECRETS, folder="old") in kept  # another type: its own snapshot
    assert path_of("o", folder="old/other") in kept  # another target's folder
    assert "old/README.md" in kept  # no document
    assert build.head is not None
    head = build.repo[build.head]
    assert isinstance(head, pygit2.Commit)
    assert head.message.startswith("Snapshot configmaps in ns1: 1 added, 0 updated, 2 removed")
    assert build.commits == {"change": 0, "snapshot": 1}


def test_nothing_is_removed_under_on_event_or_when_the_new_folder_holds_the_old(
    tmp_path: Path,
) -> None:
    build = moved_build(tmp_path / "1", "old", "new", prune=PruneMode.ON_EVENT)
    build.apply(snapshot({ident("a"): document("a")}))
    assert path_of("a", folder="old") in files(build)
    outer = moved_build(tmp_path / "2", "old", "", other=False)  # to the root: edited in place
    outer.apply(snapshot({ident("a"): document("a", x="2")}))
    kept = files(outer)
    assert path_of("a", folder="old") in kept
    assert "ns1/core/configmaps/a.yaml" not in kept
    assert outer.head is not None
    edited = read_file(
        outer.repo, outer.repo[outer.head].peel(pygit2.Tree).id, path_of("a", folder="old")
    )
    assert edited is not None
    assert b"x: '2'" in edited
