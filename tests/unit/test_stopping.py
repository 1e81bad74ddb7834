"""The bounded stop: first signal cancels, second exits at once, an overrun still releases."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading

import pytest
from structlog.testing import capture_logs

from kubescribe.app import stop_budget
from kubescribe.stopping import EXIT_OVERRAN, Stopper


class _Exit:
    def __init__(self) -> None:
        self.codes: list[int] = []
        self.called = threading.Event()

    def __call__(self, code: int) -> None:
        self.codes.append(code)
        self.called.set()


async def test_the_first_signal_stops_the_operator_which_cleans_up() -> None:
    cleaned = asyncio.Event()

    async def operator() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            cleaned.set()

    exits = _Exit()
    stopper = Stopper(5, margin=60, exit=exits)
    run = asyncio.create_task(stopper.run(operator()))
    await asyncio.sleep(0.05)
    os.kill(os.getpid(), signal.SIGTERM)  # the real signal, through the loop's handler
    await asyncio.wait({run}, timeout=5)
    assert run.done()
    assert run.exception() is None
    assert cleaned.is_set()
    assert exits.codes == []  # a clean stop needs no exit of the watchdog's


async def test_a_second_signal_exits_at_once() -> None:
    exits = _Exit()
    stopper = Stopper(60, margin=60, exit=exits)

    async def stubborn() -> None:  # a shutdown that takes its time
        try:
            await asyncio.sleep(3600)
        finally:
            await asyncio.sleep(0.5)

    run = asyncio.create_task(stopper.run(stubborn()))
    await asyncio.sleep(0.05)
    stopper.signalled(signal.SIGTERM)
    await asyncio.sleep(0.05)
    stopper.signalled(signal.SIGINT)
    assert exits.codes == [128 + signal.SIGINT]
    await asyncio.wait({run}, timeout=5)


async def test_an_overrun_releases_the_leases_then_exits() -> None:
    released: list[float] = []

    async def release(timeout: float) -> None:
        released.append(timeout)

    async def deaf() -> None:  # ignores its first cancellation (the bug this guards against)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(3600)

    exits = _Exit()
    stopper = Stopper(0.2, margin=0.1, exit=exits)
    stopper.release_leases_with(release)
    run = asyncio.create_task(stopper.run(deaf()))
    await asyncio.sleep(0.05)
    with capture_logs() as logs:
        stopper.signalled(signal.SIGTERM)
        loop = asyncio.get_running_loop()
        assert await loop.run_in_executor(None, exits.called.wait, 10)
    assert exits.codes == [EXIT_OVERRAN]
    assert released == [1.0]
    # The log names where the stop is held up: the deaf step, in its second sleep.
    (overran,) = [e for e in logs if e["event"] == "operator.stop_overran"]
    chains = [where.split(": ", 1)[1] for where in overran["tasks"]]
    assert any(chain.startswith("deaf:") and "> sleep:" in chain for chain in chains), chains
    run.cancel()


async def test_after_a_clean_stop_the_watchdog_leaves_the_exit_to_end() -> None:
    exits = _Exit()
    stopper = Stopper(0.1, margin=0.1, exit=exits)

    async def quick() -> None:
        await asyncio.sleep(3600)

    run = asyncio.create_task(stopper.run(quick()))
    await asyncio.sleep(0.05)
    before = set(threading.enumerate())  # other tests' watchdogs may still be waiting
    stopper.signalled(signal.SIGTERM)
    [watchdog] = [t for t in set(threading.enumerate()) - before if t.name.endswith("watchdog")]
    await asyncio.wait({run}, timeout=5)
    watchdog.join(10)
    assert not watchdog.is_alive()
    assert exits.codes == []


# In a child process of its own: `end` waits for every thread, and a test run's worker may hold
# threads of other tests (they would only make this one wait out its margin).
_BUSY_THREAD_AT_END = """
import sys, threading
from kubescribe.stopping import Stopper

finished, go = threading.Event(), threading.Event()

def writing():  # a write the stop gave up on, finishing on its own
    go.wait(10)
    finished.set()

threading.Thread(target=writing).start()
threading.Timer(0.2, go.set).start()
Stopper(5, margin=30, exit=lambda code: print("finished", finished.is_set(), "exit", code)).end()
"""


def test_end_lets_a_busy_thread_finish_then_exits_zero() -> None:
    child = subprocess.run(
        [sys.executable, "-c", _BUSY_THREAD_AT_END],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == ["finished True exit 0"]


def test_end_exits_zero_past_the_margin_when_a_thread_is_stuck() -> None:
    exits = _Exit()
    release = threading.Event()
    thread = threading.Thread(target=release.wait, args=(60,), name="stuck-transfer")
    thread.start()
    try:
        Stopper(5, margin=0.2, exit=exits).end()
        assert thread.is_alive()
        assert exits.codes == [0]
    finally:
        release.set()
        thread.join()


async def test_an_error_of_the_operator_is_raised_not_taken_for_a_stop() -> None:
    async def broken() -> None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        await Stopper(5, exit=_Exit()).run(broken())


@pytest.mark.parametrize("timeout", [1.0, 2.0, 5.0, 8.0, 30.0])
def test_the_shutdown_and_the_closes_after_it_fit_in_the_timeout(timeout: float) -> None:
    """The manager once had the whole timeout and the closes after it up to 2 s more: a stop
    that kept every bound could still reach the watchdog (exit 70 in a rolling restart in CI)."""
    shutdown, close = stop_budget(timeout)
    assert shutdown + 2 * close <= timeout
    assert shutdown >= timeout * 3 / 4
    assert close > 0
