"""Alerts at run time (docs/alerts.md): watch the `Alert` objects, learn from each write report
which changes landed in which commit, group them per Alert, and deliver the bursts to each
Alert's receiver (a webhook here; Slack and Alertmanager in `slack` and `alertmanager`, bodies
rendered from the webhook's message) from a bounded queue, with retries, metrics and status.

An Alert only ever sees the reports of GitTargets in its own namespace, reads its Secrets
from that namespace only, and posts only to a URL the address policy allows (checked again,
resolved, before every attempt; redirects are not followed: `alert_delivery`).
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
import structlog
from pydantic import ValidationError

from kubescribe import metrics
from kubescribe.api import conditions as c
from kubescribe.api.alert import AlertSpec
from kubescribe.controller.alert_delivery import DeliveryFailed, Outgoing, post, secret_value
from kubescribe.controller.alertmanager import AlertmanagerMessage
from kubescribe.controller.caches import ObjectCache
from kubescribe.controller.slack import SlackMessage
from kubescribe.controller.status import Cond, StatusWriter
from kubescribe.git.records import WriteReport
from kubescribe.git.urlpolicy import UrlRefused, check_receiver_url, resolve_host
from kubescribe.kube.client import KubeClient
from kubescribe.kube.informer import Informer, ObjectKey, as_is
from kubescribe.mirror.alertmanager import alertmanager_body, endpoint
from kubescribe.mirror.alerts import (
    SIGNATURE_HEADER,
    AlertEvent,
    AlertRule,
    Burst,
    FieldMemory,
    RateLimit,
    event_of,
    message_body,
    signature,
)
from kubescribe.mirror.identity import ResourceType
from kubescribe.mirror.ignore import IgnoreRule, InvalidIgnore
from kubescribe.mirror.slack import slack_body
from kubescribe.waits import wait_event

log = structlog.get_logger(__name__)

ALERTS = ResourceType("kubescribe.io", "v1alpha1", "alerts", "Alert", True)
HMAC_KEY = "hmacKey"  # the key of the Secret named by spec.webhook.secretRef
QUEUE_SIZE = 256  # messages closed and not yet handed to their Alert's lane
LANE_SIZE = 32  # messages waiting per Alert: a receiver that is down holds only its own Alert's
BACKOFF = 1.0  # seconds before the second attempt, doubling, capped by the Alert's spec
POST_TIMEOUT = 10.0
TICK = 0.25  # seconds between looks at the grouping windows


@dataclass
class _Route:
    """One Alert as it runs: its rule, its open burst, its rate and its delivery state."""

    key: ObjectKey
    generation: int
    spec: AlertSpec | None
    rule: AlertRule
    refusal: Cond | None  # why it sends nothing (an invalid spec, a refused URL)
    limit: RateLimit
    burst: Burst | None = None
    failing: tuple[str, str] | None = None  # (reason, message) of the last failed delivery
    sent: int = 0
    last_sent_at: str | None = None
    dirty: bool = True  # its status needs writing

    @property
    def name(self) -> str:
        return f"{self.key[0]}/{self.key[1]}"


@dataclass(frozen=True)
class _Message:
    """A message for a webhook receiver."""

    route: ObjectKey
    url: str
    secret: str | None
    body: bytes
    count: int
    attempts: int = 8  # spec.delivery
    backoff_cap: float = 60.0


def _outgoing(key: ObjectKey, spec: AlertSpec, body: bytes, count: int) -> _Message | Outgoing:
    """The message for the Alert's receiver; Slack's and Alertmanager's bodies are rendered
    from the webhook's (so whatever a change carries reaches every receiver)."""
    retry = spec.delivery.attempts, float(spec.delivery.max_backoff_seconds)
    if spec.slack is not None:
        slack = slack_body(json.loads(body))
        return SlackMessage(key, spec.slack.url_secret_ref, slack, count, *retry)
    if spec.alertmanager is not None:
        manager = spec.alertmanager
        alerts = alertmanager_body(json.loads(body), manager.resolve_after_seconds)
        token = manager.bearer_token_secret_ref
        return AlertmanagerMessage(key, endpoint(manager.url), token, alerts, count, *retry)
    assert spec.webhook is not None  # AlertSpec has exactly one receiver
    secret = spec.webhook.secret_ref.name if spec.webhook.secret_ref else None
    return _Message(key, spec.webhook.url, secret, body, count, *retry)


def _route(key: ObjectKey, obj: Mapping[str, Any]) -> _Route:
    """An Alert's route from its object; an invalid spec gives a route that sends nothing."""
    generation = int(obj.get("metadata", {}).get("generation") or 0)
    try:
        spec = AlertSpec.model_validate(obj.get("spec") or {})
        sel = spec.selector
        exclude = IgnoreRule.parse(
            sel.exclude_authors.users,
            sel.exclude_authors.service_accounts,
            sel.exclude_authors.field_managers,
        )
    except (ValidationError, InvalidIgnore) as exc:
        text = str(exc).replace("spec.ignore.changesBy", "spec.selector.excludeAuthors")
        why = Cond(c.READY, "False", c.INVALID_SPEC, text)
        return _Route(key, generation, None, AlertRule(), why, RateLimit(1))
    rule = AlertRule(
        kinds=frozenset(sel.kinds),
        namespaces=frozenset(sel.namespaces),
        operations=frozenset(sel.operations),
        authors=frozenset(sel.authors),
        exclude=exclude,
        field_paths=tuple(sel.field_paths),
    )
    refusal = None
    # A Slack URL is in a Secret: it is checked before each attempt (alert_delivery.post).
    receiver = spec.webhook or spec.alertmanager
    try:
        if receiver is not None:
            check_receiver_url(receiver.url)
    except UrlRefused as exc:
        refusal = Cond(c.READY, "False", c.URL_REFUSED, f"{exc.reason}: {exc.message}")
    return _Route(key, generation, spec, rule, refusal, RateLimit(spec.max_messages_per_hour))


def _evaluated(key: ObjectKey, obj: Mapping[str, Any], generation: int) -> _Route:
    """`_route`, and a route that sends nothing if evaluating the spec raised (a bug)."""
    try:
        return _route(key, obj)
    except Exception:
        log.exception("alert.spec_not_evaluated", alert=f"{key[0]}/{key[1]}")
        why = Cond(c.READY, "False", c.SPEC_NOT_EVALUATED, "Evaluating the spec failed (logged)")
        return _Route(key, generation, None, AlertRule(), why, RateLimit(1))


def route_conditions(route: _Route) -> list[Cond]:
    """Ready and DeliveryFailing of an Alert (pure)."""
    if route.refusal is not None:
        return [route.refusal, Cond(c.DELIVERY_FAILING, "False", c.OK, "Nothing is sent")]
    if route.failing is not None:
        reason, message = route.failing
        return [
            Cond(c.READY, "False", reason, message),
            Cond(c.DELIVERY_FAILING, "True", reason, message),
        ]
    if route.spec is not None and route.spec.suspend:
        ready = Cond(c.READY, "False", c.SUSPENDED, "spec.suspend is true: nothing is sent")
    else:
        ready = Cond(c.READY, "True", c.READY, "Ready")
    return [ready, Cond(c.DELIVERY_FAILING, "False", c.OK, "Messages are delivered")]


@dataclass
class Alerts:
    """The Alerts of the cluster (see the module). `observe` is the manager's report hook."""

    client: KubeClient
    status: StatusWriter
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    resolve: Callable[[str], list[str]] = resolve_host
    backoff: float = BACKOFF
    queue_size: int = QUEUE_SIZE
    _routes: dict[ObjectKey, _Route] = field(default_factory=dict)
    _memory: FieldMemory = field(default_factory=FieldMemory)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._cache = ObjectCache(self._wake)
        self._queue: asyncio.Queue[_Message | Outgoing] = asyncio.Queue(self.queue_size)
        self._lanes: dict[ObjectKey, asyncio.Queue[_Message | Outgoing]] = {}

    # -- the report hook (event loop) ------------------------------------------------------
    def observe(self, report: WriteReport) -> None:
        """Collect the report's landed changes into the bursts of its namespace's Alerts."""
        if not report.landed:
            return
        try:
            self._observe(report)
        except Exception:  # a bug here must not cost the manager its report
            log.exception("alert.observe_failed", target=str(report.target))

    def _observe(self, report: WriteReport) -> None:
        namespace = report.target.namespace
        routes = [r for k, r in self._routes.items() if k[0] == namespace]
        if not routes:
            return
        now, at = self.clock(), self.wall()
        for landed in report.landed:
            paths = self._memory.changed(landed.change)
            event = event_of(landed.change, landed.commit, landed.author, paths, at, landed.url)
            for route in routes:
                self._collect(route, event, now)
        self._wake.set()

    def _collect(self, route: _Route, event: AlertEvent, now: float) -> None:
        spec = route.spec
        if spec is None or route.refusal is not None or spec.suspend:
            return
        if not route.rule.matches(event):
            return
        if route.burst is None:
            route.burst = Burst(now)
        route.burst.events.append(event)

    # -- running ---------------------------------------------------------------------------
    async def run(self) -> None:
        """Watch the Alerts, close the bursts and deliver, until cancelled."""
        informer = Informer(self.client, ALERTS, self._cache, prepare=as_is)
        tasks = [asyncio.create_task(informer.run()), asyncio.create_task(self._deliver())]
        try:
            while True:
                try:
                    self._sync()
                    self._close_bursts()
                    await self._write_statuses()
                except Exception:  # logged and tried again: alerts must not stop for good
                    log.exception("alert.loop_failed")
                await wait_event(self._wake, TICK)
                self._wake.clear()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _sync(self) -> None:
        """Routes follow the Alert objects (a new generation starts afresh)."""
        objects = self._cache.objects
        for key in [k for k in self._routes if k not in objects]:
            del self._routes[key]
        for key, obj in objects.items():
            generation = int(obj.get("metadata", {}).get("generation") or 0)
            current = self._routes.get(key)
            if current is None or current.generation != generation:
                self._routes[key] = _evaluated(key, obj, generation)

    def _close_bursts(self) -> None:
        now = self.clock()
        for route in self._routes.values():
            burst, spec = route.burst, route.spec
            if burst is None or spec is None:
                continue
            if not (self._stopping.is_set() or burst.due(spec.group_window_seconds, now)):
                continue
            route.burst = None
            if not route.limit.allow(now):
                metrics.ALERT_MESSAGES.labels("ratelimited").inc()
                continue
            body = message_body(route.name, burst.events, self.wall())
            message = _outgoing(route.key, spec, body, len(burst.events))
            try:
                self._queue.put_nowait(message)
            except asyncio.QueueFull:
                metrics.ALERT_MESSAGES.labels("dropped").inc()
                self._fail(route, c.ALERT_QUEUE_FULL, "The delivery queue is full: dropped")
            self._depth()

    async def _write_statuses(self) -> None:
        for key, route in list(self._routes.items()):
            obj = self._cache.objects.get(key)
            if obj is None or not route.dirty:
                continue
            route.dirty = False
            extra: dict[str, Any] = {"messagesSent": route.sent}
            if route.last_sent_at is not None:
                extra["lastSentAt"] = route.last_sent_at
            await self.status.write(obj, "alerts", route_conditions(route), extra)

    def _fail(self, route: _Route, reason: str, message: str) -> None:
        if route.failing != (reason, message):
            route.failing, route.dirty = (reason, message), True
            log.warning("alert.delivery_failed", alert=route.name, reason=reason, error=message)
        self._wake.set()

    async def flush(self) -> None:
        """At a stop (bounded by the caller, `run` still running): close every open window
        now and deliver what is queued; a message waiting for its next try is tried once
        more at once, and a failed try is not retried."""
        self._stopping.set()
        try:
            self._close_bursts()
        except Exception:  # a bug here must not cost the rest of the stop
            log.exception("alert.flush_failed")
        queued = self._depth()
        await self._queue.join()
        for lane in list(self._lanes.values()):
            await lane.join()
        log.info("alert.flushed", messages=queued)

    # -- delivery --------------------------------------------------------------------------
    async def _deliver(self) -> None:
        """Hand each message to its Alert's lane, each lane delivered by a task of its own:
        one receiver that is down, and the retries it costs, hold no other Alert's messages."""
        timeout = aiohttp.ClientTimeout(total=POST_TIMEOUT)
        workers: set[asyncio.Task[None]] = set()
        async with aiohttp.ClientSession(timeout=timeout, trust_env=False) as session:
            try:
                while True:
                    message = await self._queue.get()
                    lane = self._lanes.get(message.route)
                    if lane is None:
                        lane = self._lanes[message.route] = asyncio.Queue(LANE_SIZE)
                        worker = asyncio.create_task(self._drain(session, message.route, lane))
                        workers.add(worker)
                        worker.add_done_callback(workers.discard)
                    try:
                        lane.put_nowait(message)
                    except asyncio.QueueFull:
                        self._lane_full(message.route)
                    finally:
                        self._queue.task_done()
                    self._depth()
            finally:
                for worker in list(workers):
                    worker.cancel()
                await asyncio.gather(*workers, return_exceptions=True)

    async def _drain(
        self,
        session: aiohttp.ClientSession,
        key: ObjectKey,
        lane: asyncio.Queue[_Message | Outgoing],
    ) -> None:
        """Deliver one Alert's messages in order; ends once the Alert is gone and its lane empty."""
        while True:
            message = await lane.get()
            try:
                await self._deliver_one(session, message)
            except Exception:  # a bug costs this message, not the Alert's lane
                metrics.ALERT_MESSAGES.labels("failed").inc()
                log.exception("alert.delivery_crashed")
            finally:
                lane.task_done()
                self._depth()
            if lane.empty() and key not in self._routes:
                del self._lanes[key]
                return

    def _lane_full(self, key: ObjectKey) -> None:
        metrics.ALERT_MESSAGES.labels("dropped").inc()
        route = self._routes.get(key)
        if route is not None:
            self._fail(route, c.ALERT_QUEUE_FULL, "The Alert's delivery queue is full: dropped")

    def _depth(self) -> int:
        depth = self._queue.qsize() + sum(lane.qsize() for lane in self._lanes.values())
        metrics.ALERT_QUEUE_DEPTH.set(depth)
        return depth

    async def _deliver_one(
        self, session: aiohttp.ClientSession, message: _Message | Outgoing
    ) -> None:
        failure = DeliveryFailed(c.RECEIVER_UNREACHABLE, "not tried")
        for attempt in range(message.attempts):
            route = self._routes.get(message.route)
            if route is None:  # the Alert is gone
                metrics.ALERT_MESSAGES.labels("dropped").inc()
                return
            try:
                await self._post(session, message)
            except DeliveryFailed as exc:
                failure = exc
                self._fail(route, exc.reason, exc.message)
                last = attempt == message.attempts - 1
                if not exc.retry or last or self._stopping.is_set():
                    break
                delay = min(message.backoff_cap, self.backoff * 2**attempt)
                await wait_event(self._stopping, delay * random.uniform(0.8, 1.0))
                continue
            route.sent += 1
            route.last_sent_at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            route.failing, route.dirty = None, True
            metrics.ALERT_MESSAGES.labels("sent").inc()
            log.info("alert.sent", alert=route.name, changes=message.count)
            self._wake.set()
            return
        metrics.ALERT_MESSAGES.labels("failed").inc()
        log.warning("alert.message_dropped", reason=failure.reason, error=failure.message)

    async def _post(self, session: aiohttp.ClientSession, message: _Message | Outgoing) -> None:
        if not isinstance(message, _Message):
            await message.send(session, self.client, self.resolve)
            return
        headers = {}
        if message.secret is not None:  # the HMAC key, from the Alert's own namespace
            key = await secret_value(self.client, message.route[0], message.secret, HMAC_KEY)
            headers[SIGNATURE_HEADER] = signature(key, message.body)
        await post(session, message.url, message.body, headers, self.resolve)
