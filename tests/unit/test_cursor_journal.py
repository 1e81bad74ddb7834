"""Resume cursors are saved as of the pushed resourceVersion, never ahead of it."""

from __future__ import annotations

from kubescribe.controller.cursors import Save, StreamJournal


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
