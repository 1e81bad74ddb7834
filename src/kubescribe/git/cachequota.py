"""Each namespace's clones within its cache quota (the arithmetic is in `quota`).

The namespace's usage is what its folder holds on disk. A fetch may receive only what is left
of the quota (libgit2's transfer progress aborts it past that), a tidy or a batch's pack may
write only as much; the branch workers of one namespace take turns for these, so each sees
what the others left. A namespace found over its quota (a quota lowered since, a clone of an
earlier run) is refused before a write.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from kubescribe import metrics
from kubescribe.api import conditions as c
from kubescribe.git.quota import allowance, exceeds, refusal_message
from kubescribe.git.repo import CacheBusy, TransferTooLarge

T = TypeVar("T")


class CacheQuotaExceeded(Exception):
    """The namespace's clones would hold more than its quota: the target is refused and the
    clone removed (the message is fixed, with the quota's figure only)."""

    reason = c.CACHE_QUOTA_EXCEEDED

    def __init__(self, quota: int) -> None:
        super().__init__(refusal_message(quota))


class NamespaceCache:
    """The folder of one namespace's clones and its quota in bytes (0: none); shared by the
    namespace's branch workers, each calling from its own thread."""

    turn_timeout = 60.0
    """Seconds a writer waits for the namespace's other fetches and tidies before `CacheBusy`."""

    def __init__(self, directory: Path, quota: int = 0, namespace: str = "") -> None:
        self.directory = directory
        self.quota = quota
        self._turn = threading.Lock()
        self._bytes = metrics.CACHE_BYTES.labels(namespace)
        self._refusals = metrics.CACHE_QUOTA_REFUSALS.labels(namespace)

    def usage(self) -> int:
        """Bytes the namespace's folder holds now (also exported as a metric)."""
        size = folder_size(self.directory)
        self._bytes.set(size)
        return size

    @contextlib.contextmanager
    def room(self) -> Iterator[int | None]:
        """The namespace's turn to grow its clones: yields how many bytes it may add (None
        without a quota; then nobody waits for a turn). `CacheBusy` after `turn_timeout`
        behind the namespace's other writers (a transfer that hangs holds the turn)."""
        if self.quota <= 0:
            yield None
            return
        if not self._turn.acquire(timeout=self.turn_timeout):
            raise CacheBusy(
                f"other fetches of this namespace held its cache for over {self.turn_timeout:g}s"
            )
        try:
            yield allowance(self.quota, self.usage())
        finally:
            self._turn.release()

    def fetch(self, fetch: Callable[[int | None], T]) -> T:
        """`fetch(limit)` in the namespace's turn; CacheQuotaExceeded when it would receive
        more than is left, or left the namespace over its quota."""
        with self.room() as limit:
            try:
                result = fetch(limit)
            except TransferTooLarge:
                raise CacheQuotaExceeded(self.quota) from None
            self.check()
        return result

    def check(self) -> None:
        """CacheQuotaExceeded when the namespace's clones hold more than its quota."""
        if exceeds(self.quota, self.usage()):
            raise CacheQuotaExceeded(self.quota)

    def refused(self) -> None:
        """Count a refusal (once per refused write or fetch)."""
        self._refusals.inc()


def folder_size(directory: Path) -> int:
    """The size of every file under `directory` (0 when it does not exist)."""
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # a pack removed meanwhile
                total += os.lstat(os.path.join(root, name)).st_size
    return total
