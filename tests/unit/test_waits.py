"""Timed waits keep a cancellation (Python 3.11's `asyncio.wait_for` can drop it)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path
from typing import Any

from kubescribe.controller.shards import Shards
from kubescribe.waits import wait_event, within

SRC = Path(__file__).resolve().parents[2] / "src" / "kubescribe"


class _Leases:
    """Lease calls that always succeed at once (only the loop is under test)."""

    async def list(self, label_selector: str) -> list[dict[str, Any]]:
        return []

    async def get(self, name: str) -> dict[str, Any] | None:
        return None

    async def create(self, name: str, holder: str, duration: float, **_: Any) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"holderIdentity": holder}}

    async def hold(self, lease: Any, holder: str, duration: float) -> dict[str, Any]:
        return dict(lease)


async def _cancel_while_woken(task: asyncio.Task[None], wake: asyncio.Event) -> None:
    """Cancel `task` in the same step as the event it waits for is set: the race that made
    a replica ignore SIGTERM."""
    await asyncio.sleep(0.05)  # the loop waits for its event
    wake.set()
    task.cancel()
    await asyncio.wait({task}, timeout=5)  # a lost cancellation leaves the loop running
    assert task.cancelled()


async def test_a_woken_shards_loop_stops_when_cancelled() -> None:
    shards = Shards(_Leases(), "me", renew_every=10)  # type: ignore[arg-type]
    task = asyncio.create_task(shards.run())
    await _cancel_while_woken(task, shards._wake)


async def test_wait_event_keeps_a_cancellation_that_meets_the_event() -> None:
    event = asyncio.Event()

    async def loop() -> None:
        while True:
            await wait_event(event, 10)
            event.clear()

    await _cancel_while_woken(asyncio.create_task(loop()), event)


async def test_wait_event_and_within_answer_whether_it_happened() -> None:
    event = asyncio.Event()
    assert not await wait_event(event, 0.01)
    event.set()
    assert await wait_event(event, 0)
    slow = asyncio.ensure_future(asyncio.sleep(1))
    assert not await within(asyncio.shield(slow), 0.01)
    assert not slow.cancelled()  # shielded: it goes on
    slow.cancel()
    assert await within(asyncio.sleep(0), 1)


def test_no_source_uses_asyncio_wait_for() -> None:
    offenders = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "wait_for"
                and isinstance(node.value, ast.Name)
                and node.value.id == "asyncio"
            ):
                offenders.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert offenders == [], "use kubescribe.waits (wait_for can lose a cancellation)"


async def test_within_holds_its_bound_when_the_awaited_ignores_a_cancellation() -> None:
    async def deaf() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            await asyncio.sleep(3600)  # a step that swallows the first cancellation

    task = asyncio.ensure_future(deaf())
    waiting = asyncio.create_task(within(asyncio.shield(task), 0.05))
    await asyncio.wait({waiting}, timeout=5)
    assert waiting.done()
    assert waiting.result() is False
    task.cancel()
    await asyncio.sleep(0)
    assert await within(deaf(), 0.05) is False  # unshielded: cancelled once, not waited for
