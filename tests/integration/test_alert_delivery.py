"""Alert delivery against a real HTTP receiver on loopback: retries with backoff through a
receiver that fails, the failure and the recovery on the Alert's conditions, no retry of a 4xx,
the signing key from the Alert's own namespace only, and the flush at a stop."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kubescribe import metrics
from kubescribe.api import conditions as c
from kubescribe.controller.alerts import Alerts, _Message, _route
from kubescribe.controller.status import Cond
from kubescribe.git.records import Landed, WriteReport
from kubescribe.kube.client import ApiError
from kubescribe.mirror.changes import Change, Operation, TargetKey
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe_devenv.controlplane import free_port

KEY = b"k3y"


@dataclass
class Api:
    """The API calls delivery makes: GET of a Secret (only these exist)."""

    secrets: dict[str, dict[str, Any]]
    asked: list[str] = field(default_factory=list)

    async def get(self, path: str, **_: Any) -> Any:
        self.asked.append(path)
        if path not in self.secrets:
            raise ApiError(404, "NotFound", "secrets not found")
        return self.secrets[path]


@dataclass
class Statuses:
    written: list[list[Cond]] = field(default_factory=list)

    async def write(
        self,
        obj: Mapping[str, Any],
        plural: str,
        conds: Sequence[Cond],
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.written.append(list(conds))


@dataclass
class Receiver:
    answers: list[int]
    got: list[tuple[bytes, str]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.got.append((await request.read(), request.headers.get("X-Kubescribe-Signature", "")))
        return web.Response(status=self.answers.pop(0) if self.answers else 204)


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    found = Receiver([])
    app = web.Application()
    app.router.add_post("/hook", found.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield found, f"http://127.0.0.1:{port}/hook"
    finally:
        await runner.cleanup()


def alerts_for(url: str, secrets: dict[str, dict[str, Any]]) -> tuple[Alerts, Statuses, Api]:
    api, statuses = Api(secrets), Statuses()
    alerts = Alerts(api, statuses, backoff=0.01)  # type: ignore[arg-type]
    spec = {"webhook": {"url": url, "secretRef": {"name": "key"}}}
    obj = {"metadata": {"name": "a", "namespace": "team", "generation": 1}, "spec": spec}
    alerts._routes[("team", "a")] = _route(("team", "a"), obj)
    alerts._cache.objects[("team", "a")] = obj
    return alerts, statuses, api


SECRET = {
    "/api/v1/namespaces/team/secrets/key": {"data": {"hmacKey": base64.b64encode(KEY).decode()}}
}


def sent() -> float:
    return float(metrics.ALERT_MESSAGES.labels("sent")._value.get())


async def test_a_failing_receiver_is_retried_and_the_status_says_so_until_it_recovers(
    receiver: tuple[Receiver, str],
) -> None:
    found, url = receiver
    found.answers = [503, 503]
    alerts, statuses, _ = alerts_for(url, SECRET)
    before = sent()
    message = _Message(("team", "a"), url, "key", b'{"count":1}', 1, attempts=3)
    async with aiohttp.ClientSession() as session:
        delivering = asyncio.create_task(alerts._deliver_one(session, message))
        async with asyncio.timeout(10):
            await alerts._wake.wait()  # set by the first failed attempt
        await alerts._write_statuses()  # while it fails
        await delivering
    await alerts._write_statuses()
    assert len(found.got) == 3
    body, sig = found.got[-1]
    assert sig == "sha256=" + hmac.new(KEY, body, hashlib.sha256).hexdigest()
    failing = {x.type: x for x in statuses.written[0]}[c.DELIVERY_FAILING]
    assert (failing.status, failing.reason) == ("True", c.RECEIVER_REJECTED)
    assert "503" in failing.message
    recovered = {x.type: x for x in statuses.written[-1]}
    assert (recovered[c.READY].status, recovered[c.DELIVERY_FAILING].status) == ("True", "False")
    assert sent() == before + 1


async def test_a_client_error_is_not_retried(receiver: tuple[Receiver, str]) -> None:
    found, url = receiver
    found.answers = [403]
    alerts, statuses, _ = alerts_for(url, SECRET)
    async with aiohttp.ClientSession() as session:
        await alerts._deliver_one(session, _Message(("team", "a"), url, "key", b"{}", 1))
    await alerts._write_statuses()
    assert len(found.got) == 1
    ready = {x.type: x for x in statuses.written[-1]}[c.READY]
    assert (ready.status, ready.reason) == ("False", c.RECEIVER_REJECTED)


async def test_the_key_is_read_from_the_alerts_own_namespace_only(
    receiver: tuple[Receiver, str],
) -> None:
    found, url = receiver
    elsewhere = {
        "/api/v1/namespaces/other/secrets/key": SECRET["/api/v1/namespaces/team/secrets/key"]
    }
    alerts, statuses, api = alerts_for(url, elsewhere)
    async with aiohttp.ClientSession() as session:
        await alerts._deliver_one(session, _Message(("team", "a"), url, "../other/key", b"{}", 1))
    await alerts._write_statuses()
    assert found.got == []  # nothing is sent unsigned
    assert api.asked
    assert all(p.startswith("/api/v1/namespaces/team/secrets/") for p in api.asked)
    assert all("/other" not in p.removeprefix("/api/v1/namespaces/team/") for p in api.asked)
    ready = {x.type: x for x in statuses.written[-1]}[c.READY]
    assert (ready.status, ready.reason) == ("False", c.SECRET_NOT_FOUND)


async def test_a_stop_sends_the_open_window_at_once_and_tries_a_failing_receiver_once(
    receiver: tuple[Receiver, str],
) -> None:
    found, url = receiver
    alerts, _, _ = alerts_for(url, SECRET)
    obj = alerts._cache.objects[("team", "a")]
    obj["spec"] = {**obj["spec"], "groupWindowSeconds": 3600, "delivery": {"attempts": 8}}
    alerts._routes[("team", "a")] = _route(("team", "a"), obj)
    alerts.backoff = 30.0  # a retry would outlast the test's bound
    rtype = ResourceType("", "v1", "configmaps", "ConfigMap", True)
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "team"}}

    def report(sha: str) -> WriteReport:
        change = Change(
            TargetKey("team", "t"),
            Operation.CREATE,
            Identity("", "ConfigMap", "team", "x"),
            rtype,
            doc,
            0.0,
        )
        return WriteReport(target=TargetKey("team", "t"), landed=(Landed(sha, None, change),))

    found.answers = [503]
    delivering = asyncio.create_task(alerts._deliver())
    try:
        alerts.observe(report("a" * 40))
        assert alerts._routes[("team", "a")].burst is not None  # the window is open
        async with asyncio.timeout(10):
            await alerts.flush()
        assert len(found.got) == 1  # tried once, not retried 30 s later
        assert alerts._queue.qsize() == 0
        found.answers = []
        alerts.observe(report("b" * 40))  # landed by the last push of the stop
        async with asyncio.timeout(10):
            await alerts.flush()
        assert len(found.got) == 2
        assert b"b" * 40 in found.got[-1][0]
    finally:
        delivering.cancel()


async def test_a_receiver_that_is_down_holds_no_other_alerts_messages(
    receiver: tuple[Receiver, str],
) -> None:
    """Each Alert has its lane: team/a's receiver answering 503 (next try in 30 s) does not
    delay team/b's message (with one shared queue it waited out a's whole retry budget)."""
    found, url = receiver
    found.answers = [503] * 10
    alerts, _, _ = alerts_for(url, SECRET)
    alerts.backoff = 30.0
    other = Receiver([])
    app = web.Application()
    app.router.add_post("/other", other.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    obj = {
        "metadata": {"name": "b", "namespace": "team", "generation": 1},
        "spec": {"webhook": {"url": f"http://127.0.0.1:{port}/other"}},
    }
    alerts._routes[("team", "b")] = _route(("team", "b"), obj)
    delivering = asyncio.create_task(alerts._deliver())
    try:
        alerts._queue.put_nowait(_Message(("team", "a"), url, "key", b'{"to":"a"}', 1, attempts=8))
        async with asyncio.timeout(10):
            await alerts._wake.wait()  # a's first try failed; its next is 30 s away
        alerts._wake.clear()
        assert len(found.got) == 1
        alerts._queue.put_nowait(
            _Message(("team", "b"), f"http://127.0.0.1:{port}/other", None, b'{"to":"b"}', 1)
        )
        async with asyncio.timeout(10):
            await alerts._wake.wait()  # set by b's delivery
        assert other.got[0][0] == b'{"to":"b"}'
        assert len(found.got) == 1  # a still waits for its next try
    finally:
        delivering.cancel()
        await asyncio.gather(delivering, return_exceptions=True)
        await runner.cleanup()
