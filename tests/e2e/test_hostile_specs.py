"""Hostile specs against the real kube-apiserver: no tenant stops the operator for the others
with one spec, and a ClusterProvider cannot point the operator at a metadata address."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubescribe import metrics, wiring
from kubescribe.controller import desired
from kubescribe.controller import manager as manager_module
from kubescribe.controller.manager import Settings
from kubescribe.controller.plan import Plan
from kubescribe.kube.client import KubeClient
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.manifests import cm_path, configmap, provider, secret
from tests.support import Operator, manifest, setup_mirror, wait_condition, wait_for

pytestmark = pytest.mark.controlplane

API = "kubescribe.io/v1alpha1"


def test_a_gitprovider_with_an_ipv6_scp_url_does_not_stop_other_tenants(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    hostile = f"hostile-{uuid.uuid4().hex[:6]}"
    cp.kubectl("create", "namespace", hostile)
    operator()
    setup_mirror(cp, ns, remote)
    cp.apply(manifest(configmap("before", ns, {"k": "v"})))
    wait_for(lambda: cm_path(ns, "before") in remote.files(), timeout=60, what="mirrored")

    # Accepted by the CRD; it used to raise out of the plan and stop the reconcile loop.
    cp.apply(manifest(provider("git", hostile, "git@[2001:db8::1]:org/repo.git")))
    wait_condition(cp, "gitprovider", "git", hostile, "Validated", "True")
    cp.apply(manifest(configmap("after", ns, {"k": "v"})))
    wait_for(lambda: cm_path(ns, "after") in remote.files(), timeout=60, what="still mirroring")
    cp.kubectl("delete", "gitproviders", "--all", "-n", hostile, check=False)


def test_a_kubeconfig_server_on_the_metadata_address_is_refused(
    crds: ControlPlane, namespace: str, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    config = yaml.safe_load(cp.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = "https://169.254.169.254:6443"
    name = f"metadata-{uuid.uuid4().hex[:6]}"
    cp.apply(
        manifest(
            secret("remote", ns, {"kubeconfig": json.dumps(config)}),
            {
                "apiVersion": API,
                "kind": "ClusterProvider",
                "metadata": {"name": name},
                "spec": {
                    "kubeconfigSecretRef": {"namespace": ns, "name": "remote"},
                    "allowedNamespaces": [ns],
                },
            },
        )
    )
    try:
        operator()
        refused = wait_condition(
            cp,
            "clusterprovider",
            name,
            "",
            "SourceClusterReachable",
            "False",
            "ClusterAddressRefused",
        )
        assert "metadata" in refused["message"]
        wait_condition(cp, "clusterprovider", name, "", "Stalled", "True")
    finally:
        cp.kubectl("delete", "clusterprovider", name, check=False)


async def test_the_reconcile_loop_survives_an_unexpected_error(
    crds: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug anywhere in a reconcile pass is logged and counted; the loop goes on."""
    calls: list[int] = []
    real = desired.compile_plan

    def compile_plan(*args: Any, **kwargs: Any) -> Plan:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug")
        return real(*args, **kwargs)

    monkeypatch.setattr(manager_module, "compile_plan", compile_plan)
    crashed = _crashed()
    client = await KubeClient.connect(crds.kubeconfig)
    manager = wiring.manager(client, Settings(cache_dir=tmp_path / "cache"))
    task = asyncio.create_task(manager.run())
    try:
        deadline = asyncio.get_running_loop().time() + 60
        while len(calls) < 2 and not task.done():
            assert asyncio.get_running_loop().time() < deadline, "no second reconcile pass"
            await asyncio.sleep(0.05)
        assert not task.done()
        assert _crashed() == crashed + 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await client.close()


def _crashed() -> float:
    value = metrics.REGISTRY.get_sample_value(
        "kubescribe_reconcile_errors_total", {"cause": "crashed"}
    )
    return value or 0.0
