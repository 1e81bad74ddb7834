"""The HTTPS receiver for kube-apiserver's audit webhook: `POST /audit-webhook/<route>`.

kube-apiserver appends `?timeout=30s` to the configured URL; routing uses the path only.
Each route is one cluster: its facts are stored under the route and only a resolver for that
route reads them, so clusters cannot name each other's authors. A route may also be bound to
client certificate CNs (`name=cn1,cn2`), so one cluster's client cannot post to another's route.

Answers: 200 (accepted; events without an object, failed or read-only requests are skipped and
counted), 401 (no verified client certificate), 403 (certificate not allowed on this route),
404 (unknown route), 413 (body over the cap), 415 (not `application/json`), 400 (not JSON or
not an audit EventList), 503 (the fact index failed; kube-apiserver retries the batch).
Nothing here can stop mirroring: audit only names the author.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass

import structlog
from aiohttp import web

from kubescribe import metrics
from kubescribe.attribution.decode import AuditDecodeError, Decoded, decode_event_list
from kubescribe.attribution.facts import FactIndex, keyed
from kubescribe.server.tls import peer_common_name

log = structlog.get_logger(__name__)

DEFAULT_MAX_BODY = 32 * 1024 * 1024
PATH_PREFIX = "/audit-webhook/"
_ROUTE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_THREAD_DECODE_BYTES = 256 * 1024


@dataclass(frozen=True)
class AuditRoute:
    """A route name and the client certificate CNs allowed to post to it (empty: any
    certificate the client CA verifies)."""

    name: str
    clients: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, spec: str) -> AuditRoute:
        """`name` or `name=cn1,cn2`; names are DNS labels."""
        name, _, clients = spec.partition("=")
        name = name.strip()
        if not _ROUTE.fullmatch(name):
            raise ValueError(f"audit route {name!r} is not a DNS label ([a-z0-9-], max 63)")
        return cls(name, frozenset(c.strip() for c in clients.split(",") if c.strip()))


def audit_app(
    facts: FactIndex,
    routes: Mapping[str, AuditRoute],
    *,
    max_body: int = DEFAULT_MAX_BODY,
    require_client_cert: bool = True,
) -> web.Application:
    """The receiver application (serve it on its own TLS site)."""

    def answer(status: int, message: str) -> web.Response:
        metrics.AUDIT_REQUESTS.labels(str(status)).inc()
        return web.json_response({"status": status, "message": message}, status=status)

    async def receive(request: web.Request) -> web.Response:
        peer = peer_common_name(request.transport)
        if require_client_cert and peer is None:
            return answer(401, "a client certificate is required")
        route = routes.get(request.match_info["route"])
        if route is None:
            return answer(404, "unknown audit route")
        if route.clients and peer not in route.clients:
            log.warning("audit.client_refused", route=route.name, client=peer)
            return answer(403, "this client may not post to this route")
        if request.content_type != "application/json":
            return answer(415, "want application/json")
        if request.content_length is not None and request.content_length > max_body:
            return answer(413, f"body over {max_body} bytes")
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return answer(413, f"body over {max_body} bytes")
        try:
            if len(body) > _THREAD_DECODE_BYTES:
                decoded = await asyncio.to_thread(decode_event_list, body)
            else:
                decoded = decode_event_list(body)
        except AuditDecodeError as exc:
            return answer(400, str(exc))
        _count(decoded)
        try:
            await facts.add(route.name, keyed(decoded.facts))
        except Exception as exc:  # the index is ours; never let it take the receiver down
            log.error("audit.store_failed", route=route.name, error=str(exc))
            return answer(503, "fact index unavailable")
        metrics.AUDIT_REQUESTS.labels("200").inc()
        return web.json_response(
            {"accepted": decoded.accepted, "skipped": dict(decoded.skipped)}, status=200
        )

    app = web.Application(client_max_size=max_body)
    app.router.add_post(PATH_PREFIX + "{route}", receive)
    return app


def _count(decoded: Decoded) -> None:
    if decoded.accepted:
        metrics.AUDIT_EVENTS.labels("fact").inc(decoded.accepted)
    for reason, count in decoded.skipped.items():
        metrics.AUDIT_EVENTS.labels(reason).inc(count)
