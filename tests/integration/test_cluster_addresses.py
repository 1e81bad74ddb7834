"""A ClusterProvider's kubeconfig server is held to the address policy of Git URLs at every
connection, and nothing the server sends reaches status: real aiohttp connections, a real
HTTP server for the answers; only name resolution is scripted (to re-point a name)."""

from __future__ import annotations

import base64
import json
import socket
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver, ResolveResult

from kubescribe.api import conditions as c
from kubescribe.api.models import ClusterProviderSpec
from kubescribe.controller.clusters import ClusterProviders, _Cluster
from kubescribe.controller.plan import ClusterPlan
from kubescribe.kube import client as kube_client
from kubescribe.kube.client import KubeClient

LEAK = "instance-credential-5f3a9"


class SecretReader:
    """The operator's own API server, as far as reading the kubeconfig Secret goes."""

    def __init__(self, server: str) -> None:
        config = {
            "clusters": [{"name": "c", "cluster": {"server": server}}],
            "users": [{"name": "u", "user": {"token": "t"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
        encoded = base64.b64encode(json.dumps(config).encode()).decode()
        self.secret = {"metadata": {"resourceVersion": "1"}, "data": {"kubeconfig": encoded}}

    async def get(self, path: str, **_: Any) -> dict[str, Any]:
        return self.secret


class Rebound(AbstractResolver):
    """A name that resolves to the metadata address (DNS re-pointed by its owner)."""

    def __init__(self, *_: Any, **__: Any) -> None:
        pass

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        address = "169.254.169.254"
        return [
            ResolveResult(
                hostname=host, host=address, port=port, family=socket.AF_INET, proto=0, flags=0
            )
        ]

    async def close(self) -> None:
        pass


async def refresh(server: str) -> _Cluster:
    providers = ClusterProviders(cast(KubeClient, SecretReader(server)), allow_insecure=True)
    spec = ClusterProviderSpec.model_validate(
        {"kubeconfigSecretRef": {"namespace": "ns", "name": "k"}, "allowedNamespaces": ["*"]}
    )
    state = _Cluster(spec.model_dump_json())
    try:
        await providers._refresh("remote", ClusterPlan("remote", 1, spec), state)
    finally:
        if state.client is not None:
            await state.client.close()
    return state


async def test_a_name_that_resolves_to_the_metadata_address_is_refused_at_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kube_client, "DefaultResolver", Rebound)
    state = await refresh("https://api.rebound.example:6443")
    assert (state.reachable.status, state.reachable.reason) == ("False", c.CLUSTER_ADDRESS_REFUSED)
    assert "169.254.169.254" in state.reachable.message
    assert state.discovered is None


@pytest.fixture
async def server() -> AsyncIterator[str]:
    """An HTTP server that answers /version with an error page holding a secret, and
    /moved with a redirect to a page that would pass for an API server."""

    async def version(_: web.Request) -> web.Response:
        return web.Response(status=500, text=f"<html>{LEAK}</html>")

    async def moved(_: web.Request) -> web.Response:
        raise web.HTTPFound("/leak")

    async def leak(_: web.Request) -> web.Response:
        return web.json_response({"gitVersion": LEAK})

    app = web.Application()
    app.router.add_get("/version", version)
    app.router.add_get("/moved/version", moved)
    app.router.add_get("/leak", leak)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


@pytest.mark.parametrize(("path", "status"), [("", 500), ("/moved", 302)])
async def test_what_the_server_sends_stays_out_of_status_and_redirects_are_not_followed(
    server: str, path: str, status: int
) -> None:
    state = await refresh(server + path)
    assert (state.reachable.status, state.reachable.reason) == ("False", c.CLUSTER_UNREACHABLE)
    assert f"HTTP {status}" in state.reachable.message
    assert LEAK not in state.reachable.message
    assert LEAK not in state.version
