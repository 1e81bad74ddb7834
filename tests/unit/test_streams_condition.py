"""StreamsRunning, for a GitTarget and for each rule: synced, progressing, or WatchForbidden."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from kubescribe.controller.running import streams_condition
from kubescribe.mirror.identity import ResourceType

CM = ResourceType("", "v1", "configmaps", "ConfigMap", True)
SVC = ResourceType("", "v1", "services", "Service", True)


def running(rtype: ResourceType, *, synced: bool, forbidden: str | None = None) -> Any:
    event = asyncio.Event()
    if synced:
        event.set()
    informer = SimpleNamespace(synced=event, forbidden=forbidden, namespace="team")
    return SimpleNamespace(spec=SimpleNamespace(rtype=rtype), informer=informer)


def test_streams_running_counts_synced_streams() -> None:
    cond = streams_condition([running(CM, synced=True), running(SVC, synced=False)])
    assert (cond.status, cond.reason, cond.message) == (
        "False",
        "Progressing",
        "1/2 watch streams synced",
    )
    cond = streams_condition([running(CM, synced=True)])
    assert (cond.status, cond.reason) == ("True", "StreamsRunning")


def test_a_forbidden_stream_is_watch_forbidden_naming_the_type() -> None:
    cond = streams_condition(
        [running(CM, synced=True), running(SVC, synced=False, forbidden="services is forbidden")]
    )
    assert (cond.status, cond.reason) == ("False", "WatchForbidden")
    assert "core/v1/services in team" in cond.message
    assert "configmaps" not in cond.message
