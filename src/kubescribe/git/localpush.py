"""A push to a file:// remote that writes nothing on the remote but its objects and the branch.

libgit2's local transport sends objects only along with a reference on the remote, and every
connection to a local remote lists the remote's references, then reads them one by one: a
scratch reference removed in between fails that connection ("reference ... not found") for
every other writer of the remote, in this process or another. So the new objects go as one
pack straight into the remote's object store (written aside and renamed into place, as Git
does), and the branch then moves by compare-and-swap under its ref lock.
"""

from __future__ import annotations

import pygit2
from pygit2.enums import DeltaStatus, FileMode

from kubescribe.git.lookup_names import lookup_name
from kubescribe.git.pack import write_objects


def missing_objects(
    source: pygit2.Repository, target: pygit2.Repository, tip: pygit2.Oid
) -> list[pygit2.Oid]:
    """The objects reachable from `tip` in `source` that `target` lacks. The walk stops at
    commits `target` holds (taken to hold all they reach, as a Git server's advertised tips
    are); each other commit brings what its tree changed from its first parent's."""
    missing: list[pygit2.Oid] = []
    seen: set[pygit2.Oid] = set()

    def want(oid: pygit2.Oid) -> None:
        if oid not in seen:
            seen.add(oid)
            if oid not in target:
                missing.append(oid)

    commits = [tip]
    while commits:
        oid = commits.pop()
        if oid in seen or oid in target:
            continue
        seen.add(oid)
        missing.append(oid)
        commit = source[oid]
        assert isinstance(commit, pygit2.Commit)
        commits.extend(commit.parent_ids)
        tree = commit.peel(pygit2.Tree)
        if not commit.parent_ids:
            for found in _tree_objects(tree):
                want(found)
            continue
        base = source[commit.parent_ids[0]].peel(pygit2.Tree)
        want(tree.id)
        for found in _changed_objects(base, tree):
            want(found)
    return missing


def _changed_objects(base: pygit2.Tree, tree: pygit2.Tree) -> list[pygit2.Oid]:
    """The blobs and folders of `tree` that differ from `base` (submodules left out)."""
    found: list[pygit2.Oid] = []
    folders: set[str] = set()
    for delta in base.diff_to_tree(tree).deltas:
        gone = delta.status == DeltaStatus.DELETED
        if not gone and delta.new_file.mode != FileMode.COMMIT:  # not a submodule
            found.append(delta.new_file.id)
        for path in (delta.old_file.path, delta.new_file.path):
            parts = path.split("/")[:-1]
            folders.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    for folder in sorted(folders):
        try:
            entry = tree[lookup_name(folder)]
        except KeyError:  # the folder went away with its last file
            continue
        found.append(entry.id)
    return found


def _tree_objects(tree: pygit2.Tree) -> list[pygit2.Oid]:
    """Every tree and blob under `tree`, itself included (a stack: folders may nest deep)."""
    found = [tree.id]
    stack = [tree]
    while stack:
        for entry in stack.pop():
            if entry.filemode != FileMode.COMMIT:  # not a submodule
                found.append(entry.id)
            if entry.filemode == FileMode.TREE:
                assert isinstance(entry, pygit2.Tree)
                stack.append(entry)
    return found


def send_objects(source: pygit2.Repository, target: pygit2.Repository, tip: pygit2.Oid) -> int:
    """Write what `target` lacks of `tip` into its object store as one pack; the count."""
    missing = missing_objects(source, target, tip)
    odb = source.odb
    write_objects(target.path, ((oid.raw, *odb.read(oid)) for oid in missing))
    return len(missing)


def compare_and_swap(
    target: pygit2.Repository, branch: str, new_tip: pygit2.Oid, expected: pygit2.Oid | None
) -> str | None:
    """Move `refs/heads/<branch>` of `target` from `expected` (None: absent) to `new_tip`;
    why it did not (another writer moved it first), or None once moved. A `GitError` from
    the move itself is a lost race too (the ref lock was taken, or the ref appeared)."""
    name = lookup_name(f"refs/heads/{branch}")
    current = target.references.get(name)
    if current is None:
        if expected is not None:
            return f"{branch} was deleted on the remote"
        target.references.create(name, new_tip)  # fails if it appeared meanwhile
    elif current.target != expected:
        return f"{branch} moved on the remote"
    else:
        current.set_target(new_tip)  # matches the value read, under the ref lock
    return None
