"""Wire the operator together: API client, health/metrics server, manager."""

from __future__ import annotations

import contextlib
from pathlib import Path

import structlog

from kubescribe.controller.manager import Manager, Settings
from kubescribe.kube.client import KubeClient
from kubescribe.server.attribution import AttributionOptions, attribution
from kubescribe.server.health import health_app, serve

log = structlog.get_logger(__name__)


async def run_operator(
    kubeconfig: Path | None,
    context: str | None,
    cache_dir: Path,
    metrics_addr: str,
    *,
    allow_file_urls: bool = False,
    probe_interval: float = 300.0,
    cross_namespace_sources: bool = True,
    attribution_options: AttributionOptions | None = None,
) -> None:
    sites = contextlib.AsyncExitStack()  # audit receiver, admission webhook, fact store
    att = await sites.enter_async_context(attribution(attribution_options or AttributionOptions()))
    client = await KubeClient.connect(kubeconfig, context)
    settings = Settings(
        cache_dir=cache_dir,
        allow_file_urls=allow_file_urls,
        probe_interval=probe_interval,
        cross_namespace_sources=cross_namespace_sources,
    )
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
        await sites.aclose()
        log.info("operator.stopped")
