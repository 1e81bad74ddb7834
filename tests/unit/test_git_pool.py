"""The Git pool: threads bounded by its size whatever the number of writers, one call at a time
per writer (also past a cancellation), and a busy writer cannot starve a quiet one."""

from __future__ import annotations

import asyncio
import threading

from kubescribe import metrics
from kubescribe.git.pool import GitPool


async def test_many_writers_share_a_bounded_number_of_threads() -> None:
    pool = GitPool(3)
    seen: set[str] = set()

    def work() -> None:
        seen.add(threading.current_thread().name)

    try:
        await asyncio.gather(*(pool.lane().run(work) for _ in range(200)))
    finally:
        pool.shutdown()
    assert 1 <= len(seen) <= 3
    assert metrics.GIT_POOL_SIZE._value.get() == 3
    assert metrics.GIT_POOL_BUSY._value.get() == 0


async def test_a_lane_runs_one_call_at_a_time_even_after_a_cancelled_wait() -> None:
    pool = GitPool(4)
    lane = pool.lane()
    started, release = threading.Event(), threading.Event()
    order: list[str] = []

    def slow() -> None:
        started.set()
        release.wait(10)
        order.append("slow done")

    def close() -> None:
        order.append("close")

    try:
        waiting = asyncio.create_task(lane.run(slow))
        await asyncio.to_thread(started.wait, 10)
        waiting.cancel()  # the awaiting task goes; the call in the thread does not
        second = asyncio.create_task(lane.run(close))
        await asyncio.sleep(0)
        assert order == []
        release.set()
        await second
    finally:
        pool.shutdown()
    assert order == ["slow done", "close"]


async def test_a_quiet_writer_runs_between_the_calls_of_a_busy_one() -> None:
    pool = GitPool(1)
    busy, quiet = pool.lane(), pool.lane()
    order: list[str] = []
    first_running, go_on = threading.Event(), threading.Event()

    def busy_call(i: int) -> None:
        if i == 0:
            first_running.set()
            go_on.wait(10)
        order.append(f"busy-{i}")

    async def busy_writer() -> None:
        for i in range(5):  # a writer with much queued: one call after the other
            await busy.run(busy_call, i)

    try:
        writer = asyncio.create_task(busy_writer())
        await asyncio.to_thread(first_running.wait, 10)
        single = asyncio.create_task(quiet.run(order.append, "quiet"))
        await asyncio.sleep(0)
        go_on.set()
        await asyncio.gather(writer, single)
    finally:
        pool.shutdown()
    assert order.index("quiet") == 1
