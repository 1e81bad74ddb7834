"""Objects an overlay inherits: rendered by the root but defined in a base it reaches through
`..`. The base is read-only (other overlays render it too), so a change of such an object is
written into the root kustomization instead: a changed container image as an `images:` entry,
a changed workload scale as a `replicas:` entry. Pure, like `writethrough`, whose result it
turns around.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from kubescribe.mirror.identity import Identity
from kubescribe.mirror.kustomize import REPLICA_KINDS, Kustomization
from kubescribe.mirror.roots import under
from kubescribe.mirror.writethrough import WriteThrough, apply_image, containers, split_image


def inherited(path: str, chain: list[Kustomization]) -> bool:
    """Whether the file `path`, listed through `chain` (innermost first), is outside the
    directory of the kustomization that renders it (a base reached through `..`)."""
    return not under(path, chain[-1].dir)


def into_overlay(
    through: WriteThrough,
    old: Mapping[str, Any],
    identity: Identity,
    chain: list[Kustomization],
    base_name: str,
) -> str | None:
    """Move the changes `through` would make to the inherited file `old` into the root
    kustomization (`chain[-1]`): `through.document` becomes `old` again and `through.edits`
    gains the root's new entries. A problem when a change cannot be written there."""
    root = chain[-1]
    for directory in through.edits:
        if not under(directory, root.dir):
            path = through.edits[directory].path
            return f"inherited from {path}, which would have to change"
    doc = through.document
    problem = _images(through, old, root)
    if problem is None and identity.kind in REPLICA_KINDS:
        problem = _replicas(through, old, root, base_name)
    if problem is not None:
        return problem
    if doc != old:
        return f"inherited from the base: fields besides images and replicas changed ({root.path})"
    return None


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
