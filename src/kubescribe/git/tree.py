"""Write a new tree from a base tree and a set of path edits, touching only what changed.

No index and no worktree: untouched subtrees are reused by id, so the cost of an edit is the
size of the directories on its path, not the size of the repository.
"""

from __future__ import annotations

from collections.abc import Mapping

import pygit2
from pygit2.enums import FileMode

from kubescribe.git.lookup_names import lookup_name

_BLOB_MODES = frozenset({FileMode.BLOB, FileMode.BLOB_EXECUTABLE})


class TreeConflict(ValueError):
    """An edit would replace a directory by a file or a file by a directory.

    Neither is ever what a mirror wants (it would silently drop someone's files), so the
    caller decides; `path` is the edited path that hit the conflict.
    """

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


def edit_tree(
    repo: pygit2.Repository,
    base: pygit2.Oid | None,
    edits: Mapping[str, pygit2.Oid | None],
) -> pygit2.Oid:
    """The id of tree `base` (None = empty) with each path set to a blob or, for None,
    removed. Directories left empty disappear; deleting a missing path is a no-op."""
    for path in edits:
        if any(p in ("", ".", "..") for p in path.split("/")):
            raise ValueError(f"not a clean relative path: {path!r}")
    new = _edit(repo, _tree(repo, base), edits, "")
    return new if new is not None else repo.TreeBuilder().write()


def _tree(repo: pygit2.Repository, oid: pygit2.Oid | None) -> pygit2.Tree | None:
    if oid is None:
        return None
    tree = repo[oid]
    if not isinstance(tree, pygit2.Tree):
        raise ValueError(f"{oid} is not a tree")
    return tree


def _edit(
    repo: pygit2.Repository,
    base: pygit2.Tree | None,
    edits: Mapping[str, pygit2.Oid | None],
    prefix: str,
) -> pygit2.Oid | None:
    """Apply `edits` (paths relative to this directory); None when the result is empty."""
    builder = repo.TreeBuilder(base) if base is not None else repo.TreeBuilder()
    changed = False
    subdirs: dict[str, dict[str, pygit2.Oid | None]] = {}
    for path, oid in edits.items():
        head, sep, rest = path.partition("/")
        if sep:
            subdirs.setdefault(head, {})[rest] = oid
        else:
            changed = _edit_file(builder, head, oid, prefix + path) or changed
    for name, sub in subdirs.items():
        changed = _edit_folder(repo, builder, name, sub, prefix) or changed
    if len(builder) == 0:
        return None
    if base is not None and not changed:
        return base.id
    return builder.write()


def _edit_file(builder: pygit2.TreeBuilder, name: str, oid: pygit2.Oid | None, shown: str) -> bool:
    """Write (or, with None, delete) the file `name`; whether anything changed."""
    existing = builder.get(lookup_name(name))
    if existing is not None and existing.filemode == FileMode.TREE:
        raise TreeConflict(shown, "is a directory")
    if oid is not None:
        if existing is not None and existing.id == oid and existing.filemode in _BLOB_MODES:
            return False
        # Keep an executable bit someone set; anything else becomes a plain file.
        mode = existing.filemode if existing is not None else FileMode.BLOB
        builder.insert(name, oid, mode if mode in _BLOB_MODES else FileMode.BLOB)
        return True
    if existing is not None:
        builder.remove(name)
        return True
    return False


def _edit_folder(
    repo: pygit2.Repository,
    builder: pygit2.TreeBuilder,
    name: str,
    edits: Mapping[str, pygit2.Oid | None],
    prefix: str,
) -> bool:
    """Apply `edits` below the folder `name`; whether anything changed."""
    existing = builder.get(lookup_name(name))
    child: pygit2.Tree | None = None
    if existing is not None and existing.filemode == FileMode.TREE:
        child = _tree(repo, existing.id)
    elif existing is not None:
        wanted = [p for p, oid in edits.items() if oid is not None]
        if wanted:
            raise TreeConflict(f"{prefix}{name}/{wanted[0]}", f"{prefix}{name} is a file")
        return False  # only deletes below a file: nothing there to delete
    new = _edit(repo, child, edits, f"{prefix}{name}/")
    if new is None:
        if existing is None:
            return False
        builder.remove(name)
        return True
    if existing is None or new != existing.id:
        builder.insert(name, new, FileMode.TREE)
        return True
    return False
