"""Waiting with a timeout without losing a cancellation.

In Python 3.11 `asyncio.wait_for` returns the awaited result when the waiting task is cancelled
in the same step as the result arrives, and the cancellation is gone: a loop that waits for a
busy event with `wait_for` can ignore `Task.cancel()` for good (this is how a replica ignored
SIGTERM). Every timed wait in kubescribe goes through here instead (tests/unit/test_waits.py
keeps `wait_for` out of the sources).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until `event` is set or `timeout` seconds pass; True when it is set."""
    return await within(event.wait(), timeout)


async def within(awaitable: Awaitable[object], timeout: float) -> bool:
    """Await `awaitable` for at most `timeout` seconds; True when it finished in time (its
    error is raised here; wrap a task in `asyncio.shield` to keep it running past the timeout).

    It runs as a task of its own, waited for with `asyncio.wait`: the bound holds even when
    something inside ignores a cancellation, and a cancellation of the caller is never lost."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=max(0.0, timeout))
    finally:
        if not task.done():
            task.cancel()
    if not done:
        return False
    task.result()
    return True
