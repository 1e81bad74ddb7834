"""Wire the operator together: API client, health/metrics server, manager."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

import structlog

from kubescribe.controller.manager import Manager, Settings
from kubescribe.kube.client import KubeClient
from kubescribe.server.attribution import AttributionOptions, attribution
from kubescribe.server.health import health_app, serve

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Sharing:
    """How replicas share the writers ('' replica id: one replica writes everything)."""

    replica_id: str = ""
    lease_namespace: str = "default"
    lease_duration: float = 10.0


async def run_operator(
    kubeconfig: Path | None,
    context: str | None,
    cache_dir: Path,
    metrics_addr: str,
    *,
    allow_file_urls: bool = False,
    probe_interval: float = 300.0,
    cross_namespace_sources: bool = True,
    allow_insecure_cluster_tls: bool = False,
    sharing: Sharing | None = None,
    attribution_options: AttributionOptions | None = None,
) -> None:
    sites = contextlib.AsyncExitStack()  # audit receiver, admission webhook, fact store
    att = await sites.enter_async_context(attribution(attribution_options or AttributionOptions()))
    client = await KubeClient.connect(kubeconfig, context)
    sharing = sharing or Sharing()
    settings = Settings(
        cache_dir=cache_dir,
        allow_file_urls=allow_file_urls,
        probe_interval=probe_interval,
        cross_namespace_sources=cross_namespace_sources,
        allow_insecure_cluster_tls=allow_insecure_cluster_tls,
        replica_id=sharing.replica_id,
        lease_namespace=sharing.lease_namespace,
        lease_duration=sharing.lease_duration,
    )
    redis_url = (attribution_options or AttributionOptions()).redis_url
    if redis_url:
        # Imported only when configured, like the fact store: redis-py costs about 20 MB.
        from kubescribe.store.redis_cursors import RedisCursorStore  # noqa: PLC0415

        settings.cursors = RedisCursorStore(redis_url)
    settings.resolver, settings.request_authors = att.resolver, att.requests
    manager = Manager(client, settings)
    runner = None
    if metrics_addr:
        host, _, port = metrics_addr.rpartition(":")
        runner = await serve(health_app(lambda: manager.synced), host or "0.0.0.0", int(port))
    log.info("operator.started", server=client.host)
    try:
        await manager.run()
    finally:
        if runner is not None:
            await runner.cleanup()
        await client.close()
        await settings.cursors.close()
        await sites.aclose()
        log.info("operator.stopped")
