"""Builds of the branches that share one cache repository run side by side; a repack runs alone.

Two branch workers of one remote share its cache (one object store per remote). A repack
removes the packs the other worker may be reading, so it waits until no build runs, and
builds wait while it runs. `generation` counts repacks: a repository instance opened before
the latest one still maps removed packs and must be opened afresh.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator


class CacheLock:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._users = 0
        self._exclusive = False
        self._waiting = 0  # exclusive requests waiting: new shared users let them go first
        self.generation = 0

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._exclusive and not self._waiting)
            self._users += 1
        try:
            yield
        finally:
            with self._cond:
                self._users -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            self._cond.wait_for(lambda: not self._exclusive and not self._users)
            self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self.generation += 1
                self._cond.notify_all()
