"""Objects an overlay inherits: rendered by the root but defined in a base it reaches through
`..`. The base is read-only (other overlays render it too), so a change of such an object is
written into the root kustomization instead: a changed container image as an `images:` entry,
a changed workload scale as a `replicas:` entry, any other change as a strategic-merge patch
file of the overlay (one per object, listed under `patches:`) holding only the fields that
differ from the base. Pure, like `writethrough`, whose result it turns around.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from kubescribe.mirror.identity import Identity
from kubescribe.mirror.kustomize import (
    REPLICA_KINDS,
    Kustomization,
    Tree,
    chain_affixes,
    names_of,
    namespace_of,
)
from kubescribe.mirror.roots import under
from kubescribe.mirror.writethrough import WriteThrough, apply_image, containers, split_image
from kubescribe.mirror.yamlfmt import dump_yaml, order_document


def inherited(path: str, chain: list[Kustomization]) -> bool:
    """Whether the file `path`, listed through `chain` (innermost first), is outside the
    directory of the kustomization that renders it (a base reached through `..`)."""
    return not under(path, chain[-1].dir)


PATCHES = "patches"  # the overlay's directory of patch files
# Lists kustomize merges by the `name` of their items (strategic merge): a patch holds the
# items that changed; any other list is replaced whole when it holds scalars.
_NAMED_LISTS = frozenset({"containers", "initContainers", "ephemeralContainers", "env", "volumes"})


@dataclass(frozen=True)
class Overlaid:
    """What an inherited object's change writes into the overlay besides kustomization
    entries: its patch file (`path`, relative to the target's repository) and the document
    it holds (None: the file goes)."""

    path: str
    document: Mapping[str, Any] | None
    root: str  # the directory of the overlay's kustomization
    hit: tuple[str, str, str]  # how `Tree.patches` knows the patch there: kind, name, what

    @property
    def data(self) -> bytes | None:
        """The patch file's bytes (None: it goes)."""
        if self.document is None:
            return None
        return dump_yaml(order_document(self.document)).encode()


def patch_path(root: Kustomization, identity: Identity, base_name: str) -> str:
    """The overlay's patch file of an inherited object: one per object, named by it."""
    kind = f"{identity.kind.lower()}.{identity.group}" if identity.group else identity.kind.lower()
    return posixpath.join(
        root.dir, PATCHES, identity.namespace or "_cluster", f"{kind}_{base_name}.yaml"
    )


def own_patch_entry(root: Kustomization, path: str) -> int | None:
    """The index of the `patches:` entry of `root` that lists `path` (as this module writes
    it: `path:` alone), or None."""
    relative = posixpath.relpath(path, root.dir or ".")
    for i, entry in enumerate(root.entries("patches")):
        if isinstance(entry, Mapping) and set(entry) == {"path"} and entry["path"] == relative:
            return i
    return None


def without_own_patch(
    tree: Tree, identity: Identity, chain: list[Kustomization], base_name: str
) -> Tree:
    """`tree` without the patch this module wrote for the object (it is the object's own
    change, not something that keeps it from being written)."""
    root = chain[-1]
    if own_patch_entry(root, patch_path(root, identity, base_name)) is None:
        return tree
    names = names_of(base_name, chain) | {identity.name}
    patches = list(tree.patches.get(root.dir, []))
    for i, (kind, name, what) in enumerate(patches):
        if kind == identity.kind and name in names and what == f"patches in {root.path}":
            del patches[i]
            break
    return dataclasses.replace(tree, patches={**tree.patches, root.dir: patches})


def into_overlay(
    through: WriteThrough,
    old: Mapping[str, Any] | None,
    identity: Identity,
    chain: list[Kustomization],
    base_name: str,
) -> tuple[Overlaid | None, str | None]:
    """Move the changes `through` would make to the inherited file `old` into the root
    kustomization (`chain[-1]`): `through.document` becomes `old` again, `through.edits`
    gains the root's new entries, and the rest is the object's patch file (written, or
    removed once the object is as the base renders it). A problem when a change cannot be
    written there."""
    if old is None:
        return None, "the inherited file could not be read"
    root = chain[-1]
    for directory in through.edits:
        if not under(directory, root.dir):
            path = through.edits[directory].path
            return None, f"inherited from {path}, which would have to change"
    problem = _images(through, old, root)
    if problem is None and identity.kind in REPLICA_KINDS:
        problem = _replicas(through, old, root, base_name)
    if problem is not None:
        return None, problem
    try:
        diff = strategic_diff(old, through.document)
    except ValueError as exc:
        return None, f"inherited from the base: {exc}"
    path = patch_path(root, identity, base_name)
    listed = own_patch_entry(root, path)
    if diff is _SAME:
        if listed is None:
            return None, None
        seq = through.edited(root).data["patches"]
        del seq[listed]
        if not seq:
            del through.edited(root).data["patches"]
        return Overlaid(path, None, root.dir, _hit(identity, root, chain, base_name)), None
    if listed is None:
        rel = posixpath.relpath(path, root.dir or ".")
        _seq(through.edited(root).data, "patches").append(CommentedMap(path=rel))
    document = _patch_document(old, diff, chain[:-1], base_name)
    return Overlaid(path, document, root.dir, _hit(identity, root, chain, base_name)), None


def delete_patch(
    old: Mapping[str, Any], identity: Identity, chain: list[Kustomization], base_name: str
) -> tuple[Kustomization | None, Overlaid]:
    """An inherited object deleted live: its patch file becomes a `$patch: delete` of it
    (listed, if it was not) and the overlay's `replicas:` entries of it go (kustomize fails on
    an entry that matches nothing). The edited root kustomization (None: unchanged)."""
    root = chain[-1]
    path = patch_path(root, identity, base_name)
    edited = root.copy()
    if own_patch_entry(root, path) is None:
        rel = posixpath.relpath(path, root.dir or ".")
        _seq(edited.data, "patches").append(CommentedMap(path=rel))
    if identity.kind in REPLICA_KINDS and isinstance(edited.data.get("replicas"), list):
        names = names_of(base_name, chain)
        seq = edited.data["replicas"]
        for i in reversed(range(len(seq))):
            if isinstance(seq[i], Mapping) and seq[i].get("name") in names:
                del seq[i]
        if not seq:
            del edited.data["replicas"]
    document = _patch_document(old, {"$patch": "delete"}, chain[:-1], base_name)
    changed = edited if edited.data != root.data else None
    return changed, Overlaid(path, document, root.dir, _hit(identity, root, chain, base_name))


def _hit(
    identity: Identity, root: Kustomization, chain: list[Kustomization], base_name: str
) -> tuple[str, str, str]:
    prefix, suffix = chain_affixes(chain[:-1])
    return identity.kind, prefix + base_name + suffix, f"patches in {root.path}"


def _patch_document(
    old: Mapping[str, Any], diff: Any, inner: list[Kustomization], base_name: str
) -> dict[str, Any]:
    """The patch: the object as the base renders it names it, and the fields that differ."""
    prefix, suffix = chain_affixes(inner)
    meta: dict[str, Any] = {"name": prefix + base_name + suffix}
    old_meta = old.get("metadata")
    namespace = namespace_of(inner) or (
        old_meta.get("namespace") if isinstance(old_meta, Mapping) else None
    )
    if namespace:
        meta["namespace"] = namespace
    doc = {"apiVersion": old.get("apiVersion"), "kind": old.get("kind")}
    body = dict(diff)
    doc["metadata"] = {**meta, **(body.pop("metadata", None) or {})}
    return {**doc, **body}


class _Same:
    """No difference (a patch of nothing)."""


_SAME = _Same()


def strategic_diff(old: Any, new: Any, key: str = "") -> Any:
    """The strategic-merge patch that turns `old` into `new`: changed and new map keys, null
    for a removed key, the changed items of a list kustomize merges by name (a removed one
    as `$patch: delete`), a list of scalars whole. `_SAME` when they are equal. ValueError
    for a change no such patch expresses (another list of maps)."""
    if old == new:
        return _SAME
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out: dict[str, Any] = {}
        for k, value in new.items():
            if k not in old:
                out[k] = value
            elif (d := strategic_diff(old[k], value, str(k))) is not _SAME:
                out[k] = d
        out.update((k, None) for k in old if k not in new)
        return out
    if isinstance(old, list) and isinstance(new, list):
        if key in _NAMED_LISTS and _named(old) and _named(new):
            return _named_diff(old, new, key)
        if any(isinstance(v, (Mapping, list)) for v in [*old, *new]):
            raise ValueError(f"the list {key} changed (a patch would merge it, not replace it)")
    return new


def _named(items: list[Any]) -> bool:
    names = [i.get("name") for i in items if isinstance(i, Mapping)]
    return (
        len(names) == len(items)
        and all(isinstance(n, str) for n in names)
        and len(set(names)) == len(names)
    )


def _named_diff(old: list[Any], new: list[Any], key: str) -> list[Any]:
    before = {i["name"]: i for i in old}
    names = [i["name"] for i in new]
    kept = [n for n in names if n in before]
    if kept != [n for n in before if n in set(names)] or names != kept + [
        n for n in names if n not in before
    ]:
        raise ValueError(f"the items of {key} were reordered (a patch appends new ones)")
    out: list[Any] = []
    for item in new:
        was = before.get(item["name"])
        if was is None:
            out.append(item)
        elif (d := strategic_diff(was, item, key)) is not _SAME:
            out.append({"name": item["name"], **d})
    out += [{"name": n, "$patch": "delete"} for n in before if n not in set(names)]
    return out


def _images(through: WriteThrough, old: Mapping[str, Any], root: Kustomization) -> str | None:
    """Each container whose image differs from the base's gets an `images:` entry."""
    before = dict(containers(old))
    for path, container in containers(through.document):
        image, was = container.get("image"), before.get(path, {}).get("image")
        if not isinstance(image, str) or not isinstance(was, str) or image == was:
            continue
        entry = _image_entry(was, image)
        if apply_image(was, entry) != image:
            return f"an images entry cannot render {image} from {was}"
        seq = _seq(through.edited(root).data, "images")
        for i, held in enumerate(seq):
            if isinstance(held, Mapping) and held.get("name") == entry["name"]:
                seq[i] = entry  # set for another container of the same image just now
                break
        else:
            seq.append(entry)
        container["image"] = was
    return None


def _image_entry(was: str, image: str) -> CommentedMap:
    """The `images:` entry that renders `image` from the base's `was`, as `kustomize edit set
    image` writes it."""
    name = split_image(was)[0]
    new_name, tag, digest = split_image(image)
    entry = CommentedMap(name=name)
    if new_name != name:
        entry["newName"] = new_name
    if tag:
        entry["newTag"] = tag
    if digest:
        entry["digest"] = digest
    return entry


def _replicas(
    through: WriteThrough, old: Mapping[str, Any], root: Kustomization, base_name: str
) -> str | None:
    """A scale that differs from the base's is a `replicas:` entry."""
    spec = through.document.get("spec")
    count = spec.get("replicas") if isinstance(spec, dict) else None
    old_spec = old.get("spec")
    was = old_spec.get("replicas") if isinstance(old_spec, Mapping) else None
    if count == was or not isinstance(spec, dict):
        return None
    if not isinstance(count, int) or isinstance(count, bool):
        return "the live replicas is not a count"
    seq = _seq(through.edited(root).data, "replicas")
    seq.append(CommentedMap(name=base_name, count=count))
    if was is None:
        del spec["replicas"]
    else:
        spec["replicas"] = was
    return None


def _seq(data: CommentedMap, key: str) -> CommentedSeq:
    seq = data.get(key)
    if not isinstance(seq, CommentedSeq):
        seq = data[key] = CommentedSeq()
    return seq
