"""The commit chain of a build: commits on the remote tip in memory, authors and trailers,
and a plan staged into a tree with the writes Git refuses taken out."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from kubescribe.git.chain import AUTHOR_SOURCE_TRAILER, CommitChain, read_file
from kubescribe.git.index import Entry, TargetIndex
from kubescribe.git.plan import Plan
from kubescribe.git.records import Refusal
from kubescribe.git.tree import edit_tree
from kubescribe.mirror.authors import Author
from kubescribe.mirror.kustomize import Tree
from tests.builders import COMMITTER, ident


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "store.git"), bare=True)


def commit(repo: pygit2.Repository, files: dict[str, bytes]) -> pygit2.Oid:
    tree = edit_tree(repo, None, {p: repo.create_blob(d) for p, d in files.items()})
    sig = pygit2.Signature("someone", "someone@example.invalid")
    return repo.create_commit(None, sig, sig, "base", tree, [])


def test_commits_chain_on_the_base_with_the_committer_or_the_author(
    repo: pygit2.Repository,
) -> None:
    base = commit(repo, {"a.yaml": b"a: 1\n"})
    chain = CommitChain(repo, COMMITTER, base)
    assert chain.file("a.yaml") == b"a: 1\n"
    tree = edit_tree(repo, chain.tree, {"b.yaml": chain.blob(b"b: 1\n")})
    first = repo[chain.commit(tree, "Snapshot", None)]
    assert isinstance(first, pygit2.Commit)
    assert first.parent_ids == [base]
    assert (first.author.name, first.committer.name) == ("kubescribe", "kubescribe")
    author = Author("jane <admin>", "jane@example.invalid", source="audit")
    second = repo[chain.commit(tree, "Update ConfigMap", author)]
    assert isinstance(second, pygit2.Commit)
    assert second.parent_ids == [first.id]
    assert (second.author.name, second.committer.name) == ("jane  admin", "kubescribe")
    assert second.message == f"Update ConfigMap\n\n{AUTHOR_SOURCE_TRAILER}: audit\n"
    assert chain.base_tree != chain.tree
    assert read_file(repo, chain.tree, "b.yaml") == b"b: 1\n"


def test_a_plan_that_changes_nothing_stages_no_tree(repo: pygit2.Repository) -> None:
    chain = CommitChain(repo, COMMITTER, None)
    plan = Plan(TargetIndex("f"))
    assert chain.stage(plan, lambda r: None) is None


def test_a_write_over_a_folder_is_refused_and_the_rest_staged(
    repo: pygit2.Repository,
) -> None:
    base = commit(repo, {"f/a/keep.txt": b"someone's\n"})
    chain = CommitChain(repo, COMMITTER, base)
    plan = Plan(TargetIndex("f"))
    a, b = ident("a"), ident("b")
    plan.write(a, Entry("f/a", chain.blob(b"a\n")))
    plan.write(b, Entry("f/b.yaml", chain.blob(b"b\n")))
    refused: list[Refusal] = []
    tree = chain.stage(plan, refused.append)
    assert [(r.identity, r.reason) for r in refused] == [(a, "PathConflict")]
    assert read_file(repo, tree, "f/b.yaml") == b"b\n"
    assert read_file(repo, tree, "f/a/keep.txt") == b"someone's\n"


def test_a_name_git_will_not_store_is_refused_on_its_own(repo: pygit2.Repository) -> None:
    chain = CommitChain(repo, COMMITTER, None)
    plan = Plan(TargetIndex("f"))
    bad, good = ident("bad"), ident("good")
    plan.write(bad, Entry("f/.git/x.yaml", chain.blob(b"x\n")))
    plan.write(good, Entry("f/good.yaml", chain.blob(b"g\n")))
    refused: list[Refusal] = []
    tree = chain.stage(plan, refused.append)
    assert [(r.identity, r.reason) for r in refused] == [(bad, "InvalidPath")]
    assert read_file(repo, tree, "f/good.yaml") == b"g\n"


def test_the_kustomizations_a_plan_edits_are_written_with_it(repo: pygit2.Repository) -> None:
    chain = CommitChain(repo, COMMITTER, None)
    tree = Tree.load("k", {"k/kustomization.yaml": b"resources: [a.yaml]\n"}.get, "k")
    assert tree is not None
    plan = Plan(TargetIndex("k"))
    plan.kustomizations.add(tree.add_file("k/b.yaml", tree.root))
    chain.write_kustomizations(tree, plan)
    staged = chain.stage(plan, lambda r: None)
    assert read_file(repo, staged, "k/kustomization.yaml") == b"resources: [a.yaml, b.yaml]\n"
