"""The watch streams of the targets written here (issue #35): where the operator may list and
watch a type in every namespace of a cluster, one stream per (cluster, type) feeds every target
that reads it (`controller.fanout`); elsewhere (RBAC grants the type per namespace only), one
stream per target, type and namespace, as before.

Whether the operator may read a type cluster-wide is asked of the API server itself
(SelfSubjectAccessReviews, which every authenticated identity may create), kept `ttl` seconds,
so an RBAC change moves the type's targets between the two kinds of stream.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import structlog

from kubescribe import metrics
from kubescribe.api import conditions as c
from kubescribe.controller.cursors import CursorKeeper
from kubescribe.controller.destinations import Destination, moving, planned
from kubescribe.controller.fanout import FanOut, Subscriber
from kubescribe.controller.plan import Plan, TargetPlan
from kubescribe.controller.status import Cond
from kubescribe.controller.streams import Initial, StreamSpec, TargetStream
from kubescribe.git.worker import BranchWorker
from kubescribe.kube.client import ApiError, KubeClient
from kubescribe.kube.informer import Informer, ObjectKey
from kubescribe.mirror.changes import PruneMode
from kubescribe.mirror.identity import ResourceType
from kubescribe.mirror.noise import NoisePolicy
from kubescribe.mirror.owned import FULL, Content

log = structlog.get_logger(__name__)

REVIEWS = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@dataclass
class Running:
    """A target's stream: its own informer, or its place in a shared one."""

    spec: StreamSpec
    informer: Informer[Any]
    task: asyncio.Task[None] | None  # None: fed by a shared stream
    noise: NoisePolicy | None = None  # the target's policy it was started with
    admitted: tuple[frozenset[str], ...] | None = None  # namespaces it admits (see StreamSpec)
    content: Content = FULL  # the target's content mode it was started with
    prune: PruneMode | None = None  # the target's prune mode it was started with
    subscriber: Subscriber | None = None
    shared: str = ""  # the shared stream's key
    destination: Destination | None = None  # where its target was written when it started

    @property
    def synced(self) -> bool:
        if self.subscriber is not None:
            return self.subscriber.synced.is_set()
        return self.informer.synced.is_set()

    @property
    def forbidden(self) -> str | None:
        return self.informer.forbidden

    @property
    def where(self) -> str:
        return self.spec.namespace or "all namespaces"


@dataclass
class Shared:
    key: str
    fanout: FanOut
    informer: Informer[Any]
    task: asyncio.Task[None]


def streams_condition(streams: list[Running]) -> Cond:
    """`StreamsRunning` of streams: WatchForbidden (naming types), else how many are synced."""
    forbidden = [r for r in streams if r.forbidden]
    if forbidden:
        return _watch_forbidden(forbidden)
    synced = sum(1 for r in streams if r.synced)
    return Cond(
        c.STREAMS_RUNNING,
        "True" if synced == len(streams) else "False",
        c.STREAMS_RUNNING if synced == len(streams) else c.PROGRESSING,
        f"{synced}/{len(streams)} watch streams synced",
    )


def _watch_forbidden(streams: list[Running]) -> Cond:
    """StreamsRunning False: the operator's identity may not list/watch these types."""
    where = sorted(f"{r.spec.rtype.gvr} in {r.where}" for r in streams)
    first = streams[0].forbidden or ""
    return Cond(
        c.STREAMS_RUNNING,
        "False",
        c.WATCH_FORBIDDEN,
        f"The operator may not list/watch {', '.join(where)} (grant it in the operator's "
        f"RBAC; retried with backoff): {first}",
    )


class WideReads:
    """Whether the operator may list and watch a type in all namespaces, per cluster."""

    def __init__(self, ttl: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl = ttl
        self.clock = clock
        self._answers: dict[tuple[str, str, str], tuple[bool, float]] = {}

    async def allowed(self, client: KubeClient, cluster: str, rtype: ResourceType) -> bool:
        key = (cluster, rtype.group, rtype.resource)
        known = self._answers.get(key)
        if known is not None and self.clock() - known[1] <= self.ttl:
            return known[0]
        answer = await self._ask(client, rtype)
        if answer is None:  # no answer: keep the last one (none yet: per namespace)
            return known[0] if known is not None else False
        self._answers[key] = (answer, self.clock())
        return answer

    async def _ask(self, client: KubeClient, rtype: ResourceType) -> bool | None:
        try:
            for verb in ("list", "watch"):
                body = {
                    "apiVersion": "authorization.k8s.io/v1",
                    "kind": "SelfSubjectAccessReview",
                    "spec": {
                        "resourceAttributes": {
                            "verb": verb,
                            "group": rtype.group,
                            "resource": rtype.resource,
                        }
                    },
                }
                found = await client.request("POST", REVIEWS, body=body)
                if not (found.get("status") or {}).get("allowed", False):
                    return False
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("watch.access_review_failed", error=str(exc) or type(exc).__name__)
            return None
        return True


class _Collect:
    """The sink of a joining target's one LIST."""

    def __init__(self) -> None:
        self.objects: Mapping[ObjectKey, Initial] = {}
        self.rv = ""

    async def on_snapshot(
        self, objects: Mapping[ObjectKey, Initial], deleted: set[ObjectKey], rv: str
    ) -> None:
        self.objects, self.rv = objects, rv

    async def on_event(self, event_type: str, obj: dict[str, Any], rv: str) -> None:
        """Never called: a LIST has no events."""


@dataclass
class Watches:
    """Runs the streams a plan wants (`apply`); `running` holds each target stream by key."""

    cursors: CursorKeeper
    poke: asyncio.Event
    noise: NoisePolicy
    client_of: Callable[[StreamSpec], KubeClient | None]
    share: bool = True  # False: one stream per target, type and namespace
    # Where a target's status says its mirror is written (a move lists it afresh).
    seen: Callable[[TargetPlan], Destination | None] = lambda target: None
    reads: WideReads = field(default_factory=WideReads)
    running: dict[str, Running] = field(default_factory=dict)
    shared: dict[str, Shared] = field(default_factory=dict)
    relist: set[str] = field(default_factory=set)  # list afresh, not from a saved cursor

    def tasks(self) -> list[asyncio.Task[None]]:
        own = [r.task for r in self.running.values() if r.task is not None]
        return own + [s.task for s in self.shared.values()]

    def clear(self) -> None:
        for shared in self.shared.values():
            shared.fanout.close()
        self.running.clear()
        self.shared.clear()

    def stop(self, key: str, *, relist: bool) -> bool:
        """Stop a target's stream (its cursor dropped); False when it was not running."""
        running = self.running.pop(key, None)
        if running is None:
            return False
        if running.task is not None:
            running.task.cancel()
            self.cursors.drop(key)
        elif running.shared in self.shared:
            self.shared[running.shared].fanout.remove(key)
        if relist:
            self.relist.add(key)
        return True

    def shared_key(self, spec: StreamSpec) -> str:
        where = f"{spec.cluster}@" if spec.cluster else ""
        return f"shared|{where}{spec.rtype.gvr}"

    async def apply(
        self,
        plan: Plan,
        wanted: Mapping[str, StreamSpec],
        admitted: Mapping[str, tuple[frozenset[str], ...] | None],
        workers: Mapping[Any, BranchWorker],
    ) -> list[StreamSpec]:
        """Start, restart and stop streams to match `wanted`; the specs of the target streams
        stopped (a type gone from discovery sweeps its files from them)."""
        modes = await self._modes(wanted.values())
        stopped: list[StreamSpec] = []
        for key, running in list(self.running.items()):
            spec = running.spec
            target = plan.targets[spec.target] if key in wanted else None
            # A new noise policy or content mode re-renders every document; namespaces that
            # join or leave are snapshotted in or (under prune Always) swept: all need a fresh
            # list.
            relist = target is not None and (
                running.noise != target.noise
                or running.content != target.content
                or running.admitted != admitted.get(key)
                or running.prune != target.prune  # a wider mode sweeps orphans at once
                or running.destination != planned(target)  # a move: all of it written there
            )
            moved = running.shared != modes.get(key, "")
            client = self.client_of(spec)
            if wanted.get(key) != spec or running.informer.client is not client or relist or moved:
                self.stop(key, relist=relist)
                stopped.append(spec)
        self._retire_shared()
        joining: dict[str, list[tuple[TargetStream, TargetPlan]]] = {}
        for key in [key for key in wanted if key not in self.running]:
            target = plan.targets[wanted[key].target]
            if moving(target, self.seen(target)):
                self.relist.add(key)  # a target being moved is listed afresh, never resumed
            worker = workers[target.worker_key]
            shared = modes.get(key, "")
            sink = TargetStream(
                wanted[key],
                target.noise or self.noise,
                worker.submit,
                ack_now=self.cursors.acked_at_once,
                admitted=admitted[key],
                room=worker.room,
                content=target.content,
                cursor_key=shared,
            )
            if shared:
                joining.setdefault(shared, []).append((sink, target))
            else:
                await self._start_own(key, sink, target)
        for shared, sinks in joining.items():
            await self._subscribe(shared, sinks)
        self._export()
        return stopped

    async def _modes(self, specs: Iterable[StreamSpec]) -> dict[str, str]:
        """The shared stream of each target stream that can have one."""
        modes: dict[str, str] = {}
        for spec in specs:
            client = self.client_of(spec)
            if (
                self.share
                and client is not None
                and not spec.namespace_selectors
                and await self.reads.allowed(client, spec.cluster, spec.rtype)
            ):
                modes[spec.key] = self.shared_key(spec)
        return modes

    def _retire_shared(self) -> None:
        """Stop shared streams nobody reads any more, or whose cluster's client changed."""
        for key, shared in list(self.shared.items()):
            readers = [r for r in self.running.values() if r.shared == key]
            client = self.client_of(readers[0].spec) if readers else None
            if readers and shared.informer.client is client:
                continue
            for reader in readers:
                self.stop(reader.spec.key, relist=False)
            shared.task.cancel()
            shared.fanout.close()
            self.cursors.drop(key)
            del self.shared[key]

    async def _subscribe(self, key: str, sinks: list[tuple[TargetStream, TargetPlan]]) -> None:
        """Target streams into a shared one: starting it with them, or joining it."""
        resumed = False
        if key not in self.shared:
            resumed = await self._start_shared(key, [sink for sink, _ in sinks])
        shared = self.shared[key]
        for sink, target in sinks:
            self.relist.discard(sink.spec.key)
            self.running[sink.spec.key] = Running(
                sink.spec,
                shared.informer,
                None,
                target.noise,
                sink.admitted,
                target.content,
                target.prune,
                subscriber=shared.fanout.add(sink, resumed=resumed),
                shared=key,
                destination=planned(target),
            )

    async def _start_shared(self, key: str, sinks: list[TargetStream]) -> bool:
        """Start a shared stream (True: resumed from its cursor, saved with these targets)."""
        spec = sinks[0].spec
        client = self.client_of(spec)
        assert client is not None
        fingerprint = _fingerprint(sinks)
        resume = None
        if not any(sink.spec.key in self.relist for sink in sinks):
            try:
                resume = await self.cursors.store.load(key, fingerprint)
            except Exception as exc:  # the store is down: list afresh, always right
                log.warning("cursor.load_failed", error=str(exc) or type(exc).__name__)
        fanout = FanOut(
            key,
            _lister(client),
            journal=self.cursors.shared_journal(key, fingerprint),
            acked=self.cursors.acked,
            ack_now=self.cursors.acked_at_once,
        )
        informer: Informer[Any] = Informer(
            client,
            spec.rtype,
            fanout,
            prepare=fanout.prepare,
            resume_from=resume.resource_version if resume else None,
            known=resume.known if resume else (),
            on_access=self.poke.set,
            on_stale=fanout.on_stale,
            on_listing=fanout.on_listing,
        )
        task = asyncio.create_task(informer.run())
        self.shared[key] = Shared(key, fanout, informer, task)
        return resume is not None

    async def _start_own(self, key: str, sink: TargetStream, target: TargetPlan) -> None:
        spec = sink.spec
        resume = None
        if key in self.relist:
            self.relist.discard(key)
        else:
            try:
                resume = await self.cursors.store.load(key, sink.fingerprint)
            except Exception as exc:  # the store is down: list afresh, always right
                log.warning("cursor.load_failed", error=str(exc) or type(exc).__name__)
        sink.journal = self.cursors.journal(key, sink.fingerprint)
        client = self.client_of(spec)
        assert client is not None
        informer: Informer[Any] = Informer(
            client,
            spec.rtype,
            sink,
            prepare=sink.prepare,
            namespace=spec.namespace,
            label_selector=spec.server_selector,
            resume_from=resume.resource_version if resume else None,
            known=resume.known if resume else (),
            on_access=self.poke.set,
            on_stale=sink.on_stale,
        )
        task = asyncio.create_task(informer.run())
        self.running[key] = Running(
            spec,
            informer,
            task,
            target.noise,
            sink.admitted,
            target.content,
            target.prune,
            destination=planned(target),
        )

    def _export(self) -> None:
        """`kubescribe_watch_streams{resource}`: the watch connections held, per type."""
        counts: dict[str, int] = {}
        for running in self.running.values():
            if running.task is not None:
                counts[running.spec.rtype.gvr] = counts.get(running.spec.rtype.gvr, 0) + 1
        for shared in self.shared.values():
            gvr = shared.informer.rtype.gvr
            counts[gvr] = counts.get(gvr, 0) + 1
        metrics.export_streams(counts, len(self.running))


def _fingerprint(sinks: Iterable[TargetStream]) -> str:
    """What a shared cursor depends on: every target stream it fed, as each renders."""
    text = "\n".join(sorted(f"{s.spec.key}={s.fingerprint}" for s in sinks))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _lister(client: KubeClient) -> Callable[[TargetStream], Any]:
    async def list_for(stream: TargetStream) -> tuple[Mapping[ObjectKey, Initial], str]:
        spec, collect = stream.spec, _Collect()
        informer = Informer(
            client,
            spec.rtype,
            collect,
            prepare=stream.prepare,
            namespace=spec.namespace,
            label_selector=spec.server_selector,
        )
        await informer.relist()
        return collect.objects, collect.rv

    return list_for
