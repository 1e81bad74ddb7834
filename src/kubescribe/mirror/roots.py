"""Several kustomize roots in one target folder: which kustomization a live object belongs to.

A folder may hold one kustomization per app directory (`apps/web/`, `apps/api/`), with no
kustomization above them (a *forest*: Flux and Argo CD render each directory, or generate a
kustomization of the folder), or with a root whose `resources:` list the app directories.
Every kustomization at the root's directory or under it is a *home*: a new object is listed in
one of them, never in a base reached through `..` (an overlay's base stays the overlay's).

The rule for a new object (first that applies; ties go to the home with most documents, then
the first path):

1. a home that lists an object of the same namespace named like the new one, or like its
   `app.kubernetes.io/name` (or `app`) label: a Service `web` goes where Deployment `web` is;
2. a home whose kustomizations set `namespace:` to the object's namespace;
3. the home that lists most documents of the object's namespace (cluster-scoped objects: of
   none);
4. the root; in a forest, none: the object is a plain file at its layout path.

Homes whose kustomizations set another `namespace:` are never chosen (they would rewrite it).
Pure: the tree and the documents already placed come in, a directory goes out.
"""

from __future__ import annotations

import posixpath
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from kubescribe.mirror.identity import Identity
from kubescribe.mirror.kustomize import (
    KUSTOMIZATION_FILES,
    MAX_BASES_DEPTH,
    MAX_KUSTOMIZATIONS,
    MAX_TREE_BYTES,
    Kustomization,
    KustomizeError,
    Tree,
    kustomization_at,
    namespace_of,
    namespaced,
)

APP_LABELS = ("app.kubernetes.io/name", "app")
MAX_FOREST_DEPTH = 4  # directory levels below the folder searched for app kustomizations


class Forest(Tree):
    """A folder without a root kustomization whose app directories hold kustomizations. Its
    root is a stand-in listing them (never written): each is rendered on its own."""

    @classmethod
    def load_forest(
        cls, top: str, dirs: Iterable[str], read: Callable[[str], bytes | None], folder: str = ""
    ) -> Forest:
        """The forest of the kustomizations of `dirs` under `top`; those another one lists
        are its bases (rendered through it), the others are roots."""
        dirs = sorted(set(dirs))
        if len(dirs) > MAX_KUSTOMIZATIONS:
            raise KustomizeError(f"{top or '.'}: more than {MAX_KUSTOMIZATIONS} kustomizations")
        included: set[str] = set()
        size = 0
        for directory in dirs:
            path, raw = _found(read, directory)
            size += len(raw)
            if size > MAX_TREE_BYTES:
                raise KustomizeError(f"{path}: the kustomizations exceed {MAX_TREE_BYTES} bytes")
            for entry in Kustomization.parse(path, raw).resources():
                included.add(posixpath.normpath(posixpath.join(directory, str(entry))))
        tops = [d for d in dirs if d not in included]
        stand_in = CommentedMap(resources=CommentedSeq(_relative(d, top) for d in tops))
        forest = cls(top, folder=folder)
        forest._add(Kustomization(posixpath.join(top, "kustomization.yaml"), stand_in), None, read)
        for directory in dirs:
            if directory not in forest.kustomizations:
                raise KustomizeError(f"{directory}: its kustomization is in a cycle of bases")
        return forest

    def build_roots(self) -> list[str]:
        """The directories `kustomize build` renders the folder from."""
        return [d for d, parent in sorted(self.parents.items()) if parent == self.root]


def _found(read: Callable[[str], bytes | None], directory: str) -> tuple[str, bytes]:
    found = kustomization_at(read, directory)
    if found is None:
        raise KustomizeError(f"{directory}: its kustomization is not a file")
    return found


def _relative(path: str, top: str) -> str:
    return posixpath.relpath(path, top or ".")


def build_roots(tree: Tree) -> list[str]:
    """The directories `kustomize build` renders a tree from: its root, or a forest's roots."""
    return tree.build_roots() if isinstance(tree, Forest) else [tree.root]


def under(path: str, directory: str) -> bool:
    return not directory or path == directory or path.startswith(directory + "/")


def _is_home(directory: str, roots: list[str]) -> bool:
    return any(under(directory, root) for root in roots)


def homes(tree: Tree) -> list[str]:
    """The kustomizations a new object may be listed in: the root (a forest's roots) and
    those under its directory."""
    roots = build_roots(tree)
    return sorted(d for d in tree.kustomizations if _is_home(d, roots))


def home_of(tree: Tree, lister: str) -> str | None:
    """The home a kustomization is rendered through: itself, or the nearest one including it."""
    roots = build_roots(tree)
    current: str | None = lister
    for _ in range(MAX_BASES_DEPTH + 1):
        if current is None:
            return None
        if _is_home(current, roots):
            return current
        current = tree.parents.get(current)
    return None


def home_for_path(tree: Tree, path: str) -> str | None:
    """The innermost home whose directory holds the file `path`."""
    holding = [d for d in homes(tree) if under(path, d) and d != path]
    return max(holding, key=len) if holding else None


@dataclass
class Siblings:
    """The documents placed so far, by home: by (namespace, name), and counted by namespace."""

    by_name: dict[tuple[str, str], str] = field(default_factory=dict)
    by_namespace: dict[str, Counter[str]] = field(default_factory=dict)
    sizes: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, tree: Tree, documents: Iterable[tuple[Identity, str]]) -> Siblings:
        """From the (identity, file path) of each document of the folder."""
        siblings = cls()
        for identity, path in documents:
            lister = tree.listed.get(path)
            home = home_of(tree, lister) if lister is not None else None
            if home is not None:
                siblings.add(identity, home)
        return siblings

    def add(self, identity: Identity, home: str) -> None:
        self.by_name.setdefault((identity.namespace, identity.name), home)
        self.by_namespace.setdefault(identity.namespace, Counter())[home] += 1
        self.sizes[home] += 1


def choose_home(
    tree: Tree, identity: Identity, live: Mapping[str, Any], siblings: Siblings
) -> str | None:
    """The home of a new object by the module's rule; None: a plain file (forest only)."""
    allowed = [h for h in homes(tree) if _may_hold(tree, h, identity)]
    if not allowed:
        return None if isinstance(tree, Forest) else tree.root
    labels = (live.get("metadata") or {}).get("labels") or {}
    names = [identity.name] + [
        str(labels[k]) for k in APP_LABELS if isinstance(labels, Mapping) and labels.get(k)
    ]
    for name in names:
        home = siblings.by_name.get((identity.namespace, name))
        if home in allowed:
            return home
    if identity.namespace and namespaced(identity):
        setting = [h for h in allowed if namespace_of(tree.chain(h)) == identity.namespace]
        if setting:
            return _largest(setting, siblings)
    counted = siblings.by_namespace.get(identity.namespace, Counter())
    holding = [h for h in allowed if counted[h]]
    if holding:
        return min(holding, key=lambda h: (-counted[h], -siblings.sizes[h], h))
    return None if isinstance(tree, Forest) else tree.root


def _largest(candidates: list[str], siblings: Siblings) -> str:
    return min(candidates, key=lambda h: (-siblings.sizes[h], h))


def _may_hold(tree: Tree, home: str, identity: Identity) -> bool:
    """Whether a home renders an object in its namespace (none of its chain sets another)."""
    namespace = namespace_of(tree.chain(home))
    return not (namespace and namespaced(identity) and namespace != identity.namespace)


def describe(tree: Tree, folder: str) -> str:
    """The kustomizations a target writes through, for status messages."""
    roots = [tree.kustomizations[d].path for d in build_roots(tree)]
    shown = ", ".join(roots[:3]) + (f" and {len(roots) - 3} more" if len(roots) > 3 else "")
    return shown or f"{folder or '.'} (no kustomization)"


Entries = Callable[[Hashable], Iterable[tuple[str, bool, bool, Hashable]]]


def discover(
    entries: Entries, top: Hashable, memo: dict[tuple[Hashable, int], tuple[str, ...]] | None = None
) -> list[str]:
    """The directories under `top` (down to `MAX_FOREST_DEPTH` levels, relative to it) that
    hold a kustomization, not looking further into one that does, nor into hidden ones.
    `entries(key)` gives (name, is a directory, is a symlink, key) of a directory's entries;
    `memo` keeps what a directory's key (a tree id: its content) holds, so a changed folder is
    searched again only along what changed. A kustomization that is a symlink is refused
    (`KustomizeError`): it could stand for any file of the repository."""
    memo = {} if memo is None else memo

    def walk(key: Hashable, depth: int) -> tuple[str, ...]:
        known = memo.get((key, depth))
        if known is not None:
            return known
        listing = list(entries(key))
        found: tuple[str, ...] = ()
        names = {name for name, *_ in listing}
        if depth and names.intersection(KUSTOMIZATION_FILES):
            for name, _, link, _ in listing:
                if name in KUSTOMIZATION_FILES and link:
                    raise KustomizeError(f"a kustomization {name} is a symlink")
            found = ("",)
        elif depth < MAX_FOREST_DEPTH:
            found = tuple(
                posixpath.join(name, inner) if inner else name
                for name, is_dir, link, child in listing
                if is_dir and not link and not name.startswith(".")
                for inner in walk(child, depth + 1)
            )
        if len(found) > MAX_KUSTOMIZATIONS:
            raise KustomizeError(f"more than {MAX_KUSTOMIZATIONS} kustomizations")
        memo[(key, depth)] = found
        return found

    return sorted(walk(top, 0))
