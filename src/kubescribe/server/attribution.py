"""The attribution flags, and the HTTPS sites that feed the fact index: the audit receiver and
the admission webhook (the index and the request records are built by `kubescribe.wiring`)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import structlog
from aiohttp import web

from kubescribe.attribution.facts import FactIndex
from kubescribe.attribution.requests import RecordedRequestAuthors
from kubescribe.defaults import (
    DEFAULT_ADMISSION_CLIENT,
    DEFAULT_MAX_BODY,
    DEFAULT_MAX_EVENTS,
    MAX_AUDIT_BODY,
)
from kubescribe.server.admission import admission_app
from kubescribe.server.audit import READ_TIMEOUT, AuditRoute, audit_app
from kubescribe.server.tls import ANY_CLIENT, ClientPolicy, reload_on_change, server_context
from kubescribe.store.redis_options import RedisOptions

log = structlog.get_logger(__name__)

# A DNS subdomain (RFC 1123): what the API server accepts as the name of a cluster-scoped object.
_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_OBJECT_NAME = re.compile(rf"(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*")


@dataclass(frozen=True)
class AttributionOptions:
    """The `kubescribe run` flags of attribution (all off by default)."""

    audit_addr: str = ""
    audit_tls_cert: Path | None = None
    audit_tls_key: Path | None = None
    audit_client_ca: Path | None = None
    audit_route: str = "local"
    audit_extra_routes: tuple[str, ...] = ()
    audit_max_body: int = DEFAULT_MAX_BODY
    audit_max_events: int = DEFAULT_MAX_EVENTS
    grace: float = 3.0
    silent_after: float = 300.0
    redis: RedisOptions | None = None  # share facts (and cursors) through Redis
    webhook_addr: str = ""
    webhook_tls_cert: Path | None = None
    webhook_tls_key: Path | None = None
    webhook_client_ca: Path | None = None
    webhook_client_cns: tuple[str, ...] = (DEFAULT_ADMISSION_CLIENT,)
    webhook_allow_anonymous: bool = False  # managed clusters: the API server has no client cert
    changes_webhook_url: str = ""  # set: record who writes watched objects (attribution)
    changes_webhook_ca: Path | None = None  # caBundle of the registration
    changes_webhook_name: str = "kubescribe-attribution"  # its ValidatingWebhookConfiguration
    max_facts: int = 100_000
    max_request_records: int = 10_000
    fact_retention: float = 900.0
    read_timeout: float = READ_TIMEOUT

    def problems(self) -> list[str]:
        """Flag combinations that cannot work, as messages (empty: fine)."""
        found = [*self._audit_problems(), *self._webhook_problems(), *self._bound_problems()]
        if self.redis is not None:
            found.extend(self.redis.problems())
        for spec in (self.audit_route, *self.audit_extra_routes):
            try:
                AuditRoute.parse(spec)
            except ValueError as exc:
                found.append(str(exc))
        return found

    def _audit_problems(self) -> list[str]:
        found = []
        if self.audit_addr and not (self.audit_tls_cert and self.audit_tls_key):
            found.append("--audit-addr needs --audit-tls-cert and --audit-tls-key")
        if self.audit_addr and not self.audit_client_ca:
            found.append("--audit-addr needs --audit-client-ca (clients must authenticate)")
        return found

    def _webhook_problems(self) -> list[str]:
        found = []
        if self.webhook_addr and not (self.webhook_tls_cert and self.webhook_tls_key):
            found.append("--webhook-addr needs --webhook-tls-cert and --webhook-tls-key")
        if self.webhook_addr and not self.webhook_client_ca and not self.webhook_allow_anonymous:
            found.append(
                "--webhook-addr needs --webhook-client-ca (kube-apiserver must authenticate: "
                "without it anyone reaching the port could name CommitRequest authors)"
            )
        if self.changes_webhook_url and not self.webhook_addr:
            found.append("--changes-webhook-url needs --webhook-addr (the site that serves it)")
        if self.changes_webhook_url and not self.changes_webhook_url.startswith("https://"):
            found.append("--changes-webhook-url must be an https:// URL")
        if self.changes_webhook_url and not self.changes_webhook_ca:
            found.append("--changes-webhook-url needs --changes-webhook-ca (its caBundle)")
        if not _OBJECT_NAME.fullmatch(self.changes_webhook_name):
            found.append(
                f"--changes-webhook-name {self.changes_webhook_name!r}: a Kubernetes object "
                "name (lowercase letters, digits, '-' and '.', at most 253 characters)"
            )
        cns = {c.strip() for c in self.webhook_client_cns}
        if self.webhook_addr and ("" in cns or not cns or (ANY_CLIENT in cns and len(cns) > 1)):
            found.append("--webhook-client-cn: names, or a single '*'")
        return found

    def _bound_problems(self) -> list[str]:
        found = []
        if self.grace < 0:
            found.append("--attribution-grace must not be negative")
        if not 1024 <= self.audit_max_body <= MAX_AUDIT_BODY:
            found.append(f"--audit-max-body must be between 1024 and {MAX_AUDIT_BODY} bytes")
        if self.audit_max_events < 1:
            found.append("--audit-max-events must be at least 1")
        return found

    @property
    def route(self) -> AuditRoute:
        return AuditRoute.parse(self.audit_route)


def _split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


@contextlib.asynccontextmanager
async def attribution_sites(
    opts: AttributionOptions, facts: FactIndex, requests: RecordedRequestAuthors
) -> AsyncIterator[list[web.AppRunner]]:
    """Serve the configured sites (audit facts into `facts`, admissions into `requests` and,
    with the change webhook, `facts`); stop them on exit."""
    runners: list[web.AppRunner] = []
    reloads: list[asyncio.Task[None]] = []
    try:
        if opts.audit_addr:
            runners.append(await _audit_site(opts, facts, reloads))
        if opts.webhook_addr:
            runners.append(await _admission_site(opts, facts, requests, reloads))
        yield runners
    finally:
        for task in reloads:
            task.cancel()
        for runner in runners:
            await runner.cleanup()


async def _audit_site(
    opts: AttributionOptions, facts: FactIndex, reloads: list[asyncio.Task[None]]
) -> web.AppRunner:
    assert opts.audit_tls_cert and opts.audit_tls_key
    own = opts.route
    routes = {r.name: r for r in map(AuditRoute.parse, opts.audit_extra_routes)}
    routes[own.name] = own
    ctx = server_context(opts.audit_tls_cert, opts.audit_tls_key, opts.audit_client_ca)
    app = audit_app(
        facts,
        routes,
        max_body=opts.audit_max_body,
        max_events=opts.audit_max_events,
        read_timeout=opts.read_timeout,
    )
    runner = await _serve(app, opts.audit_addr, ctx)
    reloads.append(
        asyncio.create_task(
            reload_on_change(ctx, opts.audit_tls_cert, opts.audit_tls_key, opts.audit_client_ca)
        )
    )
    log.info(
        "audit.listening",
        addr=opts.audit_addr,
        routes={r.name: sorted(r.clients.names) for r in routes.values()},
    )
    return runner


async def _admission_site(
    opts: AttributionOptions,
    facts: FactIndex,
    requests: RecordedRequestAuthors,
    reloads: list[asyncio.Task[None]],
) -> web.AppRunner:
    assert opts.webhook_tls_cert and opts.webhook_tls_key
    ctx = server_context(opts.webhook_tls_cert, opts.webhook_tls_key, opts.webhook_client_ca)
    clients = ClientPolicy(
        frozenset(c.strip() for c in opts.webhook_client_cns),
        anonymous=opts.webhook_allow_anonymous,
    )
    app = admission_app(
        requests,
        clients,
        changes=facts if opts.changes_webhook_url else None,
        read_timeout=opts.read_timeout,
    )
    runner = await _serve(app, opts.webhook_addr, ctx)
    reloads.append(
        asyncio.create_task(
            reload_on_change(
                ctx, opts.webhook_tls_cert, opts.webhook_tls_key, opts.webhook_client_ca
            )
        )
    )
    log.info("admission.listening", addr=opts.webhook_addr, clients=sorted(clients.names))
    return runner


async def _serve(app: web.Application, addr: str, ctx: ssl.SSLContext) -> web.AppRunner:
    host, port = _split_addr(addr)
    # The rest of a refused body is drained for 2 s at most (aiohttp's default is 10 s).
    runner = web.AppRunner(app, access_log=None, lingering_time=2.0)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=ctx).start()
    return runner
