"""The file edits of one commit, checked against the target's index before they apply."""

from __future__ import annotations

import pygit2

from kubescribe.git.index import Entry, TargetIndex
from kubescribe.mirror.identity import Identity


class Plan:
    """What one commit writes and deletes in a target: documents (by identity), the
    kustomizations it edits, and multi-document files. `apply` makes it the index's."""

    def __init__(self, index: TargetIndex) -> None:
        self.index = index
        self.writes: dict[Identity, Entry] = {}
        self.deletes: dict[Identity, Entry] = {}
        self._written: dict[str, Identity] = {}
        self._freed: set[str] = set()
        # Kustomizations this commit edits (by directory) and their new blobs (by path).
        self.kustomizations: set[str] = set()
        self.files: dict[str, pygit2.Oid | None] = {}  # None: the file goes
        self.paths: dict[Identity, str] = {}  # what a change touched when not its own file
        # Multi-document files this commit edits: their new content (None: the file goes).
        self.multi: dict[str, bytes | None] = {}
        self.left: set[str] = set()  # files of the folder a moved target left, removed

    def free(self, path: str, identity: Identity) -> bool:
        """Whether `identity` may write `path`: never over another document or someone
        else's file, unless this commit deletes that document."""
        owner = self._written.get(path)
        if owner is not None:
            return owner == identity
        return not self.index.blocked(path, identity) or path in self._freed

    def write(self, identity: Identity, entry: Entry) -> None:
        self.writes[identity] = entry
        self._written[entry.path] = identity

    def delete(self, identity: Identity, entry: Entry) -> None:
        self.deletes[identity] = entry
        self._freed.add(entry.path)

    def drop(self, path: str) -> Identity:
        """Take back the write of `path`; the identity it was for."""
        identity = self._written.pop(path)
        del self.writes[identity]
        return identity

    def path_of(self, identity: Identity) -> str:
        """The file a planned change of `identity` touches (its own, or a kustomization)."""
        entry = self.writes.get(identity) or self.deletes.get(identity)
        return entry.path if entry is not None else self.paths[identity]

    def edits(self) -> dict[str, pygit2.Oid | None]:
        """Path -> new blob (None: the file goes), for `tree.edit_tree`."""
        edits: dict[str, pygit2.Oid | None] = {e.path: None for e in self.deletes.values()}
        edits.update(dict.fromkeys(self.left))
        for identity in self.writes:
            old = self.index.get(identity)
            if old is not None and old.path not in self._written:
                edits[old.path] = None  # moved between plain and encrypted
        edits.update((e.path, e.oid) for e in self.writes.values())
        edits.update(self.files)
        edits.update((p, None if d is None else pygit2.hash(d)) for p, d in self.multi.items())
        return edits

    def apply(self) -> None:
        for identity in self.deletes:
            self.index.remove(identity)
        for identity, entry in self.writes.items():
            self.index.set(identity, entry)
        for path, data in self.multi.items():
            if data is None:
                self.index.forget(path)
