"""Alerts end to end (#34): the operator process with audit attribution against a real
kube-apiserver, a real Git remote, and a real HTTP receiver on loopback (an aiohttp server)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import threading
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from kubescribe_devenv.controlplane import free_port
from kubescribe_devenv.gitremote import BareRemote, git
from tests.e2e.conftest import MASTERS, Audited
from tests.e2e.test_attribution import ATTRIBUTED, audit_flowing
from tests.manifests import API, provider, target, watch_rule
from tests.support import Operator, condition, manifest, metric, wait_for, wait_ready

pytestmark = pytest.mark.controlplane

DEPLOYMENTS = {"apiGroups": ["apps"], "resources": ["deployments"]}
KEY = b"tenant-a-shared-hmac-key"
SENT = ("kubescribe_alert_messages_total", 'result="sent"')


@dataclass
class Received:
    path: str
    signature: str
    body: bytes

    @property
    def json(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed


@dataclass
class Receiver:
    """An HTTP server on 127.0.0.1 that records every POST."""

    port: int = 0
    received: list[Received] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def at(self, path: str) -> list[Received]:
        with self._lock:
            return [r for r in self.received if r.path == path]

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        with self._lock:
            self.received.append(
                Received(request.path, request.headers.get("X-Kubescribe-Signature", ""), body)
            )
        return web.Response(status=204)


@contextlib.contextmanager
def receiver_on(
    handle: Callable[[web.Request], Awaitable[web.StreamResponse]], port: int = 0
) -> Iterator[int]:
    """An aiohttp server on 127.0.0.1 (in a thread of its own) calling `handle` for every
    POST; yields its port."""
    port = port or free_port()
    loop = asyncio.new_event_loop()
    app = web.Application()
    app.router.add_post("/{tail:.*}", handle)
    runner = web.AppRunner(app)

    async def start() -> None:
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)
    try:
        yield port
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver(free_port())
    with receiver_on(found.handle, found.port):
        yield found


def alert(name: str, namespace: str, url: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "Alert",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"webhook": {"url": url}, "groupWindowSeconds": 1, **spec},
    }


def hmac_secret(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"hmacKey": base64.b64encode(KEY).decode()},
    }


def deployment(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": "nginx:1.27"}]},
            },
        },
    }


def mirrored(audited: Audited, ns: str, url: str, branch: str) -> None:
    audited.cp.apply(
        manifest(
            provider("git", ns, url, attribution=ATTRIBUTED),
            target("mirror", ns, "git", "mirror", branch=branch),
            watch_rule("rule", ns, "mirror", DEPLOYMENTS),
        )
    )
    wait_ready(audited.cp, ns)


def alert_ready(audited: Audited, name: str, namespace: str) -> None:
    wait_for(
        lambda: (
            (condition(audited.cp, "alert", name, namespace, "Ready") or {}).get("status") == "True"
        ),
        timeout=30,
        what=f"Alert {namespace}/{name} Ready",
    )


def create_as(audited: Audited, who: str, obj: dict[str, Any]) -> None:
    audited.cp.kubectl("create", "-f", "-", "--as", who, *MASTERS, input=json.dumps(obj))


def last_commit_of(remote: BareRemote, branch: str, path: str) -> str:
    return git("log", "-1", "--format=%H", branch, "--", path, cwd=remote.path).strip()


def test_alice_scaling_is_told_once_signed_and_never_to_another_tenant(
    audited: Audited,
    ns: str,
    remote: BareRemote,
    receiver: Receiver,
    start_operator: Callable[..., Operator],
) -> None:
    audited.cp.wait_established("alerts.kubescribe.io")
    op = start_operator(*audited.flags())
    other = f"alert-b-{uuid.uuid4().hex[:6]}"
    audited.cp.kubectl("create", "namespace", other)
    git("branch", "tenant-b", "main", cwd=remote.path)
    mirrored(audited, ns, remote.url, "main")
    mirrored(audited, other, remote.url, "tenant-b")
    audit_flowing(audited, op, ns)
    base = f"http://127.0.0.1:{receiver.port}"
    audited.cp.apply(
        manifest(
            hmac_secret("alert-key", ns),
            alert(
                "outside-gitops",
                ns,
                f"{base}/a",
                selector={"kinds": ["Deployment"], "excludeAuthors": {"users": ["bob"]}},
                webhook={"url": f"{base}/a", "secretRef": {"name": "alert-key"}},
            ),
            alert("tenant-b", other, f"{base}/b"),
        )
    )
    alert_ready(audited, "outside-gitops", ns)
    alert_ready(audited, "tenant-b", other)

    # bob (excluded) creates the Deployment; alice scales it by hand.
    create_as(audited, "bob", deployment("web", ns))
    web = f"mirror/{ns}/apps/deployments/web.yaml"
    wait_for(lambda: web in remote.files(), timeout=60, what="bob's deployment in Git")
    audited.kubectl_as("alice", "scale", "deployment", "web", "-n", ns, "--replicas=3")
    wait_for(lambda: "replicas: 3" in remote.read(web), timeout=60, what="alice's scale in Git")
    # Tenant B's own change, so that its Alert is shown to work.
    create_as(audited, "alice", deployment("api", other))

    wait_for(lambda: receiver.at("/a"), timeout=30, what="a message for tenant A")
    wait_for(lambda: receiver.at("/b"), timeout=30, what="a message for tenant B")
    wait_for(lambda: metric(op, *SENT) >= 2, timeout=30, what="both deliveries counted")

    (message,) = receiver.at("/a")
    expected = "sha256=" + hmac.new(KEY, message.body, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(message.signature, expected)
    body = message.json
    assert body["alert"] == f"{ns}/outside-gitops"
    (change,) = body["changes"]
    assert change["who"]["username"] == "alice"
    assert change["what"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "namespace": ns,
        "name": "web",
        "operation": "UPDATE",
        "fieldPaths": ["spec.replicas"],
    }
    assert change["commit"] == last_commit_of(remote, "main", web)
    assert body["commits"] == [change["commit"]]

    tenant_b = [json.loads(r.body) for r in receiver.at("/b")]
    assert all(r.signature == "" for r in receiver.at("/b"))  # B names no key
    told = [c["what"] for m in tenant_b for c in m["changes"]]
    assert told
    assert {(w["namespace"], w["name"]) for w in told} == {(other, "api")}


def test_a_metadata_address_receiver_is_refused_with_a_reason(
    audited: Audited, ns: str, start_operator: Callable[..., Operator]
) -> None:
    audited.cp.wait_established("alerts.kubescribe.io")
    op = start_operator(*audited.flags())
    audited.cp.apply(manifest(alert("probe", ns, "http://169.254.169.254/latest/meta-data/")))
    ready = wait_for(
        lambda: condition(audited.cp, "alert", "probe", ns, "Ready"),
        timeout=30,
        what="the Alert's Ready condition",
    )
    assert ready["status"] == "False"
    assert ready["reason"] == "UrlRefused"
    assert "AddressNotAllowed" in ready["message"]
    assert "metadata" in ready["message"]
    assert metric(op, *SENT) == 0
