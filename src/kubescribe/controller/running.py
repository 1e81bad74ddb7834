"""The watch streams the manager runs, and what they say in status."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from kubescribe.api import conditions as c
from kubescribe.controller.destinations import Destination
from kubescribe.controller.status import Cond
from kubescribe.controller.streams import StreamSpec
from kubescribe.kube.informer import Informer
from kubescribe.mirror.changes import PruneMode
from kubescribe.mirror.noise import NoisePolicy
from kubescribe.mirror.owned import FULL, Content


@dataclass
class Running:
    spec: StreamSpec
    informer: Informer[Any]
    task: asyncio.Task[None]
    noise: NoisePolicy | None = None  # the target's policy it was started with
    admitted: tuple[frozenset[str], ...] | None = None  # namespaces it admits (see StreamSpec)
    content: Content = FULL  # the target's content mode it was started with
    prune: PruneMode | None = None  # the target's prune mode it was started with
    destination: Destination | None = None  # where its target was written when it started


def streams_condition(streams: list[Running]) -> Cond:
    """`StreamsRunning` of streams: WatchForbidden (naming types), else how many are synced."""
    forbidden = [r for r in streams if r.informer.forbidden]
    if forbidden:
        return _watch_forbidden(forbidden)
    synced = sum(1 for r in streams if r.informer.synced.is_set())
    return Cond(
        c.STREAMS_RUNNING,
        "True" if synced == len(streams) else "False",
        c.STREAMS_RUNNING if synced == len(streams) else c.PROGRESSING,
        f"{synced}/{len(streams)} watch streams synced",
    )


def _watch_forbidden(streams: list[Running]) -> Cond:
    """StreamsRunning False: the operator's identity may not list/watch these types."""
    where = sorted(
        f"{r.spec.rtype.gvr} in {r.informer.namespace or 'all namespaces'}" for r in streams
    )
    first = streams[0].informer.forbidden or ""
    return Cond(
        c.STREAMS_RUNNING,
        "False",
        c.WATCH_FORBIDDEN,
        f"The operator may not list/watch {', '.join(where)} (grant it in the operator's "
        f"RBAC; retried with backoff): {first}",
    )
