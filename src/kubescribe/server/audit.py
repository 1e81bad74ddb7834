"""The HTTPS receiver for kube-apiserver's audit webhook: `POST /audit-webhook/<route>`.

kube-apiserver appends `?timeout=30s` to the configured URL; routing uses the path only.
Each route is one cluster: its facts are stored under the route and only a resolver for that
route reads them, so clusters cannot name each other's authors. Each route is bound to client
certificate identities (`AuditRoute.parse`): by default only a certificate named
`kubescribe-audit-<route>` may post to it, so a kubelet or admin certificate from the same CA
cannot.

Bounds: the body cap (`max_body`), a decoded-memory budget checked before parsing
(`json_memory_bound`, `DECODED_BUDGET`), an event count cap (`max_events`), a body read
timeout, and per-field caps in the decoder. The defaults keep one request under 64 MiB of
decoded memory (docs/attribution.md has the measured numbers).

Answers: 200 (accepted; events without an object, failed or read-only requests are skipped and
counted), 401 (no verified client certificate), 403 (certificate not allowed on this route),
404 (unknown route), 408 (body not received in time), 413 (body, decoded size or event count
over its cap), 415 (not `application/json`), 400 (not JSON or not an audit EventList), 503 (the
fact index failed; kube-apiserver retries the batch). Refusals are counted in
`kubescribe_webhook_refusals_total{server="audit",reason}`. Nothing here can stop mirroring:
audit only names the author.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

import structlog
from aiohttp import web

from kubescribe import metrics
from kubescribe.attribution.decode import (
    AuditDecodeError,
    AuditTooLarge,
    Decoded,
    decode_event_list,
    json_memory_bound,
)
from kubescribe.attribution.facts import FactIndex, keyed
from kubescribe.defaults import DEFAULT_MAX_BODY, DEFAULT_MAX_EVENTS, MiB
from kubescribe.server.tls import ANY_CLIENT, ClientPolicy, peer_identities

log = structlog.get_logger(__name__)

DECODED_BUDGET = 64 * MiB
READ_TIMEOUT = 30.0
DEFAULT_CLIENT_PREFIX = "kubescribe-audit-"
PATH_PREFIX = "/audit-webhook/"
_ROUTE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_THREAD_DECODE_BYTES = 256 * 1024


@dataclass(frozen=True)
class AuditRoute:
    """A route name and the client certificate identities allowed to post to it."""

    name: str
    clients: ClientPolicy

    @classmethod
    def parse(cls, spec: str) -> AuditRoute:
        """`name` (only the certificate `kubescribe-audit-<name>` may post), `name=id1,id2`
        (certificates whose CN or DNS/URI SAN is one of them), `name=*` (any certificate the
        client CA verifies: only with a CA dedicated to this route). Names are DNS labels."""
        name, bound, clients = spec.partition("=")
        name = name.strip()
        if not _ROUTE.fullmatch(name):
            raise ValueError(f"audit route {name!r} is not a DNS label ([a-z0-9-], max 63)")
        ids = frozenset(c.strip() for c in clients.split(",") if c.strip())
        if bound and not ids:
            raise ValueError(f"audit route {name!r}: no client identity after '='")
        if ANY_CLIENT in ids and len(ids) > 1:
            raise ValueError(f"audit route {name!r}: '*' cannot be combined with names")
        return cls(name, ClientPolicy(ids or frozenset({DEFAULT_CLIENT_PREFIX + name})))


class _OverBudget(Exception):
    """The body could decode to more than the memory budget."""


def _decode(body: bytes, max_events: int, budget: int) -> Decoded:
    if json_memory_bound(body) > budget:
        raise _OverBudget
    return decode_event_list(body, max_events)


class Refused(Exception):
    """A request refused with HTTP `status`, counted by `reason`."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


async def read_body(request: web.Request, max_body: int, read_timeout: float) -> bytes:
    """The body of a JSON request, at most `max_body` bytes, arrived within `read_timeout`."""
    if request.content_type != "application/json":
        raise Refused(415, "content_type", "want application/json")
    too_large = f"body over {max_body} bytes"
    if request.content_length is not None and request.content_length > max_body:
        raise Refused(413, "body_too_large", too_large)
    try:
        async with asyncio.timeout(read_timeout):
            return await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise Refused(413, "body_too_large", too_large) from None
    except TimeoutError:
        raise Refused(408, "read_timeout", "body not received in time") from None


async def _decoded(body: bytes, max_events: int, budget: int) -> Decoded:
    """The facts of an audit EventList (large bodies decoded on a thread)."""
    try:
        if len(body) > _THREAD_DECODE_BYTES:
            return await asyncio.to_thread(_decode, body, max_events, budget)
        return _decode(body, max_events, budget)
    except _OverBudget:
        message = f"body could decode to more than {budget} bytes"
        raise Refused(413, "decoded_too_large", message) from None
    except AuditTooLarge as exc:
        raise Refused(413, "too_many_events", str(exc)) from None
    except AuditDecodeError as exc:
        raise Refused(400, "not_an_event_list", str(exc)) from None


def audit_app(
    facts: FactIndex,
    routes: Mapping[str, AuditRoute],
    *,
    max_body: int = DEFAULT_MAX_BODY,
    max_events: int = DEFAULT_MAX_EVENTS,
    budget: int = DECODED_BUDGET,
    read_timeout: float = READ_TIMEOUT,
) -> web.Application:
    """The receiver application (serve it on its own TLS site with a client CA)."""

    def refuse(
        status: int, reason: str, message: str, route: str = "", peer: frozenset[str] = frozenset()
    ) -> web.Response:
        metrics.AUDIT_REQUESTS.labels(str(status)).inc()
        metrics.REFUSED_REQUESTS.labels("audit", reason).inc()
        log.warning(
            "audit.refused", status=status, reason=reason, route=route, client=sorted(peer)[:4]
        )
        return web.json_response({"status": status, "message": message}, status=status)

    async def receive(request: web.Request) -> web.Response:
        peer = peer_identities(request.transport)
        if peer is None:
            return refuse(401, "no_client_certificate", "a client certificate is required")
        name = request.match_info["route"][:63]
        route = routes.get(name)
        if route is None:
            return refuse(404, "unknown_route", "unknown audit route", name, peer)
        try:
            if not route.clients.allows(peer):
                raise Refused(403, "client_not_allowed", "this client may not post here")
            body = await read_body(request, max_body, read_timeout)
            decoded = await _decoded(body, max_events, budget)
        except Refused as no:
            return refuse(no.status, no.reason, no.message, name, peer)
        _count(decoded)
        metrics.AUDIT_LAST_EVENT.labels(route.name).set(time.time())
        try:
            await facts.add(route.name, keyed(decoded.facts, decoded.latest))
        except Exception as exc:  # the index is ours; never let it take the receiver down
            log.error("audit.store_failed", route=route.name, error=str(exc))
            return refuse(503, "fact_index_failed", "fact index unavailable", name, peer)
        metrics.AUDIT_REQUESTS.labels("200").inc()
        return web.json_response(
            {"accepted": decoded.accepted, "skipped": dict(decoded.skipped)}, status=200
        )

    for name in routes:
        metrics.AUDIT_LAST_EVENT.labels(name).set(0)
    app = web.Application(client_max_size=max_body)
    app.router.add_post(PATH_PREFIX + "{route}", receive)
    return app


def _count(decoded: Decoded) -> None:
    if decoded.accepted:
        metrics.AUDIT_EVENTS.labels("fact").inc(decoded.accepted)
    for reason, count in decoded.skipped.items():
        metrics.AUDIT_EVENTS.labels(reason).inc(count)
