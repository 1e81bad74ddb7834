"""The threads that do the blocking Git work of every branch writer (issue #35).

One bounded pool serves all writers: an idle writer holds no thread, and the process holds at
most `size` Git threads whatever the number of tenants. Each writer runs through its own `Lane`,
which keeps one call in flight at a time and, in the thread, one after the other (a call whose
awaiting task was cancelled still finishes before the lane's next one: a writer's repository is
never used by two threads at once). A lane has at most one call waiting in the pool's FIFO
queue, so a writer with a thousand queued changes waits its turn like one with a single change:
fair across writers.

A slot is held only for the duration of one write; libgit2's network timeouts
(`configure_network_timeouts`) bound how long a silent remote can keep it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

import pygit2

from kubescribe import metrics

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_SIZE = 8
CONNECT_TIMEOUT_MS = 15_000  # a remote that does not accept the connection
SERVER_TIMEOUT_MS = 60_000  # a remote that stops answering mid-transfer


def configure_network_timeouts(
    connect_ms: int = CONNECT_TIMEOUT_MS, server_ms: int = SERVER_TIMEOUT_MS
) -> None:
    """libgit2's own fetch and push timeouts (HTTP and SSH): none by default."""
    pygit2.settings.server_connect_timeout = connect_ms
    pygit2.settings.server_timeout = server_ms


class GitPool:
    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = max(1, size)
        self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="kubescribe-git")
        self._count = threading.Lock()
        self._busy = 0
        self._waiting = 0
        metrics.GIT_POOL_SIZE.set(self.size)

    def lane(self) -> Lane:
        return Lane(self)

    def _track(self, fn: Callable[[], T], lock: threading.Lock) -> Callable[[], T]:
        self._moved(waiting=1)

        def run() -> T:
            self._moved(waiting=-1, busy=1)
            try:
                with lock:
                    return fn()
            finally:
                self._moved(busy=-1)

        return run

    def _moved(self, *, waiting: int = 0, busy: int = 0) -> None:
        with self._count:
            self._waiting += waiting
            self._busy += busy
            metrics.GIT_POOL_WAITING.set(self._waiting)
            metrics.GIT_POOL_BUSY.set(self._busy)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False)


class Lane:
    """One writer's way into the pool: its calls run one at a time, in order."""

    def __init__(self, pool: GitPool) -> None:
        self.pool = pool
        self._lock = threading.Lock()  # held in the thread: serial even past a cancellation

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        loop = asyncio.get_running_loop()
        call = self.pool._track(lambda: fn(*args, **kwargs), self._lock)
        return await loop.run_in_executor(self.pool._executor, call)

    def later(self, fn: Callable[[], object]) -> None:
        """Run `fn` after this lane's calls, without waiting for it (a writer's close)."""
        self.pool._executor.submit(self.pool._track(fn, self._lock))


_shared: GitPool | None = None


def shared_pool(size: int | None = None) -> GitPool:
    """The process's pool (`size` counts at its first use only); its first use also sets
    libgit2's network timeouts."""
    global _shared  # noqa: PLW0603 - one pool per process
    if _shared is None:
        configure_network_timeouts()
        _shared = GitPool(size or DEFAULT_SIZE)
    return _shared


def close_shared_pool() -> None:
    """Let the process's pool go at its end: idle threads exit at once (while they lived, the
    exit waited its whole margin for them); a call under way finishes on its thread, which
    `Stopper.end` waits for. A later `shared_pool` is a new pool."""
    global _shared  # noqa: PLW0603 - one pool per process
    if _shared is not None:
        _shared.shutdown()
        _shared = None
