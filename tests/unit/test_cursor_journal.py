"""Resume cursors are saved as of the pushed resourceVersion, never ahead of it."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from kubescribe.controller.cursors import CursorKeeper, Save, StreamJournal
from kubescribe.mirror.changes import Cursor
from kubescribe.store.cursors import ObjectKey, StreamCursor


def test_an_ack_folds_only_the_events_up_to_the_pushed_version() -> None:
    journal = StreamJournal("s", "fp")
    journal.snapshot("10", [("ns", "a"), ("ns", "b")])
    journal.event("11", ("ns", "c"), True, submitted=True)
    journal.event("12", ("ns", "a"), False, submitted=True)
    save = journal.ack("11", 2)
    assert save is not None
    assert (save.resource_version, save.replace) == ("11", True)
    assert save.added == {("ns", "a"), ("ns", "b"), ("ns", "c")}
    later = journal.ack("12", 1)
    assert later is not None
    assert (later.replace, later.added, later.removed) == (False, set(), {("ns", "a")})


def test_a_filtered_event_is_acknowledged_at_once_only_when_nothing_waits() -> None:
    journal = StreamJournal("s", "fp")
    assert journal.event("5", ("ns", "noise"), True, submitted=False)
    journal.event("6", ("ns", "kept"), True, submitted=True)
    assert not journal.event("7", ("ns", "noise-2"), True, submitted=False)
    save = journal.ack("6", 1)
    assert save is not None
    assert save.added == {("ns", "noise"), ("ns", "kept")}


def test_saves_merge_in_order() -> None:
    first = Save("5", added={("ns", "a")}, removed={("ns", "b")})
    merged = first.then(Save("6", added={("ns", "b")}, removed={("ns", "a")}))
    assert (merged.resource_version, merged.added, merged.removed) == (
        "6",
        {("ns", "b")},
        {("ns", "a")},
    )
    replaced = merged.then(Save("9", replace=True, added={("ns", "z")}))
    assert (replaced.replace, replaced.added, replaced.removed) == (True, {("ns", "z")}, set())


class Recorded:
    """A cursor store that keeps every save in memory."""

    def __init__(self) -> None:
        self.saves: list[tuple[str, str, str, set[ObjectKey], set[ObjectKey], bool]] = []

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
        self.saves.append(
            (stream, fingerprint, resource_version, set(added), set(removed), replace)
        )

    async def close(self) -> None:
        return None


async def test_a_stream_stopped_for_a_hand_over_still_saves_what_the_last_push_wrote() -> None:
    # A hand-over stops the streams of a writer before its worker's last push is acknowledged:
    # the cursor of that push must still be saved, or the new owner replays it.
    store = Recorded()
    keeper = CursorKeeper(store)
    saver = asyncio.create_task(keeper.run())
    try:
        journal = keeper.journal("s", "fp")
        journal.event("11", ("ns", "a"), True, submitted=True)
        journal.event("12", ("ns", "a"), False, submitted=True)
        keeper.drop("s")
        keeper.acked([Cursor("s", "11"), Cursor("s", "12")])
        assert await keeper.flush(timeout=5)
        assert store.saves == [("s", "fp", "12", set(), {("ns", "a")}, False)]
        keeper.acked([Cursor("s", "13")])  # its journal is gone once everything was saved
        assert await keeper.flush(timeout=5)
        assert len(store.saves) == 1
    finally:
        saver.cancel()


async def test_a_stream_stopped_with_nothing_in_flight_is_forgotten_at_once() -> None:
    store = Recorded()
    keeper = CursorKeeper(store)
    journal = keeper.journal("s", "fp")
    journal.event("11", ("ns", "a"), True, submitted=False)
    keeper.drop("s")
    keeper.acked_at_once("s", "11")
    assert await keeper.flush(timeout=1)
    assert store.saves == []
