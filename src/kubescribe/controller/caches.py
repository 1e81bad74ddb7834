"""Informer sinks of the manager's own watches: a cache of the current objects that pokes the
reconcile loop, and a trigger that only pokes (a change of the served types)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kubescribe.kube.informer import ObjectKey


class ObjectCache:
    """An informer sink that keeps the current objects and pokes the reconcile loop."""

    def __init__(self, poke: asyncio.Event) -> None:
        self.objects: dict[ObjectKey, dict[str, Any]] = {}
        self.poke = poke
        self.synced = False  # a first snapshot arrived

    async def on_snapshot(
        self, objects: Mapping[ObjectKey, dict[str, Any]], deleted: set[ObjectKey], rv: str
    ) -> None:
        self.objects = dict(objects)
        self.synced = True
        self.poke.set()

    async def on_event(self, event_type: str, obj: dict[str, Any], rv: str) -> None:
        meta = obj["metadata"]
        key = (meta.get("namespace") or "", meta["name"])
        if event_type == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        self.poke.set()


class ChangeTrigger:
    """A sink that only signals: discovery must be refreshed."""

    def __init__(self, poke: asyncio.Event) -> None:
        self.poke = poke
        self._synced = False

    async def on_snapshot(
        self, objects: Mapping[ObjectKey, dict[str, Any]], deleted: set[ObjectKey], rv: str
    ) -> None:
        if self._synced:
            self.poke.set()
        self._synced = True

    async def on_event(self, event_type: str, obj: dict[str, Any], rv: str) -> None:
        self.poke.set()
