"""What a final build of a branch leaves to the next one: target indexes, parsed
kustomization trees, documents retained or failing, and what the encryption upkeep knows.
Each is kept for the folder tree it describes, so a build reuses it only while that tree is
unchanged (and re-reads only new blobs when it changed)."""

from __future__ import annotations

import posixpath
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import pygit2
from pygit2.enums import FileMode

from kubescribe.git.chain import read_file
from kubescribe.git.index import TargetIndex, folder_tree
from kubescribe.git.records import Failing
from kubescribe.git.targets import TargetConfig
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.identity import Identity
from kubescribe.mirror.kustomize import Tree
from kubescribe.mirror.roots import Forest, discover

MAX_DISCOVERED = 65536  # directories remembered by `discover`


@dataclass
class BuildCache:
    """What a final build leaves to the next one of its branch (see `save`)."""

    indexes: dict[tuple[TargetKey, str], TargetIndex] = field(default_factory=dict)
    retained: dict[TargetKey, set[Identity]] = field(default_factory=dict)
    failing: dict[TargetKey, Failing] = field(default_factory=dict)
    # Encryption upkeep: (folder tree, upkeep key) known to be in step, per target; the
    # recipients of encrypted blobs; blobs that could not be re-encrypted, per upkeep key.
    upkept: dict[TargetKey, tuple[pygit2.Oid | None, Any]] = field(default_factory=dict)
    file_recipients: dict[pygit2.Oid, frozenset[str] | None] = field(default_factory=dict)
    rekey_failed: set[tuple[pygit2.Oid, Any]] = field(default_factory=set)
    # Parsed kustomization trees, by (target, root): (target folder tree, tree).
    ktrees: dict[tuple[TargetKey, str], tuple[pygit2.Oid | None, Any]] = field(default_factory=dict)
    # Where kustomizations are below a directory, by its tree id and depth (`mirror.roots`).
    discovered: dict[tuple[Any, int], tuple[str, ...]] = field(default_factory=dict)
    # Folders found to hold no kustomization, by (target, root): the folder tree.
    plain: dict[tuple[TargetKey, str], pygit2.Oid | None] = field(default_factory=dict)
    # Targets written through a kustomization: (folder, kustomize settings) it was seen with.
    kustomized: dict[TargetKey, tuple[str, Any]] = field(default_factory=dict)

    def keep_only(self, targets: Mapping[TargetKey, TargetConfig]) -> None:
        """Forget the targets (and folders) no longer written."""
        wanted = {(t.key, t.folder) for t in targets.values()}
        for stale in [k for k in self.indexes if k not in wanted]:
            del self.indexes[stale]
        for gone in [k for k in self.failing if k not in targets]:
            del self.failing[gone]

    def clear(self) -> None:
        self.indexes.clear()
        self.ktrees.clear()
        self.plain.clear()
        self.discovered.clear()
        self.upkept.clear()
        self.file_recipients.clear()

    def kustomizations(
        self, repo: pygit2.Repository, root: pygit2.Oid | None, config: TargetConfig
    ) -> Tree | None:
        """The kustomization tree at the target's root in the root tree `root` (None: none;
        `KustomizeError` and others when it cannot be read). Parsed once per folder tree: a
        build takes the cached tree (and edits it); `save` gives it back for the tree it
        built, a failed build drops it."""
        kz = config.kustomize
        if kz is None:
            return None
        top = posixpath.normpath(posixpath.join(config.folder, kz.root or "."))
        top = "" if top == "." else top
        folder_id = folder_tree(repo, root, config.folder)
        cached = self.ktrees.pop((config.key, top), None)
        if cached is not None and cached[0] == folder_id and folder_id is not None:
            tree: Tree | None = cached[1]
            return tree
        if self.plain.get((config.key, top)) == folder_id and folder_id is not None:
            return None

        def read(path: str) -> bytes | None:
            return read_file(repo, root, path)

        tree = Tree.load(top, read, config.folder)
        if tree is None and not kz.root and folder_id is not None:
            # no root kustomization: the app directories' kustomizations, if any (a forest)
            if len(self.discovered) > MAX_DISCOVERED:
                self.discovered.clear()
            found = discover(lambda oid: _entries(repo, oid), folder_id, self.discovered)
            dirs = [posixpath.join(top, d) if top else d for d in found]
            tree = Forest.load_forest(top, dirs, read, config.folder) if dirs else None
        if tree is None:
            self.plain[(config.key, top)] = folder_id
        return tree

    def index(
        self,
        repo: pygit2.Repository,
        root: pygit2.Oid | None,
        config: TargetConfig,
        ktree: Tree | None,
        log: Any,
    ) -> TargetIndex:
        """The target's index in the root tree `root` (not a copy): the cached one while the
        folder tree and the kustomization root it is read through are the same, otherwise
        built again (reading only blobs the cached one does not know)."""
        key = (config.key, config.folder)
        cached = self.indexes.get(key)
        tree_id = folder_tree(repo, root, config.folder)
        translation = ("kustomize", ktree.root) if ktree is not None else None
        if cached is not None and cached.tree_id == tree_id and cached.translation == translation:
            return cached
        started = time.perf_counter()
        index = TargetIndex.build(
            repo,
            root,
            config.folder,
            cached,
            ktree.rendered_identity if ktree is not None else None,
            translation,
        )
        self.indexes[key] = index
        log.info(
            "build.indexed",
            target=str(config.key),
            documents=len(index),
            duplicates=len(index.duplicates),
            seconds=round(time.perf_counter() - started, 3),
        )
        return index

    def save(
        self,
        repo: pygit2.Repository,
        root: pygit2.Oid | None,
        targets: Mapping[TargetKey, TargetConfig],
        built: BuiltState,
    ) -> None:
        """A final build's state, for the root tree `root` it built."""
        for key, ktree in built.ktrees.items():
            if ktree is not None:
                folder_id = folder_tree(repo, root, targets[key].folder)
                self.ktrees[(key, ktree.root)] = (folder_id, ktree)
                self.kustomized[key] = (targets[key].folder, targets[key].kustomize)
        for key, index in built.indexes.items():
            index.tree_id = folder_tree(repo, root, index.folder)
            self.indexes[(key, index.folder)] = index
            self.retained[key] = built.retained[key]
            self.failing[key] = built.failing[key]
        for key, upkept in built.upkept.items():
            # Everything written in this build was rendered for the same recipients.
            folder = targets[key].folder
            self.upkept[key] = (folder_tree(repo, root, folder), upkept)


def _entries(repo: pygit2.Repository, oid: Any) -> Iterator[tuple[str, bool, bool, Any]]:
    """(name, is a directory, is a symlink, id) of the entries of the tree `oid`."""
    node = repo[oid]
    if not isinstance(node, pygit2.Tree):
        return
    for entry in node:
        try:
            name = (entry.raw_name or b"").decode()
        except UnicodeDecodeError:
            continue  # not a name a kustomization or its directory can have here
        tree, link = entry.filemode == FileMode.TREE, entry.filemode == FileMode.LINK
        yield name, tree, link, entry.id


@dataclass
class BuiltState:
    """A build's working state per target, started from the cache (see `BuildCache.save`).
    `ktrees`: the kustomization tree each kustomized target writes through (None: a plain
    folder); `failing`: documents that could not be written and wait for a change."""

    indexes: dict[TargetKey, TargetIndex] = field(default_factory=dict)
    retained: dict[TargetKey, set[Identity]] = field(default_factory=dict)
    failing: dict[TargetKey, Failing] = field(default_factory=dict)
    ktrees: dict[TargetKey, Tree | None] = field(default_factory=dict)
    upkept: dict[TargetKey, Any] = field(default_factory=dict)
