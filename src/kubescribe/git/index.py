"""Which document lives where: identity -> (path, blob) for one target folder in one tree.

Git is never read as the authority for what an object contains, but it is the authority for
*where* a document lives: a file a human moved or created at a custom path is found by the
identity it holds and edited in place.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pygit2
import yaml
from pygit2.enums import FileMode

from kubescribe import metrics
from kubescribe.git.lookup_names import lookup_name
from kubescribe.mirror import boundedyaml
from kubescribe.mirror.docedit import is_multi, split
from kubescribe.mirror.identity import Identity, identity_from_header, identity_of
from kubescribe.mirror.yamlfmt import load_yaml

YAML_SUFFIXES = (".yaml", ".yml")
# What a blob holds: one identity (or None), or the identities of a multi-document file.
Held = Identity | None | tuple[Identity | None, ...]

_BLOB_MODES = frozenset({FileMode.BLOB, FileMode.BLOB_EXECUTABLE})

# A header value the emitter would have written unquoted. Anything else (a trailing
# comment, an anchor, a block scalar indicator) may mean something else: parse the file.
_PLAIN_VALUE = re.compile(r"[^\s&*!|>%@`{\[]\S*")
# A document separator or end marker at the start of a line: possibly several documents.
_DOCUMENT_MARKER = re.compile(rb"^(?:---|\.\.\.)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Entry:
    """A document's file: path relative to the repository root, and its blob."""

    path: str
    oid: pygit2.Oid
    multi: bool = False  # one of several documents of the file at `path`
    held: Identity | None = None  # a multi-document file's own identity of it (untranslated)
    # The blob is the operator's own rendering (written by this process): the next change
    # renders afresh without parsing the file to find out.
    rendered: bool = False


def identify_all(data: bytes) -> Held:
    """`identify`, or for a file of several documents the identity of each."""
    if _DOCUMENT_MARKER.search(data) is not None and is_multi(data):
        return tuple(part.identity for part in split(data))
    return identify(data)


def identify(data: bytes) -> Identity | None:
    """The identity a file holds; None for anything that is not one Kubernetes object
    (other YAML, multi-document files, invalid YAML). Raises `boundedyaml.RefusedYaml` for
    a file it will not parse (too large, too deep, too many nodes)."""
    if _DOCUMENT_MARKER.search(data) is None:
        found = identity_from_header(data)
        values = (found.group, found.kind, found.namespace, found.name) if found else ()
        if found is not None and all(_PLAIN_VALUE.fullmatch(v) for v in values if v):
            return found
    try:
        boundedyaml.check(data, expanded=False)  # only the identity is read: aliases stay shared
        obj = load_yaml(data)
    except (yaml.YAMLError, ValueError):  # ValueError: not UTF-8
        return None
    return identity_of(obj) if isinstance(obj, dict) else None


class TargetIndex:
    """identity -> Entry for the `*.yaml` and `*.yml` files under one folder ('' = repository
    root); each document of a multi-document file is an entry of its own (`Entry.multi`).

    `tree_id` is the id of the folder's tree the index describes (None: the folder does not
    exist). Files that hold no identity are remembered by path so nothing overwrites them.
    When two files hold the same identity, the first in tree order is the document and the
    others are listed in `duplicates` and left alone. Files too large to read (over
    `boundedyaml.MAX_FILE_BYTES`, or over its node cap) are never parsed: they are left alone
    like unidentified files and listed in `oversized`.
    """

    def __init__(self, folder: str, tree_id: pygit2.Oid | None = None) -> None:
        self.folder = folder
        self.tree_id = tree_id
        self._entries: dict[Identity, Entry] = {}
        self._by_path: dict[str, Identity | None] = {}
        self._unidentified: set[pygit2.Oid] = set()
        # What each blob of the folder holds, as read (before any translation).
        self._blob_ids: dict[pygit2.Oid, Held] = {}
        # Blobs too large to read, with why; (path, why) of the files that hold them.
        self._oversized_blobs: dict[pygit2.Oid, str] = {}
        self.oversized: list[tuple[str, str]] = []
        self.duplicates: list[str] = []
        # (path of the ignored copy, identity, path of the document that counts)
        self.duplicated: list[tuple[str, Identity, str]] = []
        # Which translation keyed this index (see `build`); None: identities as in the files.
        self.translation: object = None

    @classmethod
    def build(
        cls,
        repo: pygit2.Repository,
        root: pygit2.Oid | None,
        folder: str,
        previous: TargetIndex | None = None,
        translate: Callable[[str, Identity], Identity | None] | None = None,
        translation: object = None,
    ) -> TargetIndex:
        """Index `folder` in the root tree `root`. Blobs already known to `previous` are not
        read again, so re-indexing after a fetch costs only the new blobs.

        `translate(path, identity)` gives the identity a file's document is known by (a
        kustomization renames or re-namespaces the documents it lists); `translation` names
        it, so a cached index is reused only under the same one."""
        tree_id = folder_tree(repo, root, folder)
        index = cls(folder, tree_id)
        index.translation = translation
        if tree_id is None:
            return index
        known: dict[pygit2.Oid, Held] = {}
        if previous is not None:
            index._oversized_blobs.update(previous._oversized_blobs)
            known.update(previous._blob_ids)
            if previous.translation is None:
                known.update(
                    (e.oid, ident) for ident, e in previous._entries.items() if not e.multi
                )
            known.update(dict.fromkeys(previous._unidentified))
        prefix = f"{folder}/" if folder else ""
        index._walk(repo, repo[tree_id], prefix, known, translate)
        return index

    def _walk(
        self,
        repo: pygit2.Repository,
        tree: pygit2.Object,
        prefix: str,
        known: dict[pygit2.Oid, Held],
        translate: Callable[[str, Identity], Identity | None] | None = None,
    ) -> None:
        assert isinstance(tree, pygit2.Tree)
        for entry in tree:
            name = entry.name
            assert name is not None
            if entry.filemode == FileMode.TREE:
                self._walk(repo, repo[entry.id], f"{prefix}{name}/", known, translate)
                continue
            if entry.filemode not in _BLOB_MODES or not name.endswith(YAML_SUFFIXES):
                continue
            oid = entry.id
            path = prefix + name
            if oid in known:
                held = known[oid]
            else:
                read = self._oversized_blobs.get(oid) or self._read(repo, oid)
                if isinstance(read, str):  # too large to read: why
                    self._oversized_blobs[oid] = read
                    self.oversized.append((path, read))
                    self._by_path[path] = None  # nothing is written over it
                    continue
                held = read
            self._blob_ids[oid] = held
            if isinstance(held, tuple):
                self._by_path[path] = None  # nothing else is written over it
                for found in held:
                    known_as = found
                    if found is not None and translate is not None:
                        known_as = translate(path, found)
                    if known_as is not None:
                        self._add(known_as, Entry(path, oid, multi=True, held=found))
                continue
            identity = held
            if identity is not None and translate is not None:
                identity = translate(path, identity)
            if identity is None:
                self._unidentified.add(oid)
                self._by_path[path] = None
            elif self._add(identity, Entry(path, oid)):
                self._by_path[path] = identity
            else:
                self._by_path[path] = None

    def _read(self, repo: pygit2.Repository, oid: pygit2.Oid) -> Held | str:
        """What a blob holds, or why it is too large to read (its size is checked before
        it is loaded; a file refused for other bounds holds nothing)."""
        _, size = repo.odb.read_header(oid)
        if size > boundedyaml.MAX_FILE_BYTES:
            metrics.REFUSED_FILES.labels(boundedyaml.TOO_LARGE).inc()
            return f"{size} bytes, more than the {boundedyaml.MAX_FILE_BYTES >> 20} MiB cap"
        blob = repo[oid]
        assert isinstance(blob, pygit2.Blob)
        try:
            return identify_all(blob.data)
        except boundedyaml.RefusedYaml as refused:
            metrics.REFUSED_FILES.labels(refused.reason).inc()
            if refused.reason == boundedyaml.TOO_MANY_NODES:
                return str(refused)
            return None

    def _add(self, identity: Identity, entry: Entry) -> bool:
        """Index a document found in the tree; False for a second copy of an identity (the
        first in tree order counts, the others are left alone and listed)."""
        first = self._entries.get(identity)
        if first is not None:
            self.duplicates.append(entry.path)
            self.duplicated.append((entry.path, identity, first.path))
            return False
        self._entries[identity] = entry
        return True

    def copy(self) -> TargetIndex:
        new = TargetIndex(self.folder, self.tree_id)
        new._entries = dict(self._entries)
        new._by_path = dict(self._by_path)
        new._unidentified = set(self._unidentified)
        new._blob_ids = self._blob_ids
        new._oversized_blobs = self._oversized_blobs
        new.oversized = list(self.oversized)
        new.duplicates = list(self.duplicates)
        new.duplicated = list(self.duplicated)
        new.translation = self.translation
        return new

    def get(self, identity: Identity) -> Entry | None:
        return self._entries.get(identity)

    def holds(self, path: str) -> bool:
        """Whether the file at `path` is indexed as a document."""
        return self._by_path.get(path) is not None

    def blocked(self, path: str, identity: Identity) -> bool:
        """Whether a file other than `identity`'s document lives at `path`."""
        return path in self._by_path and self._by_path[path] != identity

    def set(self, identity: Identity, entry: Entry) -> None:
        old = self._entries.get(identity)
        if old is not None and self._by_path.get(old.path) == identity:
            del self._by_path[old.path]
        self._entries[identity] = entry
        self._by_path[entry.path] = None if entry.multi else identity

    def forget(self, path: str) -> None:
        """The file at `path` is gone (the last document of a multi-document file)."""
        self._by_path.pop(path, None)

    def remove(self, identity: Identity) -> Entry | None:
        old = self._entries.pop(identity, None)
        if old is not None and self._by_path.get(old.path) == identity:
            del self._by_path[old.path]
        return old

    def __contains__(self, identity: object) -> bool:
        return identity in self._entries

    def __iter__(self) -> Iterator[Identity]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


def folder_tree(repo: pygit2.Repository, root: pygit2.Oid | None, folder: str) -> pygit2.Oid | None:
    """The id of `folder`'s tree inside the root tree `root`; None if there is none."""
    if root is None:
        return None
    if not folder:
        return root
    tree = repo[root]
    assert isinstance(tree, pygit2.Tree)
    try:
        entry = tree[lookup_name(folder)]
    except KeyError:
        return None
    return entry.id if entry.filemode == FileMode.TREE else None
