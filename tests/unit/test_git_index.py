"""TargetIndex: which document lives where, found by the identity its file holds."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest

from kubescribe.git import index as index_module
from kubescribe.git.index import TargetIndex, identify
from kubescribe.git.tree import edit_tree
from kubescribe.mirror.identity import Identity
from kubescribe.mirror.yamlfmt import dump_yaml, order_document


def doc(name: str, namespace: str = "ns", kind: str = "ConfigMap", api: str = "v1") -> bytes:
    meta = {"name": name, "namespace": namespace} if namespace else {"name": name}
    return dump_yaml(order_document({"apiVersion": api, "kind": kind, "metadata": meta})).encode()


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "store.git"), bare=True)


def tree(repo: pygit2.Repository, content: dict[str, bytes]) -> pygit2.Oid:
    return edit_tree(repo, None, {p: repo.create_blob(data) for p, data in content.items()})


def test_identify_fast_path_and_parse_fallback() -> None:
    cm = Identity("", "ConfigMap", "ns", "a")
    assert identify(doc("a")) == cm
    assert identify(doc("r", "", "ClusterRole", "rbac.authorization.k8s.io/v1")) == Identity(
        "rbac.authorization.k8s.io", "ClusterRole", "", "r"
    )
    # Written by hand: other key order, comments, quoting.
    hand = b"# mine\nkind: ConfigMap\nmetadata:\n  namespace: ns\n  name: 'a'\napiVersion: v1\n"
    assert identify(hand) == cm
    # A trailing comment on the name line is not part of the name.
    commented = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a # note\n  namespace: ns\n"
    assert identify(commented) == cm


def test_identify_leaves_other_files_alone() -> None:
    assert identify(b"resources:\n- a.yaml\n") is None  # kustomization
    assert identify(b"::: not yaml [") is None
    assert identify(b"\xff\xfe") is None
    multi = doc("a") + b"---\n" + doc("b")
    assert identify(multi) is None
    assert identify(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n") is None


def test_sops_header_is_plaintext() -> None:
    sops = (
        doc("s", kind="Secret") + b"data:\n  k: ENC[AES256_GCM,data:x]\nsops:\n  version: 3.11.0\n"
    )
    assert identify(sops) == Identity("", "Secret", "ns", "s")


def test_build_indexes_only_the_folder_and_yaml_files(repo: pygit2.Repository) -> None:
    root = tree(
        repo,
        {
            "clusters/a/ns/core/configmaps/a.yaml": doc("a"),
            "clusters/a/custom/place.yaml": doc("b"),
            "clusters/a/README.md": doc("c"),
            "clusters/a/kustomization.yaml": b"resources: []\n",
            "clusters/b/x.yaml": doc("x"),
        },
    )
    index = TargetIndex.build(repo, root, "clusters/a")
    assert len(index) == 2
    entry = index.get(Identity("", "ConfigMap", "ns", "b"))
    assert entry is not None
    assert entry.path == "clusters/a/custom/place.yaml"
    assert Identity("", "ConfigMap", "ns", "x") not in index
    # Someone else's file blocks its path; a document's own path does not block it.
    assert index.blocked("clusters/a/kustomization.yaml", Identity("", "ConfigMap", "ns", "k"))
    assert not index.blocked("clusters/a/custom/place.yaml", Identity("", "ConfigMap", "ns", "b"))
    assert index.blocked("clusters/a/custom/place.yaml", Identity("", "ConfigMap", "ns", "a"))


def test_missing_folder_and_root_folder(repo: pygit2.Repository) -> None:
    root = tree(repo, {"a.yaml": doc("a"), "d/b.yaml": doc("b")})
    assert len(TargetIndex.build(repo, root, "nope")) == 0
    assert len(TargetIndex.build(repo, None, "")) == 0
    assert len(TargetIndex.build(repo, root, "")) == 2


def test_duplicates_keep_the_first_in_tree_order(repo: pygit2.Repository) -> None:
    root = tree(repo, {"a/copy.yaml": doc("a"), "b/orig.yaml": doc("a")})
    index = TargetIndex.build(repo, root, "")
    entry = index.get(Identity("", "ConfigMap", "ns", "a"))
    assert entry is not None
    assert entry.path == "a/copy.yaml"
    assert index.duplicates == ["b/orig.yaml"]


def test_rebuild_reads_only_new_blobs(
    repo: pygit2.Repository, monkeypatch: pytest.MonkeyPatch
) -> None:
    content = {f"ns/cm-{i}.yaml": doc(f"cm-{i}") for i in range(50)}
    first = TargetIndex.build(repo, tree(repo, content), "")
    read: list[bytes] = []

    def counting(data: bytes) -> Identity | None:
        read.append(data)
        return identify(data)

    monkeypatch.setattr(index_module, "identify", counting)
    content["ns/new.yaml"] = doc("new")
    second = TargetIndex.build(repo, tree(repo, content), "", previous=first)
    assert len(second) == 51
    assert read == [doc("new")]


def test_copy_is_independent(repo: pygit2.Repository) -> None:
    index = TargetIndex.build(repo, tree(repo, {"a.yaml": doc("a")}), "")
    copy = index.copy()
    copy.remove(Identity("", "ConfigMap", "ns", "a"))
    assert len(copy) == 0
    assert len(index) == 1


def deep_tree(repo: pygit2.Repository, depth: int, leaf: dict[str, bytes]) -> pygit2.Oid:
    """A root tree whose `target` folder nests `depth` folders above the files of `leaf`."""
    builder = repo.TreeBuilder()
    for name, data in leaf.items():
        builder.insert(name, repo.create_blob(data), pygit2.enums.FileMode.BLOB)
    tree = builder.write()
    for _ in range(depth):
        parent = repo.TreeBuilder()
        parent.insert("d", tree, pygit2.enums.FileMode.TREE)
        tree = parent.write()
    root = repo.TreeBuilder()
    root.insert("target", tree, pygit2.enums.FileMode.TREE)
    return root.write()


def test_a_folder_nested_thousands_deep_is_indexed_not_a_recursion_error(
    repo: pygit2.Repository,
) -> None:
    depth = 3000  # far past Python's recursion limit: anyone who can push can make one
    index = TargetIndex.build(repo, deep_tree(repo, depth, {"a.yaml": doc("a")}), "target")
    path = "target/" + "d/" * depth + "a.yaml"
    entry = index.get(Identity("", "ConfigMap", "ns", "a"))
    assert entry is not None
    assert entry.path == path
