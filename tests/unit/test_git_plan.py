"""A commit's plan: edits checked against the target's index, applied only when told."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from kubescribe.git.index import Entry, TargetIndex
from kubescribe.git.plan import Plan
from kubescribe.git.tree import edit_tree
from tests.builders import ident

A = ident("a")
B = ident("b")
CM_A = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ns1}\n"


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "store.git"), bare=True)


def indexed(repo: pygit2.Repository, files: dict[str, bytes]) -> TargetIndex:
    tree = edit_tree(repo, None, {p: repo.create_blob(d) for p, d in files.items()})
    return TargetIndex.build(repo, tree, "f")


def test_a_path_held_by_another_file_is_not_free_unless_this_commit_deletes_it(
    repo: pygit2.Repository,
) -> None:
    index = indexed(repo, {"f/a.yaml": CM_A, "f/notes.yaml": b"just: notes\n"})
    plan = Plan(index)
    assert plan.free("f/a.yaml", A)
    assert not plan.free("f/a.yaml", B)
    assert not plan.free("f/notes.yaml", B)
    entry = index.get(A)
    assert entry is not None
    plan.delete(A, entry)
    assert plan.free("f/a.yaml", B)
    plan.write(B, Entry("f/a.yaml", pygit2.hash(b"b")))
    assert not plan.free("f/a.yaml", A)  # taken by this commit's write


def test_edits_delete_move_and_write_and_apply_updates_the_index(
    repo: pygit2.Repository,
) -> None:
    index = indexed(repo, {"f/a.yaml": CM_A})
    plan = Plan(index)
    moved = Entry("f/a.sops.yaml", pygit2.hash(b"ciphertext"))
    plan.write(A, moved)
    plan.multi["f/all.yaml"] = None
    assert plan.edits() == {"f/a.yaml": None, "f/a.sops.yaml": moved.oid, "f/all.yaml": None}
    assert plan.path_of(A) == "f/a.sops.yaml"
    assert index.get(A) != moved  # not before apply
    plan.apply()
    assert index.get(A) == moved


def test_a_dropped_write_leaves_the_plan(repo: pygit2.Repository) -> None:
    plan = Plan(indexed(repo, {}))
    plan.write(B, Entry("f/b.yaml", pygit2.hash(b"b")))
    assert plan.drop("f/b.yaml") == B
    assert plan.edits() == {}


def test_a_change_that_edits_a_kustomization_names_it(repo: pygit2.Repository) -> None:
    plan = Plan(indexed(repo, {}))
    plan.paths[B] = "f/kustomization.yaml"
    assert plan.path_of(B) == "f/kustomization.yaml"
