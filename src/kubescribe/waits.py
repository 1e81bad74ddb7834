"""Waiting with a timeout without losing a cancellation.

In Python 3.11 `asyncio.wait_for` returns the awaited result when the waiting task is cancelled
in the same step as the result arrives, and the cancellation is gone: a loop that waits for a
busy event with `wait_for` can ignore `Task.cancel()` for good (this is how a replica ignored
SIGTERM). `asyncio.timeout` keeps the cancellation; every timed wait in kubescribe goes through
here (tests/unit/test_waits.py keeps `wait_for` out of the sources).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Wait until `event` is set or `timeout` seconds pass; True when it is set."""
    return await within(event.wait(), timeout)


async def within(awaitable: Awaitable[object], timeout: float) -> bool:
    """Await `awaitable` for at most `timeout` seconds; True when it finished in time (its
    result or error is left to the caller: wrap a task in `asyncio.shield` to keep it running
    past the timeout)."""
    try:
        async with asyncio.timeout(max(0.0, timeout)):
            await awaitable
    except TimeoutError:
        return False
    return True
