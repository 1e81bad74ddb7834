"""edit_tree: path edits on an in-memory tree, touching only what changed."""

from __future__ import annotations

from pathlib import Path

import pygit2
import pytest
from pygit2.enums import FileMode

from kubescribe.git.tree import TreeConflict, edit_tree


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "store.git"), bare=True)


def files(repo: pygit2.Repository, tree_id: pygit2.Oid) -> dict[str, bytes]:
    """Every file in the tree: path -> content."""
    out: dict[str, bytes] = {}

    def walk(tree: pygit2.Object, prefix: str) -> None:
        assert isinstance(tree, pygit2.Tree)
        for entry in tree:
            obj = repo[entry.id]
            if isinstance(obj, pygit2.Tree):
                walk(obj, f"{prefix}{entry.name}/")
            else:
                assert isinstance(obj, pygit2.Blob)
                out[f"{prefix}{entry.name}"] = obj.data

    walk(repo[tree_id], "")
    return out


def blob(repo: pygit2.Repository, text: str) -> pygit2.Oid:
    return repo.create_blob(text.encode())


def test_builds_nested_tree_from_nothing(repo: pygit2.Repository) -> None:
    tree = edit_tree(
        repo,
        None,
        {"a.yaml": blob(repo, "a"), "x/y/z.yaml": blob(repo, "z"), "x/b.yaml": blob(repo, "b")},
    )
    assert files(repo, tree) == {"a.yaml": b"a", "x/y/z.yaml": b"z", "x/b.yaml": b"b"}


def test_empty_edits_on_nothing_give_the_empty_tree(repo: pygit2.Repository) -> None:
    tree = edit_tree(repo, None, {})
    assert len(repo[tree]) == 0  # type: ignore[arg-type]
    assert edit_tree(repo, None, {"gone.yaml": None}) == tree


def test_replaces_and_keeps_untouched_subtrees(repo: pygit2.Repository) -> None:
    base = edit_tree(repo, None, {"ns1/a.yaml": blob(repo, "1"), "ns2/b.yaml": blob(repo, "2")})
    new = edit_tree(repo, base, {"ns1/a.yaml": blob(repo, "1b")})
    assert files(repo, new) == {"ns1/a.yaml": b"1b", "ns2/b.yaml": b"2"}
    old_tree, new_tree = repo[base], repo[new]
    assert isinstance(old_tree, pygit2.Tree)
    assert isinstance(new_tree, pygit2.Tree)
    assert old_tree["ns2"].id == new_tree["ns2"].id  # reused, not rewritten
    assert old_tree["ns1"].id != new_tree["ns1"].id


def test_identical_edit_returns_the_same_tree(repo: pygit2.Repository) -> None:
    a = blob(repo, "a")
    base = edit_tree(repo, None, {"d/a.yaml": a})
    assert edit_tree(repo, base, {"d/a.yaml": a}) == base
    assert edit_tree(repo, base, {"d/missing.yaml": None, "nope/x.yaml": None}) == base


def test_delete_removes_directories_that_become_empty(repo: pygit2.Repository) -> None:
    base = edit_tree(
        repo,
        None,
        {
            "ns/core/configmaps/a.yaml": blob(repo, "a"),
            "ns/apps/deployments/d.yaml": blob(repo, "d"),
        },
    )
    new = edit_tree(repo, base, {"ns/core/configmaps/a.yaml": None})
    assert files(repo, new) == {"ns/apps/deployments/d.yaml": b"d"}
    tree = repo[new]
    assert isinstance(tree, pygit2.Tree)
    ns = repo[tree["ns"].id]
    assert isinstance(ns, pygit2.Tree)
    assert [e.name for e in ns] == ["apps"]
    # Deleting the last file leaves the empty root tree.
    empty = edit_tree(repo, new, {"ns/apps/deployments/d.yaml": None})
    assert files(repo, empty) == {}


def test_delete_and_add_in_one_edit(repo: pygit2.Repository) -> None:
    base = edit_tree(repo, None, {"a/x.yaml": blob(repo, "x")})
    new = edit_tree(repo, base, {"a/x.yaml": None, "a/x.sops.yaml": blob(repo, "enc")})
    assert files(repo, new) == {"a/x.sops.yaml": b"enc"}


def test_keeps_executable_bit_of_an_existing_file(repo: pygit2.Repository) -> None:
    builder = repo.TreeBuilder()
    builder.insert("run.yaml", blob(repo, "old"), FileMode.BLOB_EXECUTABLE)
    new = edit_tree(repo, builder.write(), {"run.yaml": blob(repo, "new")})
    tree = repo[new]
    assert isinstance(tree, pygit2.Tree)
    assert tree["run.yaml"].filemode == FileMode.BLOB_EXECUTABLE


def test_file_over_directory_is_a_conflict(repo: pygit2.Repository) -> None:
    base = edit_tree(repo, None, {"d/inner.yaml": blob(repo, "i"), "f": blob(repo, "f")})
    with pytest.raises(TreeConflict) as info:
        edit_tree(repo, base, {"d": blob(repo, "x")})
    assert info.value.path == "d"
    with pytest.raises(TreeConflict) as info:
        edit_tree(repo, base, {"f/below.yaml": blob(repo, "x")})
    assert info.value.path == "f/below.yaml"
    with pytest.raises(TreeConflict):
        edit_tree(repo, base, {"d": None})
    # Deleting below a file deletes nothing.
    assert edit_tree(repo, base, {"f/below.yaml": None}) == base


@pytest.mark.parametrize("path", ["", "/abs.yaml", "a//b.yaml", "a/../b.yaml", "./a.yaml", "a/"])
def test_rejects_unclean_paths(repo: pygit2.Repository, path: str) -> None:
    with pytest.raises(ValueError, match="clean relative path"):
        edit_tree(repo, None, {path: blob(repo, "x")})


def test_ten_thousand_files_in_one_directory(repo: pygit2.Repository) -> None:
    oids = {f"ns/core/configmaps/cm-{i:05}.yaml": blob(repo, f"v{i}") for i in range(10_000)}
    base = edit_tree(repo, None, oids)
    new = edit_tree(
        repo,
        base,
        {"ns/core/configmaps/cm-00042.yaml": None, "ns/core/configmaps/new.yaml": blob(repo, "n")},
    )
    result = files(repo, new)
    assert len(result) == 10_000
    assert "ns/core/configmaps/cm-00042.yaml" not in result
    assert result["ns/core/configmaps/new.yaml"] == b"n"
