"""Resume cursors of watch streams: how far each stream's changes are durable in Git.

A stream's record is the resourceVersion of its last pushed change and the objects it knew at
that point (namespace/name keys), saved only after the push (the ack). A replica that takes a
stream over, or restarts, resumes the watch from there instead of listing everything again; when
the API server no longer has that version (410) it re-lists, and the known keys let it tell
which objects were deleted meanwhile, also under the `OnEvent` prune mode.

`fingerprint` ties a record to the stream's configuration (selectors, operations): a record of
another configuration is not resumed from.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

ObjectKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True)
class StreamCursor:
    resource_version: str
    known: frozenset[ObjectKey]


class CursorStore(Protocol):
    async def load(self, stream: str, fingerprint: str) -> StreamCursor | None: ...

    async def save(
        self,
        stream: str,
        fingerprint: str,
        resource_version: str,
        added: Iterable[ObjectKey],
        removed: Iterable[ObjectKey],
        *,
        replace: bool,
    ) -> None:
        """Record the stream's cursor; `replace`: `added` is the whole known set."""
        ...

    async def close(self) -> None: ...


class NoCursorStore:
    """A single replica without Redis: every start lists its streams afresh."""

    async def load(self, stream: str, fingerprint: str) -> StreamCursor | None:
        return None

    async def save(
        self,
        stream: str,
        fingerprint: str,
        resource_version: str,
        added: Iterable[ObjectKey],
        removed: Iterable[ObjectKey],
        *,
        replace: bool,
    ) -> None:
        return None

    async def close(self) -> None:
        return None


def encode_key(key: ObjectKey) -> str:
    return f"{key[0]}/{key[1]}"


def decode_key(text: str) -> ObjectKey:
    namespace, _, name = text.partition("/")
    return namespace, name
