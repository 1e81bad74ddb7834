"""The composition root builds what the settings configure, and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from kubescribe import wiring
from kubescribe.controller.manager import Settings
from kubescribe.kube.client import KubeClient
from kubescribe.server.attribution import AttributionOptions
from kubescribe.store.cursors import NoCursorStore
from kubescribe.store.redis_cursors import RedisCursorStore
from kubescribe.store.redis_options import RedisOptions

CLIENT = cast(KubeClient, object())  # built with, never called
URL = "https://kubescribe.example/validate-changes"


def test_a_default_manager_has_only_the_parts_every_operator_runs(tmp_path: Path) -> None:
    parts = wiring.manager(CLIENT, Settings(cache_dir=tmp_path)).parts
    assert parts.shards is None
    assert parts.webhook is None
    assert parts.tenant_reads is None
    assert parts.resolver is None
    assert isinstance(parts.cursors.store, NoCursorStore)
    assert parts.status.events is parts.events
    assert parts.requests.status is parts.status


def test_configured_parts_are_built_from_the_settings(tmp_path: Path) -> None:
    settings = Settings(
        cache_dir=tmp_path,
        replica_id="r1",
        lease_namespace="ops",
        lease_duration=20.0,
        tenant_service_account="reader",
        changes_webhook_name="hooks",
        owner_cluster_role="kubescribe",
    )
    parts = wiring.manager(CLIENT, settings, webhook=(URL, lambda: b"ca")).parts
    assert parts.shards is not None
    assert parts.shards.identity == "r1"
    assert parts.tenant_reads is not None
    assert parts.webhook is not None
    assert (parts.webhook.url, parts.webhook.name) == (URL, "hooks")
    assert parts.webhook.owner is not None


def test_the_change_webhook_bundle_comes_from_the_managed_certificates_or_the_file(
    tmp_path: Path,
) -> None:
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"file")
    opts = AttributionOptions(changes_webhook_url=URL, changes_webhook_ca=ca)
    managed = wiring.changes_webhook(opts, lambda: b"managed")
    assert managed is not None
    assert managed[1]() == b"managed"
    from_file = wiring.changes_webhook(opts)
    assert from_file is not None
    ca.write_bytes(b"changed")  # read once, when the operator starts
    assert from_file[0] == URL
    assert from_file[1]() == b"file"
    assert wiring.changes_webhook(AttributionOptions()) is None


@pytest.mark.parametrize(
    ("redis", "store"),
    [(None, NoCursorStore), (RedisOptions("redis://127.0.0.1:1", b"k" * 32), RedisCursorStore)],
)
async def test_cursors_are_kept_in_redis_when_it_is_configured(
    redis: RedisOptions | None, store: type[object]
) -> None:
    cursors = wiring.cursor_store(AttributionOptions(redis=redis))
    assert isinstance(cursors, store)
    await cursors.close()
