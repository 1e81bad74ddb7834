"""Writing a live object through a folder's kustomizations: the inverse of what `namespace`,
`replicas`, `images` and the label and annotation transformers do, so that `kustomize build` of
the folder renders the object as it is live. Pure, like `kustomize`, whose trees it reads.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml.comments import CommentedMap

from kubescribe.mirror.identity import Identity
from kubescribe.mirror.kustomize import (
    ANNOTATIONS,
    META_LABELS,
    REPLICA_KINDS,
    SELECTORS,
    TAG,
    TEMPLATE_LABELS,
    FieldSpec,
    Kustomization,
    chain_affixes,
    like_old,
    names_of,
    namespace_of,
    namespaced,
)


def split_image(image: str) -> tuple[str, str, str]:
    """(name, tag, digest) as kustomize's `image.Split` cuts them."""
    slash = image.find("/")
    search, offset = (image[slash:], slash) if slash > 0 else (image, 0)
    at, colon = search.find("@"), search.find(":")
    if colon < 0 and at < 0:
        return image, "", ""
    if at >= 0 and (at < colon or colon < 0):
        at += offset
        return image[:at], "", image[at + 1 :]
    if at >= 0 and colon >= 0:
        at, colon = at + offset, colon + offset
        return image[:colon], image[colon + 1 : at], image[at + 1 :]
    colon += offset
    return image[:colon], image[colon + 1 :], ""


def image_matches(image: str, name: str) -> bool:
    return image.startswith(name) and TAG.fullmatch(image[len(name) :]) is not None


def apply_image(image: str, entry: Mapping[str, Any]) -> str:
    name, tag, digest = split_image(image)
    new_name, new_tag, new_digest = (
        str(entry.get(k) or "") for k in ("newName", "newTag", "digest")
    )
    name = new_name or name
    if new_tag and new_digest:
        tag, digest = new_tag, new_digest
    elif new_tag:
        tag, digest = new_tag, ""
    elif new_digest:
        tag, digest = "", new_digest
    return name + (f":{tag}" if tag else "") + (f"@{digest}" if digest else "")


def containers(obj: Any) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Every container (in any `containers`/`initContainers` list), keyed by its path."""

    def walk(node: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("containers", "initContainers") and isinstance(value, list):
                    for i, c in enumerate(value):
                        if isinstance(c, dict):
                            yield (*path, key, c.get("name", i)), c
                else:
                    yield from walk(value, (*path, key))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                yield from walk(value, (*path, i))

    return walk(obj, ())


# -- writing through ------------------------------------------------------------------------
@dataclass
class WriteThrough:
    """A live object as its file should hold it, and the kustomizations to edit with it."""

    document: dict[str, Any]
    edits: dict[str, Kustomization] = field(default_factory=dict)  # by directory
    problem: str | None = None

    def edited(self, k: Kustomization) -> Kustomization:
        """The copy of `k` this write edits."""
        if k.dir not in self.edits:
            self.edits[k.dir] = k.copy()
        return self.edits[k.dir]


def write_through(
    live: Mapping[str, Any],
    identity: Identity,
    old: Mapping[str, Any] | None,
    chain: list[Kustomization],
) -> WriteThrough:
    """The file content of a live (sanitized) object listed through `chain` (innermost
    first), given the file's `old` content, and the edits of the kustomizations that govern
    its fields: namespace, name affixes, images, replicas, labels and annotations."""
    doc: dict[str, Any] = copy.deepcopy(dict(live))
    out = WriteThrough(doc)
    meta = doc.setdefault("metadata", {})
    old_meta = (old or {}).get("metadata") or {}
    out.problem = _through_namespace(meta, old_meta, identity, chain)
    if out.problem is not None:
        return out
    prefix, suffix = chain_affixes(chain)
    name = identity.name
    if not (name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix + suffix)):
        out.problem = f"name {name} lacks the namePrefix/nameSuffix {prefix}…{suffix}"
        return out
    base_name = name[len(prefix) : len(name) - len(suffix)]
    meta["name"] = old_meta.get("name") or base_name
    if identity.kind in REPLICA_KINDS:
        _through_replicas(out, live, old, names_of(base_name, chain), chain)
    out.problem = _through_images(out, old, chain) or _through_metadata(
        doc, live, old, identity.kind, chain
    )
    if out.problem is not None:
        return out
    # drop edits that change nothing
    for directory in [d for d, k in out.edits.items() if k.data == _by_dir(chain)[d].data]:
        del out.edits[directory]
    return out


def _through_namespace(
    meta: dict[str, Any],
    old_meta: Mapping[str, Any],
    identity: Identity,
    chain: list[Kustomization],
) -> str | None:
    """The file keeps its own namespace (or none) when a kustomization sets it."""
    namespace = namespace_of(chain)
    if not namespace or not namespaced(identity):
        return None
    if identity.namespace != namespace:
        return f"namespace {namespace} of the kustomization rewrites {identity.namespace}"
    if old_meta.get("namespace"):
        meta["namespace"] = old_meta["namespace"]
    else:
        meta.pop("namespace", None)
    return None


def _through_replicas(
    out: WriteThrough,
    live: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    names: set[str],
    chain: list[Kustomization],
) -> None:
    """A `replicas:` entry that governs the workload takes the live count; the file keeps its
    own."""
    live_count = (live.get("spec") or {}).get("replicas")
    governing: tuple[Kustomization, int] | None = None
    for k in chain:
        for i, entry in enumerate(k.entries("replicas")):
            if isinstance(entry, Mapping) and entry.get("name") in names:
                governing = (k, i)
    if governing is None or not isinstance(live_count, int):
        return
    k, i = governing
    entry = out.edited(k).data["replicas"][i]
    if entry.get("count") != live_count:
        entry["count"] = live_count
    old_count = ((old or {}).get("spec") or {}).get("replicas")
    if old_count is not None:
        out.document["spec"]["replicas"] = old_count
    elif old is not None:
        out.document["spec"].pop("replicas", None)


def _through_images(
    out: WriteThrough, old: Mapping[str, Any] | None, chain: list[Kustomization]
) -> str | None:
    """Each container image an `images:` entry rewrites is set in that entry; the file keeps
    its own image."""
    old_containers = dict(containers(old)) if old is not None else {}
    for path, container in containers(out.document):
        image = container.get("image")
        if not isinstance(image, str):
            continue
        before = old_containers.get(path, {}).get("image")
        start = before if isinstance(before, str) else image
        problem = _through_image(out, container, image, start, chain)
        if problem is not None:
            return problem
    return None


def _through_image(
    out: WriteThrough,
    container: dict[str, Any],
    image: str,
    start: str,
    chain: list[Kustomization],
) -> str | None:
    applied: list[tuple[Kustomization, int]] = []
    value = start
    for k in chain:
        for i, entry in enumerate(k.entries("images")):
            if isinstance(entry, Mapping) and image_matches(value, str(entry.get("name", ""))):
                value = apply_image(value, entry)
                applied.append((k, i))
    if not applied:
        return _image_rewriter(image, chain)  # the file's own image: no entry may rewrite it
    if len(applied) > 1:
        return f"image {image} is rewritten by {len(applied)} images entries"
    if value == image:
        container["image"] = start
        return None
    k, i = applied[0]
    entry = out.edited(k).data["images"][i]
    entry_name = str(entry.get("name"))
    name, tag, digest = split_image(image)
    _set(entry, "newName", name if name != entry_name else None)
    _set(entry, "newTag", tag or None)
    _set(entry, "digest", digest or None)
    container["image"] = start if (tag or digest) else split_image(start)[0]
    if apply_image(container["image"], entry) != image:
        return f"images entry {entry_name} in {k.path} cannot render {image}"
    return None


def _image_rewriter(image: str, chain: list[Kustomization]) -> str | None:
    """The `images:` entry that would start rewriting `image`, named, or None."""
    for k in chain:
        for entry in k.entries("images"):
            if isinstance(entry, Mapping) and image_matches(image, str(entry.get("name", ""))):
                return f"images entry {entry.get('name')} in {k.path} would rewrite {image}"
    return None


def _through_metadata(
    doc: dict[str, Any],
    live: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    kind: str,
    chain: list[Kustomization],
) -> str | None:
    """Labels and annotations the kustomizations set are left to them."""
    for k in chain:
        for where, pairs, specs in _metadata_sets(k):
            problem = _unset(doc, live, old, kind, pairs, specs)
            if problem is not None:
                return f"{where} in {k.path}: {problem}"
    return None


def _metadata_sets(k: Kustomization) -> list[tuple[str, dict[str, str], list[FieldSpec]]]:
    """The label and annotation sets of a kustomization and where each is written."""
    out: list[tuple[str, dict[str, str], list[FieldSpec]]] = []
    common = k.data.get("commonLabels")
    if isinstance(common, Mapping) and common:
        out.append(
            (
                "commonLabels",
                {str(a): str(b) for a, b in common.items()},
                [*META_LABELS, *TEMPLATE_LABELS, *SELECTORS],
            )
        )
    for entry in k.entries("labels"):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("pairs"), Mapping):
            continue
        specs = list(META_LABELS)
        if entry.get("includeSelectors"):
            specs += TEMPLATE_LABELS + SELECTORS
        elif entry.get("includeTemplates"):
            specs += TEMPLATE_LABELS
        pairs = {str(a): str(b) for a, b in entry["pairs"].items()}
        out.append(("labels", pairs, specs))
    annotations = k.data.get("commonAnnotations")
    if isinstance(annotations, Mapping) and annotations:
        pairs = {str(a): str(b) for a, b in annotations.items()}
        out.append(("commonAnnotations", pairs, list(ANNOTATIONS)))
    return out


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _unset(
    doc: dict[str, Any],
    live: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    kind: str,
    pairs: dict[str, str],
    specs: list[FieldSpec],
) -> str | None:
    """Take the pairs a kustomization sets out of `doc` (the file keeps what it had); a
    problem when the live object lacks one or holds another value (it would be rendered)."""
    for kinds, path, create in specs:
        if kinds is not None and kind not in kinds:
            continue
        live_map = _at(live, path)
        if not isinstance(live_map, Mapping):
            if create:
                return f"sets {'.'.join(path)} the live object does not have"
            continue
        for key, value in pairs.items():
            if live_map.get(key) != value:
                return f"sets {key}={value} but the live object has {live_map.get(key)!r}"
        # a map kustomize does not create is kept: it adds to it only when the file has it
        if create or old is not None:
            _drop_pairs(doc, old, path, pairs, create)
    return None


def _drop_pairs(
    doc: dict[str, Any],
    old: Mapping[str, Any] | None,
    path: tuple[str, ...],
    pairs: dict[str, str],
    create: bool,
) -> None:
    """Take the pairs out of the map at `path` of `doc`, but those the file had (and the
    map, when it was not there before and nothing else is left in it)."""
    old_map = _at(old, path) if old is not None else None
    parent = _at(doc, path[:-1])
    target = _at(doc, path)
    if not isinstance(parent, dict) or not isinstance(target, dict):
        return
    for key in pairs:
        if not (isinstance(old_map, Mapping) and key in old_map):
            target.pop(key, None)
    if not target and not isinstance(old_map, Mapping) and create:
        del parent[path[-1]]


def _by_dir(chain: list[Kustomization]) -> dict[str, Kustomization]:
    return {k.dir: k for k in chain}


def _set(entry: CommentedMap, key: str, value: str | None) -> None:
    if value is None:
        entry.pop(key, None)
    elif entry.get(key) != value:
        entry[key] = like_old(entry.get(key), value)


def remove_replicas(
    chain: list[Kustomization], identity: Identity, base_name: str
) -> dict[str, Kustomization]:
    """The kustomizations of `chain` without the `replicas:` entries of a deleted workload
    (kustomize fails on an entry that matches nothing)."""
    edits: dict[str, Kustomization] = {}
    if identity.kind not in REPLICA_KINDS:
        return edits
    names = names_of(base_name, chain)
    for k in chain:
        seq = k.data.get("replicas")
        if not isinstance(seq, list):
            continue
        keep = [e for e in seq if not (isinstance(e, Mapping) and e.get("name") in names)]
        if len(keep) != len(seq):
            new = k.copy()
            new_seq = new.data["replicas"]
            for i in reversed(range(len(new_seq))):
                e = new_seq[i]
                if isinstance(e, Mapping) and e.get("name") in names:
                    del new_seq[i]
            if not new_seq:
                del new.data["replicas"]
            edits[k.dir] = new
    return edits


def base_name_of(identity: Identity, chain: list[Kustomization]) -> str:
    prefix, suffix = chain_affixes(chain)
    name = identity.name
    if name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix + suffix):
        return name[len(prefix) : len(name) - len(suffix)]
    return name
