"""Path segments Git refuses: the pure check, target paths, templates and rendered paths."""

from __future__ import annotations

import tempfile

import pygit2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubescribe.gitnames import escape_segment, has_reserved_segment
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.layout import Layout, LayoutError, normalize_target_path, validate_template

# libgit2 itself refuses these tree entry names (checked below against pygit2).
LIBGIT2_REFUSES = [
    ".git",
    ".GIT",
    ".Git",
    "git~1",
    "GIT~1",
    ".git.",
    ".git ",
    ".git. . ",
    ".git::$INDEX_ALLOCATION",
    ".git:stream",
]
# git fsck (a receiving server with transfer.fsckObjects) refuses these too.
FSCK_REFUSES = [
    ".g\u200cit",
    "\ufeff.git",
    ".git\u200f",
    ".gitmodules",
    ".GITMODULES.",
    ".gitmodules:x.yaml",
    ".gitmod\u200dules",
    "gitmod~1",
    "GITMOD~4",
    "gi7eba~1",
    "gi7eb~12",
    "~1234567",
    ".gitattributes",
    "gitatt~2",
    "gi7d29~9",
]
STORABLE = [
    "ok",
    ".github",
    ".gitignore",
    ".gitkeep",
    ".git.yaml",
    ".git~1",
    "git~2",
    "gitmod~5",
    "gitmodules",
    "a.git",
    "_.git",
    "git",
    ".gitmodulesx",
    "gi7eb~1",
    "system:controller:.git-x",
]


def _libgit2_accepts(name: str) -> bool:
    repo = pygit2.init_repository(tempfile.mkdtemp(), bare=True)
    builder = repo.TreeBuilder()
    try:
        builder.insert(name, repo.create_blob(b"x"), pygit2.enums.FileMode.BLOB)
    except pygit2.GitError:
        return False
    return True


@pytest.mark.parametrize("name", LIBGIT2_REFUSES)
def test_what_libgit2_refuses_is_reserved(name: str) -> None:
    assert not _libgit2_accepts(name)
    assert has_reserved_segment(name)


@pytest.mark.parametrize("name", FSCK_REFUSES)
def test_hfs_and_ntfs_aliases_git_fsck_refuses_are_reserved(name: str) -> None:
    assert has_reserved_segment(name)


@pytest.mark.parametrize("name", STORABLE)
def test_ordinary_names_are_not_reserved(name: str) -> None:
    assert not has_reserved_segment(name)
    assert _libgit2_accepts(name)


@pytest.mark.parametrize(
    "path", ["x/.git", ".git/x", "a/GIT~1/b", "a\\.git", "x/.gitmodules/y", "a/.git./b"]
)
def test_any_segment_counts(path: str) -> None:
    assert has_reserved_segment(path)


@given(st.text(min_size=1, max_size=20).filter(lambda s: "/" not in s and "\0" not in s))
def test_escaped_segments_are_never_reserved(segment: str) -> None:
    assert not has_reserved_segment(escape_segment(segment))


@pytest.mark.parametrize("path", ["x/.git", ".GIT", "a/git~1", "clusters/.gitmodules", "a/.git."])
def test_target_paths_with_a_reserved_segment_are_refused(path: str) -> None:
    with pytest.raises(LayoutError, match="Git refuses"):
        normalize_target_path(path)


def test_templates_with_a_reserved_literal_segment_are_refused() -> None:
    with pytest.raises(LayoutError, match="Git refuses"):
        validate_template("{namespace}/.git/{name}.yaml")
    validate_template("{namespace}/.github/{name}.yaml")


@pytest.mark.parametrize(
    ("name", "template", "expected"),
    [
        (".git", "{name}/{kind}.yaml", "_.git/ClusterRole.yaml"),
        ("GIT~1", "{name}/{kind}.yaml", "_GIT~1/ClusterRole.yaml"),
        (".gitmodules:x", "x/{name}.yaml", "x/_.gitmodules:x.yaml"),
        ("a\\.git", "{name}/{kind}.yaml", "a\\_.git/ClusterRole.yaml"),
        (".git", "{name}.yaml", ".git.yaml"),
    ],
)
def test_object_names_never_render_a_reserved_segment(
    name: str, template: str, expected: str
) -> None:
    rtype = ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
    identity = Identity("rbac.authorization.k8s.io", "ClusterRole", "", name)
    path = Layout(default=template).path_for(identity, rtype)
    assert path == expected
    assert all(_libgit2_accepts(segment) for segment in path.split("/"))
