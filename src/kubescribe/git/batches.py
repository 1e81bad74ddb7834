"""What of a batch is written: pure rules over queue items."""

from __future__ import annotations

from kubescribe.git.records import Item
from kubescribe.mirror.changes import Change, Cursor


def collapse(items: list[Item]) -> tuple[list[Item], list[Cursor]]:
    """Drop changes superseded by a later change of the same object (the later one decides
    the file; snapshots in between touch it no differently). Returns the kept items and the
    cursors of the dropped ones, which are acknowledged with the push that carries the rest."""
    last = {
        (item.target, item.identity): i for i, item in enumerate(items) if isinstance(item, Change)
    }
    kept: list[Item] = []
    dropped: list[Cursor] = []
    for i, item in enumerate(items):
        if isinstance(item, Change) and last[(item.target, item.identity)] != i:
            if item.cursor is not None:
                dropped.append(item.cursor)
        else:
            kept.append(item)
    return kept, dropped
