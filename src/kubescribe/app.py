"""Run the operator: connect, start what `kubescribe.wiring` builds (attribution, the manager,
the health and metrics server), and close it all in order when the manager stops."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from kubescribe import wiring
from kubescribe.controller.manager import Settings
from kubescribe.git.pool import close_shared_pool
from kubescribe.kube.client import KubeClient
from kubescribe.server.attribution import AttributionOptions
from kubescribe.server.audit import DEFAULT_CLIENT_PREFIX
from kubescribe.server.health import health_app, serve
from kubescribe.server.tls import ANY_CLIENT
from kubescribe.stopping import Stopper
from kubescribe.waits import within

if TYPE_CHECKING:
    # Managed certificates (cryptography) are imported only when configured.
    from kubescribe.controller.webhookcerts import CertificateOptions

log = structlog.get_logger(__name__)

_CLOSE_TIMEOUT = 1.0  # seconds for each server and client to close after the manager stopped


def stop_budget(timeout: float) -> tuple[float, float]:
    """How a stop of `timeout` seconds is shared: the manager's shutdown, then each of the two
    rounds of closes after it. Together they fit in `timeout`, so the stop watchdog (which acts
    a margin past it) is never what ends a stop that kept its bounds."""
    close = min(_CLOSE_TIMEOUT, timeout / 8)
    return timeout - 2 * close, close


@dataclass(frozen=True)
class Sharing:
    """How replicas share the writers ('' replica id: one replica writes everything)."""

    replica_id: str = ""
    lease_namespace: str = "default"
    lease_duration: float = 10.0


# The file flags that --webhook-cert-secret fills in itself.
MANAGED_FILES = (
    "audit_tls_cert",
    "audit_tls_key",
    "audit_client_ca",
    "webhook_tls_cert",
    "webhook_tls_key",
    "webhook_client_ca",
    "changes_webhook_ca",
)


def managed_certificates(
    attribution: AttributionOptions, certificates: CertificateOptions
) -> tuple[AttributionOptions, CertificateOptions]:
    """Point the HTTPS sites at the files the certificate upkeep writes (the trusted CAs
    verify clients too), and name the client certificates kube-apiserver gets."""
    from kubescribe.controller.certrotation import ADMISSION_CLIENT, AUDIT_CLIENT  # noqa: PLC0415
    from kubescribe.controller.webhookcerts import SERVING_FILES  # noqa: PLC0415

    directory = certificates.directory
    cert, key, cas = (directory / name for name in SERVING_FILES)
    clients = {}
    if attribution.audit_addr:
        names = sorted(attribution.route.clients.names - {ANY_CLIENT})
        clients[AUDIT_CLIENT] = (
            names[0] if names else DEFAULT_CLIENT_PREFIX + attribution.route.name
        )
    named = sorted({c.strip() for c in attribution.webhook_client_cns} - {ANY_CLIENT, ""})
    if attribution.webhook_addr and named:
        clients[ADMISSION_CLIENT] = named[0]
    served = replace(
        attribution,
        audit_tls_cert=cert,
        audit_tls_key=key,
        audit_client_ca=cas,
        webhook_tls_cert=cert,
        webhook_tls_key=key,
        webhook_client_ca=cas,
        changes_webhook_ca=cas,
    )
    return served, replace(certificates, clients=clients)


async def run_operator(
    kubeconfig: Path | None,
    context: str | None,
    cache_dir: Path,
    metrics_addr: str,
    *,
    allow_file_urls: bool = False,
    probe_interval: float = 300.0,
    discovery_grace: float = 60.0,
    cross_namespace_sources: bool = True,
    tenant_service_account: str = "",
    allow_insecure_cluster_tls: bool = False,
    kustomize: str | None = None,
    cache_quota: int = 0,
    sharing: Sharing | None = None,
    owner_cluster_role: str = "",
    attribution_options: AttributionOptions | None = None,
    certificates: CertificateOptions | None = None,
    stopper: Stopper | None = None,
) -> None:
    client = await KubeClient.connect(kubeconfig, context)
    # API client, audit receiver, admission webhook, fact store: closed in reverse order
    sites = contextlib.AsyncExitStack()
    sites.push_async_callback(client.close)
    certs = None
    try:
        if certificates is not None:
            from kubescribe.controller.webhookcerts import WebhookCertificates  # noqa: PLC0415

            # The HTTPS sites start from the files it writes: wait for a certificate to serve.
            certs = WebhookCertificates(client, certificates)
            await certs.start()
        options = attribution_options or AttributionOptions()
        att = await sites.enter_async_context(wiring.attribution(options))
    except BaseException:
        await sites.aclose()
        raise
    sharing = sharing or Sharing()
    shutdown_timeout, close_timeout = (
        stop_budget(stopper.timeout)
        if stopper is not None
        else (Settings.shutdown_timeout, _CLOSE_TIMEOUT)
    )
    settings = Settings(
        cache_dir=cache_dir,
        allow_file_urls=allow_file_urls,
        probe_interval=probe_interval,
        discovery_grace=discovery_grace,
        cross_namespace_sources=cross_namespace_sources,
        tenant_service_account=tenant_service_account,
        allow_insecure_cluster_tls=allow_insecure_cluster_tls,
        kustomize=kustomize,
        cache_quota=cache_quota,
        replica_id=sharing.replica_id,
        lease_namespace=sharing.lease_namespace,
        lease_duration=sharing.lease_duration,
        owner_cluster_role=owner_cluster_role,
        changes_webhook_name=options.changes_webhook_name,
        attribution_sources=att.sources,
        shutdown_timeout=shutdown_timeout,
    )
    cursors = wiring.cursor_store(options)
    alerts = wiring.alerts(client, settings)
    manager = wiring.manager(
        client,
        settings,
        resolver=att.resolver,
        request_authors=att.requests,
        cursors=cursors,
        webhook=wiring.changes_webhook(options, certs.bundle if certs is not None else None),
        routes=att.routes,
        alerts=alerts,
    )
    if stopper is not None:
        stopper.release_leases_with(manager.release_leases)
    runner = None
    if metrics_addr:
        host, _, port = metrics_addr.rpartition(":")
        runner = await serve(health_app(lambda: manager.synced), host or "0.0.0.0", int(port))
    log.info("operator.started", server=client.host)
    upkeep = asyncio.create_task(certs.run()) if certs is not None else None
    alerting = asyncio.create_task(alerts.run())
    try:
        await manager.run()
    finally:
        # Bounded like the manager's shutdown: a server that does not answer costs a log line.
        # The alerts of what the last writes pushed are sent beside, before the client closes.
        closing = [within(alerts.flush(), close_timeout), within(cursors.close(), close_timeout)]
        if runner is not None:
            closing.append(within(runner.cleanup(), close_timeout))
        await asyncio.gather(*closing)
        alerting.cancel()
        if upkeep is not None:
            upkeep.cancel()
        await within(sites.aclose(), close_timeout)
        close_shared_pool()
        log.info("operator.stopped")
