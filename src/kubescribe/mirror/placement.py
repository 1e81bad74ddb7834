"""Where a live object goes in a kustomized target folder, decided from the kustomization
tree alone (the build reads the files and writes what is decided here).

A document is written through the kustomization that lists its file: the fields the
kustomizations govern (namespace, name affixes, images, replicas, labels) are edited there and
the file keeps its own values of them. A new document is placed under the kustomization the
rule of `mirror.roots` chooses (the root, when the folder has one kustomization) and listed
there."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubescribe.mirror.identity import Identity
from kubescribe.mirror.inherit import (
    Overlaid,
    delete_patch,
    inherited,
    into_overlay,
    without_own_patch,
)
from kubescribe.mirror.kustomize import (
    Kustomization,
    Tree,
    patched_by,
    unsupported,
)
from kubescribe.mirror.roots import Forest, Siblings, choose_home, home_for_path, homes
from kubescribe.mirror.writethrough import (
    base_name_of,
    remove_replicas,
    write_through,
)


@dataclass(frozen=True)
class Placement:
    """How to write one object. `folder`: where its file is (a new one at the layout path of
    `placed_as`, by default the object's identity, under it); None: no file is written (an
    inherited object written through, `through`, has only `edits`).
    `through`: once the file is written it is listed in (or moved within) its kustomization,
    and `edits` replace kustomizations of the tree. `refusal`: why the object is not written
    through (then it is reported, whether a file is written or not)."""

    folder: str | None
    document: Mapping[str, Any]
    placed_as: Identity | None = None
    through: bool = False
    listed: bool = False  # the file is listed already (else: listed in `folder`'s)
    edits: tuple[Kustomization, ...] = ()
    refusal: str | None = None
    overlaid: Overlaid | None = None  # an inherited object's patch file in the overlay


def place(
    tree: Tree,
    identity: Identity,
    live: Mapping[str, Any],
    path: str | None,
    *,
    old: Callable[[], Mapping[str, Any] | None],
    elsewhere: Callable[[], Mapping[Identity, str]],
    siblings: Callable[[], Siblings],
    folder: str,
    write_unsupported: bool,
) -> Placement:
    """Where `live` goes, given the `path` of its file (None: new), the file's content
    (`old()`, None when unreadable or encrypted), identities rendered from files the
    target's index does not hold, by file (`elsewhere()`), and the documents placed so far
    (`siblings()`); `folder` is the target folder."""
    chain = tree.chain_of(path) if path is not None else None
    listed = chain is not None
    home = tree.root
    if chain is None:
        if path is not None and not _under(path, tree.root):
            # A file the rendered folder does not include (and cannot: kustomize loads files
            # only from under a kustomization): edited where it is, and reported.
            root = tree.kustomizations[tree.root].path
            return Placement(
                folder, live, refusal=_not_through(f"{path} is not rendered by {root}")
            )
        if path is not None:  # an unlisted file: listed by the kustomization holding it
            found = home_for_path(tree, path)
            if found is None and isinstance(tree, Forest):
                return Placement(folder, live)  # a plain file beside the app kustomizations
            home = found or tree.root
        elif held := elsewhere().get(identity):
            # rendered from a file of several documents: a new file would duplicate it
            return Placement(
                None, live, refusal=_not_through(f"rendered from the multi-document file {held}")
            )
        elif homes(tree) != [tree.root]:
            found = choose_home(tree, identity, live, siblings())
            if found is None:  # a forest, and no app kustomization holds such objects
                return Placement(folder, live)
            home = found
        chain = tree.chain(home)
    base_name = base_name_of(identity, chain)
    base = path is not None and listed and inherited(path, chain)
    checked = without_own_patch(tree, identity, chain, base_name) if base else tree
    problem = unsupported(identity, chain, checked, base_name)
    overlaid = None
    if problem is None:
        before = old() if path is not None else None
        through = write_through(live, identity, before, chain)
        problem = through.problem
        if problem is None and base:
            overlaid, problem = into_overlay(through, before, identity, chain, base_name)
    if problem is not None:
        return Placement(
            tree.root if write_unsupported and not base else None,
            live,
            refusal=_not_through(problem),
        )
    if base:  # the base file stays as it is: only the root's kustomization is edited
        edits = tuple(through.edits.values())
        return Placement(None, live, through=True, listed=True, edits=edits, overlaid=overlaid)
    return Placement(
        home,
        through.document,
        placed_as=Identity(identity.group, identity.kind, identity.namespace, base_name),
        through=True,
        listed=listed,
        edits=tuple(through.edits.values()),
    )


def list_written(
    tree: Tree, placement: Placement, old_path: str | None, path: str
) -> tuple[set[str], str | None]:
    """Record in `tree` that the object of `placement` (written through) is now the file
    `path` (it was `old_path`): listed in the root kustomization when new, renamed where it is
    listed when moved, and the kustomization edits taken. The directories of the
    kustomizations edited, and the kustomization file a commit message names (None: the
    object's own file)."""
    edited: set[str] = set()
    named: str | None = None
    if not placement.listed and placement.folder is not None:
        edited.add(tree.add_file(path, placement.folder))
        named = tree.kustomizations[placement.folder].path
    elif old_path is not None and old_path != path:
        moved = tree.move_file(old_path, path)
        if moved is not None:
            edited.add(moved)
    if placement.overlaid is not None:  # the tree knows the patch from now on
        patch = placement.overlaid
        known = tree.patches.setdefault(patch.root, [])
        if patch.document is None:
            tree.patch_files.discard(patch.path)
            if patch.hit in known:
                known.remove(patch.hit)
        elif patch.path not in tree.patch_files:
            tree.patch_files.add(patch.path)
            known.append(patch.hit)
    for k in placement.edits:
        tree.replace(k)
        edited.add(k.dir)
        named = k.path
    return edited, named


def removal(
    tree: Tree, identity: Identity, path: str, old: Callable[[], Mapping[str, Any] | None]
) -> Placement | None:
    """How the file `path` of a deleted object goes: None when it is removed and unlisted
    (`unlist`); a refusal when a patch targets it (removing the file would break `kustomize
    build`); for an object inherited from a base reached through `..` (`old()`: its file's
    content), a `$patch: delete` in the overlay, the base untouched."""
    chain = tree.chain_of(path)
    if chain is None:
        return None
    base_name = base_name_of(identity, chain)
    base = inherited(path, chain)
    checked = without_own_patch(tree, identity, chain, base_name) if base else tree
    patch = patched_by(identity, chain, checked, base_name)
    if patch is not None:
        why = f"not removed: {patch} targets it (remove the patch first)"
        return Placement(None, {}, refusal=why)
    if not base:
        return None
    before = old()
    if before is None:
        return Placement(None, {}, refusal=_not_through("the inherited file could not be read"))
    edited, overlaid = delete_patch(before, identity, chain, base_name)
    edits = () if edited is None else (edited,)
    return Placement(None, {}, through=True, listed=True, edits=edits, overlaid=overlaid)


def unlist(tree: Tree, identity: Identity, path: str) -> set[str]:
    """Record in `tree` that the file of a deleted object is gone: unlisted, and `replicas:`
    entries of a workload dropped. The directories of the kustomizations edited."""
    chain = tree.chain_of(path)
    if chain is None:
        return set()
    edited: set[str] = set()
    removed = tree.remove_file(path)
    if removed is not None:
        edited.add(removed)
    for k in remove_replicas(chain, identity, base_name_of(identity, chain)).values():
        tree.replace(k)
        edited.add(k.dir)
    return edited


def _not_through(why: str) -> str:
    return f"not written through: {why}"


def _under(path: str, folder: str) -> bool:
    return not folder or path.startswith(folder + "/")
