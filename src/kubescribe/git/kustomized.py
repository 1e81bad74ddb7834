"""What a build reads of a kustomized target folder besides its kustomizations: documents of
listed multi-document files, the documents placed so far (where a new one goes, see
`mirror.roots`), and the placement the target reports in status."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

import pygit2

from kubescribe.git.chain import read_file
from kubescribe.git.index import Entry, TargetIndex
from kubescribe.git.records import PlacementReport, RootReport
from kubescribe.mirror import boundedyaml
from kubescribe.mirror.identity import Identity, identity_of
from kubescribe.mirror.inherit import inherited
from kubescribe.mirror.kustomize import Tree, render_identity
from kubescribe.mirror.layout import ENCRYPTED_SUFFIX
from kubescribe.mirror.roots import Forest, Siblings, home_of, homes
from kubescribe.mirror.yamlfmt import load_yaml, load_yaml_all

MAX_REPORTED = 64  # homes, and kinds of each, named in status


def multi_documents(
    repo: pygit2.Repository, root: pygit2.Oid | None, index: TargetIndex, tree: Tree
) -> dict[Identity, str]:
    """Identities rendered from listed files the index does not hold (several documents, or
    not a single object), by their file."""
    found: dict[Identity, str] = {}
    for path in list(tree.files()):
        if index.holds(path):
            continue
        data = read_file(repo, root, path)
        chain = tree.chain_of(path)
        if data is None or chain is None:
            continue
        try:
            boundedyaml.check(data)
            docs = load_yaml_all(data)
        except Exception:
            continue
        for doc in docs:
            held = identity_of(doc) if isinstance(doc, dict) else None
            if held is not None:
                found.setdefault(render_identity(held, chain), path)
    return found


def old_document(repo: pygit2.Repository, entry: Entry | None) -> Mapping[str, Any] | None:
    """A plain document file's content, as written (None: encrypted or unreadable)."""
    if entry is None or entry.path.endswith(ENCRYPTED_SUFFIX):
        return None
    blob = repo[entry.oid]
    assert isinstance(blob, pygit2.Blob)
    try:
        boundedyaml.check(blob.data)
        loaded = load_yaml(blob.data)
    except Exception:
        return None
    return loaded if isinstance(loaded, dict) else None


def _documents(index: TargetIndex) -> Iterator[tuple[Identity, str]]:
    for identity in index:
        entry = index.get(identity)
        if entry is not None:
            yield identity, entry.path


def siblings(index: TargetIndex, tree: Tree) -> Siblings:
    """The documents of the folder by the home that renders them."""
    return Siblings.of(tree, _documents(index))


def placement(index: TargetIndex, tree: Tree, folder: str) -> PlacementReport:
    """Which kustomization renders the folder's documents: per home, how many and of which
    kinds; how many no kustomization renders (plain files of a forest); the root, and the
    documents inherited from a base reached through `..` (read-only, `mirror.inherit`)."""
    kinds: dict[str, Counter[str]] = {home: Counter() for home in homes(tree)}
    plain = 0
    inherited_objects: list[str] = []
    for identity, path in _documents(index):
        lister = tree.listed.get(path)
        home = home_of(tree, lister) if lister is not None else None
        if home is None:
            plain += 1
            continue
        kind = f"{identity.kind}.{identity.group}" if identity.group else identity.kind
        kinds.setdefault(home, Counter())[kind] += 1
        chain = tree.chain_of(path)
        if chain is not None and inherited(path, chain):
            inherited_objects.append(f"{kind} {identity.ref}")
    roots = tuple(
        RootReport(
            kustomization=_relative(tree.kustomizations[home].path, folder),
            documents=sum(counted.values()),
            kinds=tuple(sorted(counted)[:MAX_REPORTED]),
        )
        for home, counted in sorted(kinds.items())[:MAX_REPORTED]
    )
    forest = isinstance(tree, Forest)
    return PlacementReport(
        forest=forest,
        roots=roots,
        plain=plain,
        root=None if forest else _relative(tree.kustomizations[tree.root].path, folder),
        inherited=len(inherited_objects),
        inherited_objects=tuple(sorted(inherited_objects)[:MAX_REPORTED]),
    )


def _relative(path: str, folder: str) -> str:
    return path[len(folder) + 1 :] if folder and path.startswith(folder + "/") else path
