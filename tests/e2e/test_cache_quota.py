"""The cache quota with the real API server and operator: a tenant whose repository outgrows its
share of the object cache is refused on its GitTarget, and another tenant keeps mirroring."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.manifests import configmap
from tests.support import (
    Operator,
    commit_noise,
    condition_state,
    manifest,
    metric,
    setup_mirror,
    wait_condition,
    wait_for,
    wait_ready,
)

pytestmark = pytest.mark.controlplane


def cm_path(ns: str, name: str) -> str:
    return f"mirror/{ns}/core/configmaps/{name}.yaml"


def test_a_tenant_past_its_cache_quota_is_refused_and_another_keeps_mirroring(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    cp, big_ns = crds, namespace
    small_ns = f"quota-small-{uuid.uuid4().hex[:6]}"
    cp.kubectl("create", "namespace", small_ns)
    small = BareRemote.create(tmp_path / "small.git")
    commit_noise(remote, 1 << 20)
    big_tip = remote.tip()
    try:
        op = operator("--cache-quota-per-namespace=200Ki")
        cp.apply(manifest(configmap("a", big_ns, {"k": "v"}), configmap("b", small_ns, {"k": "v"})))
        setup_mirror(cp, big_ns, remote)
        setup_mirror(cp, small_ns, small)

        refused = wait_condition(
            cp, "gittarget", "mirror", big_ns, "Pushed", "False", "CacheQuotaExceeded"
        )
        assert "200Ki" in refused["message"]
        assert condition_state(cp, "gittarget", "mirror", big_ns, "Stalled")[0] == "True"
        assert remote.tip() == big_tip  # nothing written
        assert metric(op, "kubescribe_cache_quota_refusals_total", f'namespace="{big_ns}"') > 0

        wait_for(lambda: cm_path(small_ns, "b") in small.files(), what="the other tenant's file")
        wait_ready(cp, small_ns)
        cp.kubectl("create", "configmap", "later", "-n", small_ns, "--from-literal=a=1")
        wait_for(lambda: cm_path(small_ns, "later") in small.files(), what="a later change")
        assert 0 < metric(op, "kubescribe_cache_bytes", f'namespace="{small_ns}"') <= 200 << 10
    finally:
        cp.kubectl(
            "delete", "gitproviders,gittargets,watchrules", "--all", "-n", small_ns, check=False
        )
