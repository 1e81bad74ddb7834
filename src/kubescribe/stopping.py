"""SIGTERM and SIGINT: stop in a bounded time, and never hang.

The first signal cancels the operator's main task; its shutdown writes and pushes what the
writers hold, saves the cursors and releases the Leases within the shutdown timeout. A second
signal exits at once. A watchdog thread is the last resort: when the stop overruns the timeout
by a margin (a blocked event loop, a shutdown step that ignores its bound), it gives the event
loop one second to release the Leases and exits with EXIT_OVERRAN.

After a clean stop, `end` lets the threads still busy (a write the stop gave up on) finish for
at most the margin, then exits 0 without the interpreter's teardown: that teardown joins those
threads without a bound and frees modules and thread states while C extensions may still use
them (a replica aborted there once, on a corrupted heap, in a long rolling-restart run).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import structlog

log = structlog.get_logger(__name__)

EXIT_OVERRAN = 70  # sysexits' EX_SOFTWARE: the bounded stop did not finish on its own
MARGIN = 3.0  # seconds the watchdog waits past the timeout before it acts
SIGNALS = (signal.SIGTERM, signal.SIGINT)

ReleaseLeases = Callable[[float], Coroutine[Any, Any, None]]


class Stopper:
    """Turns the first SIGTERM/SIGINT into a bounded stop of `task`, and a second into an exit."""

    def __init__(
        self,
        timeout: float,
        *,
        margin: float = MARGIN,
        exit: Callable[[int], object] = os._exit,
    ) -> None:
        self.timeout = timeout
        self.margin = margin
        self._exit = exit
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Future[Any] | None = None
        self._release: ReleaseLeases | None = None
        self._signalled_at: float | None = None
        self._stopped = threading.Event()

    def release_leases_with(self, release: ReleaseLeases) -> None:
        """What the watchdog runs on the event loop before an overrun exit."""
        self._release = release

    async def run(self, main: Coroutine[Any, Any, None]) -> None:
        """Run `main` until it returns or a signal stops it."""
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.ensure_future(main)
        for sig in SIGNALS:
            self._loop.add_signal_handler(sig, self.signalled, sig)
        try:
            await asyncio.wait({self._task})
        finally:
            for sig in SIGNALS:
                self._loop.remove_signal_handler(sig)
            self._stopped.set()
        if not self._task.cancelled():
            self._task.result()  # an error of the operator's own, not a stop

    def signalled(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if self._signalled_at is not None:
            log.warning("operator.stop_forced", signal=name)
            _flush_streams()
            self._exit(128 + signum)
            return
        self._signalled_at = time.monotonic()
        log.info("operator.stopping", signal=name, timeout=self.timeout)
        if self._task is not None:
            self._task.cancel()
        threading.Thread(target=self._watch, name="kubescribe-stop-watchdog", daemon=True).start()

    def end(self) -> None:
        """Exit 0 once the operator stopped cleanly: the threads still working get up to the
        margin to finish (what they did not push is not acknowledged, so it is replayed)."""
        deadline = time.monotonic() + self.margin
        for thread in _busy_threads():
            thread.join(max(0.0, deadline - time.monotonic()))
        if busy := _busy_threads():
            log.warning("operator.threads_abandoned", threads=sorted(t.name for t in busy))
        _flush_streams()
        self._exit(0)

    def _watch(self) -> None:
        if self._stopped.wait(self.timeout + self.margin):
            return  # the operator stopped: `end` exits
        loop, release = self._loop, self._release
        log.error(
            "operator.stop_overran",
            timeout=self.timeout,
            threads=_live_threads(),
            tasks=_pending_tasks(loop),
        )
        if loop is not None and release is not None and loop.is_running():
            future = asyncio.run_coroutine_threadsafe(release(1.0), loop)
            try:
                future.result(1.0)
            except (FutureTimeout, Exception):  # the loop is stuck: the Leases will expire
                log.error("operator.leases_left_to_expire")
        _flush_streams()
        self._exit(EXIT_OVERRAN)


def _pending_tasks(loop: asyncio.AbstractEventLoop | None) -> list[str]:
    """Where each task of the event loop waits (innermost frame last), read on the loop: what
    held the stop up, for the log of an overrun. Empty when the loop does not answer."""
    if loop is None or not loop.is_running():
        return []

    async def stacks() -> list[str]:
        here = asyncio.current_task()
        return sorted(_where(task) for task in asyncio.all_tasks() if task is not here)

    try:
        return asyncio.run_coroutine_threadsafe(stacks(), loop).result(0.5)
    except (FutureTimeout, Exception):  # a stuck loop: the threads say the rest
        return []


def _where(task: asyncio.Task[Any]) -> str:
    """The task's chain of awaits, outermost first (`get_stack` gives only the outermost)."""
    frames: list[str] = []
    step: Any = task.get_coro()
    while step is not None and len(frames) < 16:
        frame = getattr(step, "cr_frame", None) or getattr(step, "gi_frame", None)
        if frame is not None:
            frames.append(f"{frame.f_code.co_name}:{frame.f_lineno}")
        step = getattr(step, "cr_await", None) or getattr(step, "gi_yieldfrom", None)
    return f"{task.get_name()}: {' > '.join(frames)}"


def _live_threads() -> list[str]:
    me = threading.current_thread()
    return sorted(t.name for t in threading.enumerate() if t is not me and t.is_alive())


def _busy_threads() -> list[threading.Thread]:
    """The threads other than this one that the interpreter would wait for at exit."""
    me = threading.current_thread()
    return [t for t in threading.enumerate() if t is not me and not t.daemon and t.is_alive()]


def _flush_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
