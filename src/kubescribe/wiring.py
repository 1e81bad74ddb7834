"""The composition root: every collaborator of the manager and the HTTPS sites is built here,
from the immutable `Settings` and `AttributionOptions`; no layer below builds another's."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from kubescribe.attribution.admitted import ROUTE as ADMISSION_ROUTE
from kubescribe.attribution.admitted import AdmittedAuthors
from kubescribe.attribution.facts import FactIndex
from kubescribe.attribution.health import RouteReports, RouteWatch
from kubescribe.attribution.requests import ROUTE as REQUESTS_ROUTE
from kubescribe.attribution.requests import RecordedRequestAuthors
from kubescribe.attribution.resolver import AuditAuthorResolver
from kubescribe.controller.alerts import Alerts
from kubescribe.controller.clusters import ClusterProviders
from kubescribe.controller.commitrequests import CommitRequests
from kubescribe.controller.cursors import CursorKeeper
from kubescribe.controller.encryption import EncryptionResolver
from kubescribe.controller.events import EventRecorder
from kubescribe.controller.manager import Manager, Parts, Settings
from kubescribe.controller.owner import ClusterRoleOwner
from kubescribe.controller.providers import Providers
from kubescribe.controller.shards import Shards
from kubescribe.controller.status import StatusWriter
from kubescribe.controller.tenantreads import TenantReadReviews
from kubescribe.controller.webhooks import ChangeWebhook
from kubescribe.kube.client import KubeClient
from kubescribe.kube.leases import LeaseClient
from kubescribe.mirror.authors import AuthorResolver, CommitRequestAuthors
from kubescribe.server.attribution import AttributionOptions, attribution_sites
from kubescribe.store.cursors import CursorStore, NoCursorStore
from kubescribe.store.memory import MemoryFactStore

if TYPE_CHECKING:
    from kubescribe.store.redis import RedisFactStore

# (URL, the CA bundle PEM to register now): the change webhook's registration
ChangeWebhookSource = tuple[str, Callable[[], bytes]]


@dataclass(frozen=True)
class Attribution:
    """What the rest of the operator uses: `resolver` (None when no audit facts can arrive:
    neither a receiver nor Redis is configured) and `requests` (CommitRequest authors; None
    when neither the admission webhook nor Redis is configured)."""

    facts: FactIndex
    resolver: AuthorResolver | None
    requests: CommitRequestAuthors | None
    sources: tuple[str, ...] = ()  # where authors can come from: audit, admission
    routes: RouteReports | None = None  # the health of the routes the resolver reads


# -- the stores: the one place Redis is chosen --------------------------------------------------
async def fact_store(opts: AttributionOptions) -> MemoryFactStore | RedisFactStore:
    """The fact index: in memory, or shared through Redis (started) when it is configured."""
    local = MemoryFactStore(
        max_records=opts.max_facts,
        retention=opts.fact_retention,
        limits={REQUESTS_ROUTE: opts.max_request_records, ADMISSION_ROUTE: opts.max_facts},
    )
    if opts.redis is None:
        return local
    # Imported only when configured: redis-py adds about 20 MB to every process.
    from kubescribe.store.redis import RedisFactStore  # noqa: PLC0415

    store = RedisFactStore(opts.redis, retention=opts.fact_retention, local=local)
    await store.start()
    return store


def cursor_store(opts: AttributionOptions) -> CursorStore:
    """Where resume cursors are kept: in Redis when it is configured (HA), else nowhere."""
    if opts.redis is None:
        return NoCursorStore()
    from kubescribe.store.redis_cursors import RedisCursorStore  # noqa: PLC0415

    return RedisCursorStore(opts.redis)


# -- attribution ---------------------------------------------------------------------------------
@contextlib.asynccontextmanager
async def attribution(opts: AttributionOptions) -> AsyncIterator[Attribution]:
    """Start the fact index, the resolver, the request records and the HTTPS sites that feed
    them; stop them on exit."""
    problems = opts.problems()
    if problems:
        raise ValueError("; ".join(problems))
    store = await fact_store(opts)
    try:
        audit = bool(opts.audit_addr or opts.redis)
        admitted = AdmittedAuthors(store) if opts.changes_webhook_url else None
        watch = RouteWatch(store, opts.silent_after)
        resolver = (
            AuditAuthorResolver(
                store, opts.route.name, opts.grace, audit=audit, admitted=admitted, routes=watch
            )
            if audit or admitted is not None
            else None
        )
        own = ((opts.route.name,) if audit else ()) + ((ADMISSION_ROUTE,) if admitted else ())
        requests = RecordedRequestAuthors(store)
        async with attribution_sites(opts, store, requests):
            yield Attribution(
                store,
                resolver,
                requests if opts.webhook_addr or opts.redis else None,
                sources=(("audit",) if audit else ()) + (("admission",) if admitted else ()),
                routes=RouteReports(watch, own, audit=audit) if resolver is not None else None,
            )
    finally:
        await store.close()


def changes_webhook(
    opts: AttributionOptions, bundle: Callable[[], bytes] | None = None
) -> ChangeWebhookSource | None:
    """The change webhook to register: its URL and its CA bundle, from the managed
    certificates (`bundle`) or else from --changes-webhook-ca (read once, here)."""
    if not opts.changes_webhook_url:
        return None
    if bundle is not None:
        return opts.changes_webhook_url, bundle
    if opts.changes_webhook_ca is None:
        return None
    pem = opts.changes_webhook_ca.read_bytes()
    return opts.changes_webhook_url, lambda: pem


# -- the manager ---------------------------------------------------------------------------------
def manager(
    client: KubeClient,
    settings: Settings,
    *,
    resolver: AuthorResolver | None = None,
    request_authors: CommitRequestAuthors | None = None,
    cursors: CursorStore | None = None,
    webhook: ChangeWebhookSource | None = None,
    routes: RouteReports | None = None,
    alerts: Alerts | None = None,
) -> Manager:
    """The manager with every collaborator it runs, built from `settings`."""
    poke = asyncio.Event()
    events = EventRecorder(client, settings.replica_id)
    status = StatusWriter(client, events)
    parts = Parts(
        poke=poke,
        events=events,
        status=status,
        providers=Providers(
            client,
            cache_dir=settings.cache_dir,
            allow_file_urls=settings.allow_file_urls,
            refresh_interval=settings.credentials_refresh,
            probe_interval=settings.probe_interval,
            on_change=poke.set,
            routes=routes,
        ),
        clusters=ClusterProviders(
            client,
            allow_insecure=settings.allow_insecure_cluster_tls,
            on_change=poke.set,
            routes=routes,
        ),
        encryption=EncryptionResolver(client),
        requests=CommitRequests(client, status, request_authors),
        cursors=CursorKeeper(cursors or NoCursorStore()),
        shards=_shards(client, settings, poke),
        webhook=_change_webhook(client, settings, webhook),
        tenant_reads=(
            TenantReadReviews(client, settings.tenant_service_account)
            if settings.tenant_service_account
            else None
        ),
        resolver=resolver,
    )
    if alerts is not None:
        parts = replace(parts, on_report=alerts.observe)
    return Manager(client, settings, parts)


def alerts(client: KubeClient, settings: Settings) -> Alerts:
    """The Alerts (controller/alerts.py): run beside the manager, told of its reports."""
    return Alerts(client, StatusWriter(client, EventRecorder(client, settings.replica_id)))


def _shards(client: KubeClient, settings: Settings, poke: asyncio.Event) -> Shards | None:
    """With a replica id: this replica's place among the others, through Leases."""
    if not settings.replica_id:
        return None
    return Shards(
        LeaseClient(client, settings.lease_namespace),
        settings.replica_id,
        duration=settings.lease_duration,
        renew_every=settings.lease_duration / 5,
        on_change=poke.set,
    )


def _change_webhook(
    client: KubeClient, settings: Settings, webhook: ChangeWebhookSource | None
) -> ChangeWebhook | None:
    if webhook is None:
        return None
    owner = (
        ClusterRoleOwner(client, settings.owner_cluster_role)
        if settings.owner_cluster_role
        else None
    )
    return ChangeWebhook(client, *webhook, name=settings.changes_webhook_name, owner=owner)
