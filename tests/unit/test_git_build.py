"""A build on its own (no remote): each change a commit of its own, a closed window one
commit of its changes, and what the build reports per target."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest
import structlog

from kubescribe.api import conditions as c
from kubescribe.git.build import Build
from kubescribe.git.buildcache import BuildCache
from kubescribe.git.chain import read_file
from kubescribe.git.records import Group
from kubescribe.git.tree import edit_tree
from kubescribe.mirror.authors import Author
from kubescribe.mirror.window import CloseReason
from tests.builders import COMMITTER, TARGET, delete, ident, path_of, snapshot, target, upsert

JANE = Author("jane", "jane@example.invalid")


@pytest.fixture
def build(tmp_path: Path) -> Build:
    repo = pygit2.init_repository(str(tmp_path / "store.git"), bare=True)
    return Build(repo, BuildCache(), COMMITTER, structlog.get_logger(), None, {TARGET: target()})


def messages(build: Build) -> list[str]:
    return [commit.message.rstrip("\n") for commit in log_of(build)]


def log_of(build: Build) -> list[pygit2.Commit]:
    commits: list[pygit2.Commit] = []
    oid = build.head
    while oid is not None:
        commit = build.repo[oid]
        assert isinstance(commit, pygit2.Commit)
        commits.append(commit)
        oid = commit.parent_ids[0] if commit.parent_ids else None
    return commits[::-1]


def test_each_change_is_a_commit_and_one_that_changes_nothing_is_none(build: Build) -> None:
    build.apply(upsert("a", x="1"))
    build.apply(upsert("a", x="1"))
    build.apply(delete("a"))
    assert messages(build) == ["CREATE ConfigMap ns1/a", "DELETE ConfigMap ns1/a"]
    assert build.commits == {"change": 2, "snapshot": 0}
    result = build.outcome(pushed=False).targets[TARGET]
    assert (result.commit, result.documents) == (str(build.head), 0)


def test_a_closed_window_is_one_commit_by_its_author(build: Build) -> None:
    build.apply(upsert("a", x="1"))
    window = (upsert("a", x="2"), upsert("a", x="2"), upsert("b", x="1"))
    build.apply(Group(TARGET, JANE, window, CloseReason.SILENCE))
    *_, last = log_of(build)
    assert last.author.name == "jane"
    assert last.message.splitlines()[0] == "2 changes: 2 created (ConfigMap)"
    assert read_file(build.repo, last.tree_id, path_of("b")) is not None
    assert build.written[-2:] == [window[0], window[2]]  # the one that changed nothing is not


def test_a_snapshot_is_one_commit_and_the_result_counts_documents(build: Build) -> None:
    docs = {ident(n): upsert(n).document for n in ("a", "b")}
    build.apply(snapshot({i: d for i, d in docs.items() if d is not None}))
    [commit] = log_of(build)
    assert commit.message.rstrip() == "Snapshot configmaps in ns1: 2 added, 0 updated, 0 removed"
    assert commit.author.name == COMMITTER.name
    assert build.outcome(pushed=False).targets[TARGET].documents == 2


def test_a_refused_document_is_reported_and_the_window_still_commits(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "store.git"), bare=True)
    taken = edit_tree(repo, None, {f"{path_of('b')}/x": repo.create_blob(b"someone's\n")})
    sig = pygit2.Signature("someone", "someone@example.invalid")
    base = repo.create_commit(None, sig, sig, "base", taken, [])
    build = Build(repo, BuildCache(), COMMITTER, structlog.get_logger(), base, {TARGET: target()})
    build.apply(Group(TARGET, None, (upsert("b"), upsert("a")), CloseReason.SILENCE))
    assert messages(build) == ["base", "CREATE ConfigMap ns1/a"]
    result = build.outcome(pushed=False).targets[TARGET]
    [refusal] = result.refused
    assert (refusal.identity, refusal.reason) == (ident("b"), c.PATH_CONFLICT)
    assert result.failing == [refusal]
