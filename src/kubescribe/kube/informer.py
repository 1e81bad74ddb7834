"""Our own watch loop for one (resource type, namespace scope, label selector).

Initial state comes from a `sendInitialEvents` watch (LIST fallback) and is delivered as one
snapshot; then live events. Each object of the initial state is handed to `prepare` as it
arrives and only what that returns is kept until the snapshot, so a sink that needs a few
fields of 50,000 objects never holds the 50,000 decoded API objects at once. Bookmarks are
requested. A type nobody changes keeps its watch silent until the server ends it after
`server_timeout` (a normal restart); only a stream silent past that plus a grace is dead (a
hung peer; a vanished one is found sooner by TCP keepalive). On 410 Gone we re-list and
report which objects vanished during the gap.

A watch resumed from a saved cursor checks its backlog first (`kube.backlog`): an event that is
no longer its object's current state is not delivered but handed to `on_stale`, so a replay
never rewrites what Git has already moved past.
"""

from __future__ import annotations

import asyncio
import random
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import aiohttp
import structlog

from kubescribe import metrics
from kubescribe.kube.backlog import Backlog
from kubescribe.kube.client import ApiError, KubeClient
from kubescribe.mirror.identity import ResourceType

log = structlog.get_logger(__name__)

ObjectKey = tuple[str, str]  # (namespace, name)
INITIAL_EVENTS_END = "k8s.io/initial-events-end"
# How long past its own timeout a watch may stay silent before it counts as dead.
IDLE_GRACE = 30.0


class Gone(Exception):
    """The resource version we watch from is too old (HTTP 410)."""


Prepared = TypeVar("Prepared")
Prepared_contra = TypeVar("Prepared_contra", contravariant=True)


def as_is(obj: dict[str, Any]) -> dict[str, Any]:
    """The `prepare` of sinks that want the API objects themselves."""
    return obj


class StreamSink(Protocol[Prepared_contra]):
    async def on_snapshot(
        self, objects: Mapping[ObjectKey, Prepared_contra], deleted: set[ObjectKey], rv: str
    ) -> None: ...

    async def on_event(self, event_type: str, obj: dict[str, Any], rv: str) -> None: ...


def key_of(obj: Mapping[str, Any]) -> ObjectKey:
    """(namespace, name); the namespace is interned: 50,000 keys share a few strings."""
    meta = obj.get("metadata") or {}
    return sys.intern(str(meta.get("namespace") or "")), str(meta.get("name") or "")


def resource_path(rtype: ResourceType, namespace: str) -> str:
    base = f"/apis/{rtype.group}/{rtype.version}" if rtype.group else f"/api/{rtype.version}"
    if namespace and rtype.namespaced:
        return f"{base}/namespaces/{namespace}/{rtype.resource}"
    return f"{base}/{rtype.resource}"


@dataclass
class Backoff:
    initial: float = 0.2
    maximum: float = 30.0
    current: float = 0.0

    def next(self) -> float:
        self.current = min(self.maximum, self.current * 2 if self.current else self.initial)
        return self.current * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        self.current = 0.0


@dataclass
class _Initial(Generic[Prepared]):
    """The initial state so far: what `prepare` kept of each object, and its version."""

    objects: dict[ObjectKey, Prepared] = field(default_factory=dict)
    versions: dict[ObjectKey, str] = field(default_factory=dict)

    def add(self, key: ObjectKey, rv: str, prepared: Prepared) -> None:
        self.objects[key] = prepared
        self.versions[key] = rv


class Informer(Generic[Prepared]):
    """Runs until cancelled; never gives up (errors back off, bounded)."""

    def __init__(
        self,
        client: KubeClient,
        rtype: ResourceType,
        sink: StreamSink[Prepared],
        *,
        prepare: Callable[[dict[str, Any]], Prepared],
        namespace: str = "",
        label_selector: str | None = None,
        server_timeout: int = 300,
        idle_timeout: float | None = None,
        page_size: int = 500,
        resume_from: str | None = None,
        known: Iterable[ObjectKey] = (),
        on_access: Callable[[], None] | None = None,
        on_stale: Callable[[str, dict[str, Any], str], Awaitable[None]] | None = None,
        on_listing: Callable[[], None] | None = None,
    ) -> None:
        """`resume_from`: watch from this resourceVersion instead of listing, with `known`
        the objects the stream had delivered by then (a 410 re-lists and diffs with them).
        `on_access` is called whenever `forbidden` changes. `on_stale` receives the events of
        the resumed backlog that are not delivered (see `mirror.replay`), so the sink can still
        move its cursor past them. `on_listing` is called as the gathering of a new initial
        state begins (before its first `prepare`)."""
        self.client = client
        self.rtype = rtype
        self.sink = sink
        self.prepare = prepare
        self.namespace = namespace
        self.label_selector = label_selector
        self.idle_timeout = server_timeout + IDLE_GRACE if idle_timeout is None else idle_timeout
        self.server_timeout = server_timeout
        self.page_size = page_size
        self.path = resource_path(rtype, namespace)
        self.rv: str | None = resume_from or None
        self.synced = asyncio.Event()
        self._known: dict[ObjectKey, str] = dict.fromkeys(known, "") if self.rv else {}
        self._watch_list = True
        self._on_access = on_access
        self._on_stale = on_stale
        self._on_listing = on_listing
        # A resumed watch's backlog: opened before its first watch, closed past its horizon.
        self._backlog_due = self.rv is not None
        self._backlog: Backlog | None = None
        # The API server's message while it refuses this identity list/watch (HTTP 403);
        # None once a list or watch is allowed again. Retried with backoff meanwhile.
        self.forbidden: str | None = None
        self.resumed = self.rv is not None
        if self.resumed:
            self.synced.set()  # its state is the stored one; the watch brings what came since

    @property
    def known(self) -> Mapping[ObjectKey, str]:
        """Every object this stream has delivered, with the resourceVersion of its last event
        (updated before the sink sees the event)."""
        return self._known

    def _params(self) -> dict[str, str]:
        params = {
            "watch": "1",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(int(self.server_timeout * random.uniform(0.8, 1.0))),
        }
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        return params

    async def run(self) -> None:
        backoff = Backoff()
        gvr = self.rtype.gvr
        while True:
            try:
                if self.rv is None and not self._watch_list:
                    await self.relist()
                await self._watch(backoff)
                metrics.WATCH_RESTARTS.labels(gvr, "timeout").inc()
            except Gone:
                metrics.RELISTS.labels(gvr).inc()
                metrics.WATCH_RESTARTS.labels(gvr, "gone").inc()
                log.info("watch.gone", gvr=gvr, namespace=self.namespace)
                self.rv = None
            except (aiohttp.ServerTimeoutError, TimeoutError):
                metrics.WATCH_RESTARTS.labels(gvr, "dead").inc()
                log.warning("watch.dead", gvr=gvr, namespace=self.namespace)
            except ApiError as exc:
                if self.rv is None and self._watch_list and exc.status in (400, 403, 422):
                    # The server refuses sendInitialEvents (or the feature is off): LIST instead.
                    log.info("watch.list_fallback", gvr=gvr, reason=exc.reason)
                    self._watch_list = False
                    continue
                metrics.WATCH_RESTARTS.labels(gvr, "error").inc()
                log.warning("watch.error", gvr=gvr, status=exc.status, error=exc.message)
                if exc.status == 403:
                    self._set_forbidden(exc.message or exc.reason or "Forbidden")
                await asyncio.sleep(backoff.next())
            except (aiohttp.ClientError, OSError, ValueError) as exc:
                metrics.WATCH_RESTARTS.labels(gvr, "error").inc()
                log.warning("watch.error", gvr=gvr, error=str(exc) or type(exc).__name__)
                await asyncio.sleep(backoff.next())

    def _listing(self) -> None:
        if self._on_listing is not None:
            self._on_listing()

    def _set_forbidden(self, message: str | None) -> None:
        if message != self.forbidden:
            self.forbidden = message
            if self._on_access is not None:
                self._on_access()

    async def _snapshot(self, initial: _Initial[Prepared], rv: str) -> None:
        objects = initial.objects
        deleted = set(self._known) - set(objects)
        self._known = initial.versions
        self.rv = rv
        self._end_backlog()
        self._set_forbidden(None)
        await self.sink.on_snapshot(objects, deleted, rv)
        self.synced.set()

    async def relist(self) -> None:
        """One paginated LIST, delivered as a snapshot (the fallback, and one-shot exports)."""
        objects = _Initial[Prepared]()
        self._listing()
        params: dict[str, str] = {"limit": str(self.page_size)}
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        while True:
            page = await self.client.get(self.path, params=params, timeout=120)
            kind = self.rtype.kind
            api_version = self.rtype.api_version
            for item in page.get("items") or []:
                item.setdefault("kind", kind)
                item.setdefault("apiVersion", api_version)
                rv = str((item.get("metadata") or {}).get("resourceVersion", ""))
                objects.add(key_of(item), rv, self.prepare(item))
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                break
            params["continue"] = token
        await self._snapshot(objects, str(page["metadata"]["resourceVersion"]))

    async def _watch(self, backoff: Backoff) -> None:
        params, initial = await self._watch_params()
        gvr = self.rtype.gvr
        async for event in self.client.watch(self.path, params, idle_timeout=self.idle_timeout):
            event_type = event.get("type", "")
            obj = event.get("object") or {}
            if event_type == "ERROR":
                if obj.get("code") == 410:
                    raise Gone()
                raise ApiError(
                    int(obj.get("code") or 500), obj.get("reason", ""), obj.get("message", "")
                )
            backoff.reset()
            self._set_forbidden(None)
            rv = str((obj.get("metadata") or {}).get("resourceVersion", ""))
            if event_type == "BOOKMARK":
                initial = await self._bookmark(obj, rv, initial)
                continue
            metrics.WATCH_EVENTS.labels(gvr, event_type).inc()
            key = key_of(obj)
            if initial is not None:
                initial.add(key, rv, self.prepare(obj))
            else:
                await self._live(event_type, obj, key, rv)

    async def _watch_params(self) -> tuple[dict[str, str], _Initial[Prepared] | None]:
        """The watch's query, and the initial state to gather first (None: resume at the
        cursor, with the backlog of changes since it when one is due)."""
        params = self._params()
        if self.rv is None:
            params.update(
                sendInitialEvents="true", resourceVersionMatch="NotOlderThan", resourceVersion=""
            )
            self._listing()
            return params, _Initial()
        params["resourceVersion"] = self.rv
        if self._backlog_due:
            self._backlog = await Backlog.open(
                self.client,
                self.path,
                self.rv,
                gvr=self.rtype.gvr,
                label_selector=self.label_selector,
                page_size=self.page_size,
            )
            self._backlog_due = False
            if self._backlog is not None:
                log.info(
                    "watch.backlog",
                    gvr=self.rtype.gvr,
                    namespace=self.namespace,
                    cursor=self.rv,
                    horizon=self._backlog.horizon,
                )
        return params, None

    async def _bookmark(
        self, obj: dict[str, Any], rv: str, initial: _Initial[Prepared] | None
    ) -> _Initial[Prepared] | None:
        """The end of the initial events (hand over the snapshot), or a newer cursor; the
        initial state still being gathered."""
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if initial is not None and annotations.get(INITIAL_EVENTS_END) == "true":
            await self._snapshot(initial, rv)
            return None
        if initial is None:
            self.rv = rv
            if self._backlog is not None and self._backlog.reached(rv):
                self._end_backlog()
        return initial

    async def _live(self, event_type: str, obj: dict[str, Any], key: ObjectKey, rv: str) -> None:
        """A change after the initial state: to the sink, unless the backlog shows it stale."""
        stale = False
        if self._backlog is not None:
            if self._backlog.covers(rv):
                stale = not await self._backlog.applies(event_type, key, rv)
            else:
                self._end_backlog()
        if event_type == "DELETED":
            self._known.pop(key, None)
        else:
            self._known[key] = rv
        self.rv = rv
        if not stale:
            await self.sink.on_event(event_type, obj, rv)
        elif self._on_stale is not None:
            await self._on_stale(event_type, obj, rv)

    def _end_backlog(self) -> None:
        """The watch passed the backlog's horizon (or re-listed): every event is live now."""
        backlog, self._backlog, self._backlog_due = self._backlog, None, False
        if backlog is None:
            return
        log.info(
            "watch.backlog_done",
            gvr=self.rtype.gvr,
            namespace=self.namespace,
            applied=backlog.applied,
            stale=backlog.stale,
            lookups=backlog.lookups,
            listed=backlog.listed,
            lookup_seconds=round(backlog.seconds, 3),
        )
