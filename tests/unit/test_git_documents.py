"""A document's file: placed at its layout path when new, kept where it is otherwise (renamed
when it turns encrypted), a person's formatting kept, documents of a multi-document file
edited in place, and paths Git or another file holds refused."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pygit2
import pytest
import structlog

from kubescribe.api import conditions as c
from kubescribe.git.chain import CommitChain
from kubescribe.git.documents import DocumentFiles
from kubescribe.git.index import TargetIndex
from kubescribe.git.plan import Plan
from kubescribe.git.records import Failing, Refusal
from kubescribe.git.targets import PlainRenderer
from kubescribe.git.tree import edit_tree
from kubescribe.mirror.identity import Identity, ResourceType
from tests.builders import COMMITTER, CONFIGMAPS, document, ident, path_of, target

KEPT = b"""\
# kept by hand
apiVersion: v1
kind: ConfigMap
metadata:
  name: a
  namespace: ns1
data:
  x: '1'   # the value
"""
BOTH = b"""\
apiVersion: v1
kind: ConfigMap
metadata: {name: a, namespace: ns1}
data: {x: '1'}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: b, namespace: ns1}
data: {x: '1'}
"""


class Sealed(PlainRenderer):
    """Every ConfigMap "encrypted" (a marker), to see files move between kinds."""

    def encrypted(self, rtype: ResourceType) -> bool:
        return True

    def render(
        self, identity: Identity, rtype: ResourceType, doc: Mapping[str, Any], old: bytes | None
    ) -> bytes:
        return b"sealed: " + super().render(identity, rtype, doc, old)


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "store.git"), bare=True)


def setup(
    repo: pygit2.Repository, files: dict[str, bytes], renderer: Any = None
) -> tuple[DocumentFiles, Plan, list[Refusal], Failing]:
    tree = edit_tree(repo, None, {p: repo.create_blob(d) for p, d in files.items()})
    sig = pygit2.Signature("someone", "someone@example.invalid")
    chain = CommitChain(repo, COMMITTER, repo.create_commit(None, sig, sig, "base", tree, []))
    config = target(renderer=renderer)
    refused: list[Refusal] = []
    failing: Failing = {ident("a"): (c.RENDER_FAILED, "earlier")}
    files_of = DocumentFiles(chain, config, refused.append, failing, structlog.get_logger())
    return files_of, Plan(TargetIndex.build(repo, tree, config.folder)), refused, failing


def blob(repo: pygit2.Repository, oid: pygit2.Oid) -> bytes:
    obj = repo[oid]
    assert isinstance(obj, pygit2.Blob)
    return obj.data


def test_a_new_document_goes_to_its_layout_path(repo: pygit2.Repository) -> None:
    docs, plan, refused, failing = setup(repo, {})
    path = docs.write(plan, ident("a"), CONFIGMAPS, document("a", x="1"), "clusters/dev")
    assert path == path_of("a")
    assert plan.writes[ident("a")].rendered
    assert (refused, failing) == ([], {})


def test_a_kept_file_keeps_its_comments_and_an_unchanged_one_is_not_written(
    repo: pygit2.Repository,
) -> None:
    docs, plan, _, _ = setup(repo, {path_of("a"): KEPT})
    assert docs.write(plan, ident("a"), CONFIGMAPS, document("a", x="1"), "") == path_of("a")
    assert plan.writes == {}
    docs.write(plan, ident("a"), CONFIGMAPS, document("a", x="2"), "")
    written = blob(repo, plan.writes[ident("a")].oid)
    assert written.startswith(b"# kept by hand\n")
    assert b"x: '2'   # the value" in written


def test_a_document_that_turns_encrypted_moves_to_a_sops_file(repo: pygit2.Repository) -> None:
    docs, plan, _, _ = setup(repo, {path_of("a"): KEPT}, Sealed())
    path = docs.write(plan, ident("a"), CONFIGMAPS, document("a", x="1"), "")
    assert path == path_of("a").removesuffix(".yaml") + ".sops.yaml"
    assert plan.edits()[path_of("a")] is None


def test_documents_of_a_multi_document_file_are_edited_and_removed_in_place(
    repo: pygit2.Repository,
) -> None:
    shared = "clusters/dev/all.yaml"
    docs, plan, _, _ = setup(repo, {shared: BOTH})
    assert docs.write(plan, ident("b"), CONFIGMAPS, document("b", x="2"), "") == shared
    assert b"name: b, namespace: ns1}\ndata: {x: '2'}" in (plan.multi[shared] or b"")
    entry = plan.index.get(ident("a"))
    assert entry is not None
    assert not docs.remove(plan, ident("a"), entry)  # b is still in it
    assert b"name: a" not in (plan.multi[shared] or b"")


def test_paths_git_or_another_file_holds_are_refused(repo: pygit2.Repository) -> None:
    docs, plan, refused, failing = setup(repo, {path_of("a"): b"notes: not an object\n"})
    assert docs.write(plan, ident("a"), CONFIGMAPS, document("a"), "clusters/dev") is None
    hidden = ident("b")
    assert docs.write(plan, hidden, CONFIGMAPS, document("b"), "x/.git") is None
    assert [(r.identity, r.reason) for r in refused] == [
        (ident("a"), c.PATH_CONFLICT),
        (hidden, c.INVALID_PATH),
    ]
    assert failing == {ident("a"): (c.RENDER_FAILED, "earlier")}  # the caller records them
