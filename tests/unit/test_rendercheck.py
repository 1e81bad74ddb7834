"""The render check: which objects a batch changed, how `kustomize build`'s output is
compared with the live objects, and the trees kustomize is never given."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pygit2
import pytest

from kubescribe.api import conditions as c
from kubescribe.git.records import Failing, Group
from kubescribe.git.rendercheck import (
    BUILD_FAILED,
    NotBuilt,
    changed_objects,
    compare,
    kustomize_build,
    render_check,
)
from kubescribe.git.targets import KustomizeConfig
from kubescribe.git.tree import edit_tree
from kubescribe.mirror.identity import ResourceType
from kubescribe.mirror.kustomize import Tree
from kubescribe.mirror.window import CloseReason
from tests.builders import SECRETS, TARGET, delete, document, ident, snapshot, target
from tests.builders import upsert as change


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **kw: Any) -> None:
        self.events.append((event, kw))

    def info(self, event: str, **kw: Any) -> None:
        self.events.append((event, kw))


def plain(rtype: ResourceType) -> bool:
    return False


def test_the_last_change_of_each_object_is_checked_and_snapshots_are_not() -> None:
    first, later = change("a", x="1"), change("a", x="2")
    group = Group(TARGET, None, (change("b"),), CloseReason.SILENCE)
    found = changed_objects([first, snapshot({}), group, later])
    assert found == {TARGET: {ident("a"): later, ident("b"): group.changes[0]}}


def test_a_match_clears_an_earlier_mismatch_and_a_difference_is_one() -> None:
    same, other, gone = change("same", x="1"), change("other", x="1"), delete("gone")
    failing: Failing = {ident("same"): (c.RENDER_MISMATCH, "earlier")}
    rendered = {
        ident("same"): document("same", x="1"),
        ident("other"): document("other", x="2"),
        ident("gone"): document("gone"),
    }
    changed = {ch.identity: ch for ch in (same, other, gone)}
    compare(changed, rendered, failing, plain)
    assert failing == {
        ident("other"): (c.RENDER_MISMATCH, "kustomize build renders differently than live"),
        ident("gone"): (c.RENDER_MISMATCH, "kustomize build still renders than live"),
    }


def test_ciphertext_and_objects_failing_for_another_reason_are_not_compared() -> None:
    secret, refused = change("s", rtype=SECRETS), change("r")
    failing: Failing = {ident("r"): (c.PATH_CONFLICT, "taken")}
    changed = {ch.identity: ch for ch in (secret, refused)}
    compare(changed, {}, failing, lambda rtype: rtype == SECRETS)
    assert failing == {ident("r"): (c.PATH_CONFLICT, "taken")}


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "store.git"), bare=True)


def tree_of(repo: pygit2.Repository, files: dict[str, bytes]) -> pygit2.Oid:
    return edit_tree(repo, None, {p: repo.create_blob(d) for p, d in files.items()})


@pytest.mark.parametrize(
    ("kustomization", "why"),
    [
        (b"resources: [https://example.invalid/base]\n", "names a remote resource"),
        (b"resources: [../../elsewhere]\n", "names a resource outside the folder"),
    ],
)
def test_a_kustomization_kustomize_must_not_be_given_is_not_built(
    repo: pygit2.Repository, kustomization: bytes, why: str
) -> None:
    tree = tree_of(repo, {"f/k/kustomization.yaml": kustomization})
    with pytest.raises(NotBuilt, match=why):
        kustomize_build(repo, tree, "kustomize", "f", "f/k")


def test_a_build_that_fails_marks_one_object_and_the_rest_wait(
    repo: pygit2.Repository,
) -> None:
    files = {"f/kustomization.yaml": b"resources: [a.yaml]\n", "f/a.yaml": b"kind: ConfigMap\n"}
    tree = tree_of(repo, files)
    config = target(folder="f", kustomize=KustomizeConfig(render_check="/nonexistent/kustomize"))
    ktree = Tree.load("f", files.get, "f")
    failing: dict[Any, Failing] = {TARGET: {}}
    log = Log()
    render_check(
        repo, tree, {TARGET: config}, {TARGET: ktree}, failing, [change("b"), change("a")], log
    )
    assert failing[TARGET] == {ident("a"): (c.RENDER_MISMATCH, BUILD_FAILED)}
    [(event, fields)] = log.events
    assert event == "build.render_check_failed"
    assert fields["error"] == "no kustomize binary at /nonexistent/kustomize"


def test_targets_without_a_check_or_a_binary_are_left_alone(repo: pygit2.Repository) -> None:
    files = {"f/kustomization.yaml": b"resources: []\n"}
    ktree = Tree.load("f", files.get, "f")
    unavailable = KustomizeConfig(render_check_unavailable=True)
    for kz in (None, KustomizeConfig(), unavailable):
        config = target(folder="f", kustomize=kz)
        failing: dict[Any, Failing] = {TARGET: {}}
        render_check(
            repo,
            tree_of(repo, files),
            {TARGET: config},
            {TARGET: ktree},
            failing,
            [change("a")],
            Log(),
        )
        assert failing == {TARGET: {}}
