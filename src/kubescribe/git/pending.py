"""Objects a build writes stay in memory until the batch is final, then go to disk as one pack.

A commit per change writes about six objects (a blob, the trees on its path, the commit). As
loose objects that is six file creations per change, which set the pace of a burst; in memory
it is a dict insert. The store is a libgit2 object-database backend with the highest priority,
so every write through the repository (tree builders, commits, signed commits) lands here and
every read finds the pending objects first; `flush` writes them as one pack before the push
that needs them on disk, `discard` drops the objects of a build that is thrown away.
"""

from __future__ import annotations

from collections.abc import Iterator

import pygit2

from kubescribe.git.pack import write_objects

# Above the pack (2) and loose (1) backends libgit2 adds by default: writes come here first.
_PRIORITY = 1000


class PendingObjects(pygit2.OdbBackend):
    """The in-memory backend of one repository instance; used on one thread only.

    pygit2 calls the `*_cb` methods from libgit2; raising KeyError means "not here", so
    libgit2 goes on to the pack and loose backends.
    """

    def __init__(self, repo: pygit2.Repository) -> None:
        super().__init__()
        # The path, not the repository: the repository holds this backend, and a reference
        # back would keep both (and every pack file they opened) alive after the writer
        # drops them.
        self._git_dir = repo.path
        self._objects: dict[pygit2.Oid, tuple[int, bytes]] = {}
        repo.odb.add_backend(self, _PRIORITY)

    def __len__(self) -> int:
        return len(self._objects)

    def flush(self, max_bytes: int | None = None) -> int:
        """Write the pending objects as one pack of at most `max_bytes` (`PackTooLarge` past
        it); returns how many were written.

        Uncompressed: deflating is most of the cost of a batch's pack (a tree is mostly object
        ids, which do not compress), and the cache's upkeep compresses what it keeps."""
        count = len(self._objects)
        if count:
            objects = ((oid.raw, kind, data) for oid, (kind, data) in self._objects.items())
            write_objects(self._git_dir, objects, level=0, max_bytes=max_bytes)
            self._objects.clear()
        return count

    def discard(self) -> None:
        self._objects.clear()

    # -- libgit2 backend callbacks ---------------------------------------------------------
    def write_cb(self, oid: pygit2.Oid, data: bytes, kind: int) -> None:
        self._objects[oid] = (kind, data)

    def read_cb(self, oid: pygit2.Oid) -> tuple[int, bytes]:
        return self._objects[oid]

    def read_prefix_cb(self, oid: pygit2.Oid) -> tuple[int, bytes, pygit2.Oid]:
        # Lookups by full id come through here too; the writer never uses short ids.
        kind, data = self._objects[oid]
        return kind, data, oid

    def read_header_cb(self, oid: pygit2.Oid) -> tuple[int, int]:
        kind, data = self._objects[oid]
        return kind, len(data)

    def exists_cb(self, oid: pygit2.Oid) -> bool:
        return oid in self._objects

    def exists_prefix_cb(self, oid: pygit2.Oid) -> pygit2.Oid:
        if oid in self._objects:
            return oid
        raise KeyError(oid)

    def refresh_cb(self) -> None:
        """Nothing on disk to rescan."""

    def __iter__(self) -> Iterator[pygit2.Oid]:
        return iter(list(self._objects))
