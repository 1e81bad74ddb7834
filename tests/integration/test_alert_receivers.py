"""Slack and Alertmanager delivery against real HTTP servers on loopback (an aiohttp server, and
the real Alertmanager built from its Go module): the Slack URL and the bearer token from a
Secret of the Alert's own namespace only, the URL policy before every attempt, the Slack URL
never repeated in a status, and Alertmanager holding the alerts as they were sent."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kubescribe.api import conditions as c
from kubescribe.controller.alerts import Alerts, _outgoing, _route
from kubescribe.controller.status import Cond
from kubescribe.kube.client import ApiError
from kubescribe.mirror.alerts import event_of, message_body
from kubescribe.mirror.authors import Author
from kubescribe.mirror.changes import Change, Operation, TargetKey
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.receivers import timestamp
from kubescribe_devenv.alertmanager import Alertmanager
from kubescribe_devenv.controlplane import free_port

DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True)
TOKEN = "s3cr3t-T0KEN"
SHA = "ab" * 20


@dataclass
class Api:
    """The API calls delivery makes: GET of a Secret (only these exist)."""

    secrets: dict[str, dict[str, str]]
    asked: list[str] = field(default_factory=list)

    async def get(self, path: str, **_: Any) -> Any:
        self.asked.append(path)
        namespace_and_name = path.removeprefix("/api/v1/namespaces/").split("/secrets/")
        key = "/".join(namespace_and_name)
        if key not in self.secrets:
            raise ApiError(404, "NotFound", "secrets not found")
        data = {k: base64.b64encode(v.encode()).decode() for k, v in self.secrets[key].items()}
        return {"data": data}


@dataclass
class Statuses:
    written: list[dict[str, Cond]] = field(default_factory=list)

    async def write(
        self,
        obj: Mapping[str, Any],
        plural: str,
        conds: Sequence[Cond],
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        self.written.append({x.type: x for x in conds})


@dataclass
class Receiver:
    url: str = ""
    got: list[tuple[str, bytes, Mapping[str, str]]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.got.append((request.path, await request.read(), dict(request.headers)))
        return web.Response(status=200, text="ok")


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", found.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    found.url = f"http://127.0.0.1:{port}"
    try:
        yield found
    finally:
        await runner.cleanup()


def change(name: str = "web", username: str = "alice") -> tuple[Change, Author]:
    identity = Identity("apps", "Deployment", "web", name)
    doc = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}}
    found = Change(TargetKey("team", "prod"), Operation.UPDATE, identity, DEPLOYMENTS, doc, 0.0)
    return found, Author(username.title() or "?", f"{username}@example.org", "audit", username)


async def deliver(
    spec: dict[str, Any],
    secrets: dict[str, dict[str, str]],
    changes: Sequence[tuple[Change, Author]] = (),
    *,
    name: str = "a",
    resolve: Any = None,
) -> tuple[Statuses, Api]:
    """Deliver one message of `changes` for an Alert `team/<name>` with `spec`."""
    api, statuses = Api(secrets), Statuses()
    alerts = Alerts(api, statuses, backoff=0.01)  # type: ignore[arg-type]
    if resolve is not None:
        alerts.resolve = resolve
    key = ("team", name)
    spec = {"delivery": {"attempts": 2}, **spec}
    obj = {"metadata": {"name": name, "namespace": "team", "generation": 1}, "spec": spec}
    route = alerts._routes[key] = _route(key, obj)
    alerts._cache.objects[key] = obj
    assert route.spec is not None, route.refusal
    now = time.time()
    events = [
        event_of(ch, SHA, author, ("spec.replicas",), now - 1)
        for ch, author in (changes or [change()])
    ]
    message = _outgoing(key, route.spec, message_body(f"team/{name}", events, now), 1)
    async with aiohttp.ClientSession() as session:
        await alerts._deliver_one(session, message)
    await alerts._write_statuses()
    return statuses, api


def slack_spec(secret: str = "slack") -> dict[str, Any]:
    return {"slack": {"urlSecretRef": {"name": secret, "key": "url"}}}


async def test_slack_gets_its_body_at_the_url_of_the_alerts_own_secret(
    receiver: Receiver,
) -> None:
    url = f"{receiver.url}/services/T0/B0/{TOKEN}"
    secrets = {"team/slack": {"url": url + "\n"}}  # as `--from-file` often leaves it
    statuses, _ = await deliver(slack_spec(), secrets)
    ((path, body, headers),) = receiver.got
    assert path == f"/services/T0/B0/{TOKEN}"
    assert headers["Content-Type"] == "application/json"
    slack = json.loads(body)
    assert "alice" in slack["text"]
    assert "spec.replicas" in slack["text"]
    assert SHA in slack["text"]
    ready = statuses.written[-1][c.READY]
    assert (ready.status, ready.reason) == ("True", c.READY)


@pytest.mark.parametrize(
    ("url", "resolved"),
    [
        (f"http://169.254.169.254/services/T0/B0/{TOKEN}", None),
        (f"http://hooks.example.org/services/T0/B0/{TOKEN}", ["169.254.169.254"]),
    ],
)
async def test_a_slack_url_at_a_metadata_address_is_refused_without_showing_it(
    url: str, resolved: list[str] | None
) -> None:
    resolve = (lambda host: resolved) if resolved is not None else None
    statuses, _ = await deliver(slack_spec(), {"team/slack": {"url": url}}, resolve=resolve)
    failing = statuses.written[-1][c.DELIVERY_FAILING]
    assert (failing.status, failing.reason) == ("True", c.URL_REFUSED)
    assert "AddressNotAllowed" in failing.message
    assert "metadata" in failing.message
    assert TOKEN not in failing.message
    assert "/services/" not in failing.message


async def test_an_unreachable_slack_url_is_not_repeated_in_the_status() -> None:
    url = f"http://127.0.0.1:{free_port()}/services/T0/B0/{TOKEN}"  # nothing listens
    statuses, _ = await deliver(slack_spec(), {"team/slack": {"url": url}})
    failing = statuses.written[-1][c.DELIVERY_FAILING]
    assert (failing.status, failing.reason) == ("True", c.RECEIVER_UNREACHABLE)
    assert TOKEN not in failing.message


@pytest.mark.parametrize("secret", ["slack", "../other/slack", "..%2Fother%2Fslack"])
async def test_the_slack_secret_is_read_from_the_alerts_own_namespace_only(
    receiver: Receiver, secret: str
) -> None:
    elsewhere = {"other/slack": {"url": f"{receiver.url}/stolen"}}
    statuses, api = await deliver(slack_spec(secret), elsewhere)
    assert receiver.got == []
    assert api.asked
    for path in api.asked:
        assert path.startswith("/api/v1/namespaces/team/secrets/")
        assert "/" not in path.removeprefix("/api/v1/namespaces/team/secrets/")
    failing = statuses.written[-1][c.DELIVERY_FAILING]
    assert (failing.status, failing.reason) == ("True", c.SECRET_NOT_FOUND)


@pytest.mark.parametrize(
    ("value", "reason"),
    [(None, c.SECRET_INVALID), ("https://a/\nX-Evil: 1", c.SECRET_INVALID)],
)
async def test_a_slack_secret_without_a_usable_url_says_so(
    receiver: Receiver, value: str | None, reason: str
) -> None:
    data = {"other-key": "x"} if value is None else {"url": value}
    statuses, _ = await deliver(slack_spec(), {"team/slack": data})
    assert receiver.got == []
    failing = statuses.written[-1][c.DELIVERY_FAILING]
    assert (failing.status, failing.reason) == ("True", reason)


async def test_alertmanager_gets_the_alerts_and_a_bearer_token_of_the_alerts_own_secret(
    receiver: Receiver,
) -> None:
    spec = {
        "alertmanager": {
            "url": f"{receiver.url}/monitoring/",
            "bearerTokenSecretRef": {"name": "am", "key": "token"},
        }
    }
    await deliver(spec, {"team/am": {"token": TOKEN}, "other/am": {"token": "theirs"}})
    ((path, body, headers),) = receiver.got
    assert path == "/monitoring/api/v2/alerts"
    assert headers["Authorization"] == f"Bearer {TOKEN}"
    (alert,) = json.loads(body)
    assert alert["labels"]["author"] == "alice"


async def test_the_real_alertmanager_holds_the_alerts_as_they_were_sent(
    alertmanager: Alertmanager,
) -> None:
    name = f"a-{uuid.uuid4().hex[:8]}"
    hostile = 'mallory <!channel> & \u00e9\u6f22 "quoted"\\'
    changes = [change("web"), change("web"), change("api", hostile)]
    spec = {"alertmanager": {"url": alertmanager.url, "resolveAfterSeconds": 600}}
    before = time.time()
    statuses, _ = await deliver(spec, {}, changes, name=name)
    assert statuses.written[-1][c.READY].status == "True"
    held = [a for a in alertmanager.alerts() if a["labels"].get("alert") == f"team/{name}"]
    by_author = {a["labels"]["author"]: a for a in held}
    assert sorted(by_author) == sorted(["alice", hostile])  # alice's two are one alert
    alice = by_author["alice"]
    assert alice["labels"] == {
        "alertname": "KubescribeChange",
        "alert": f"team/{name}",
        "kind": "Deployment",
        "namespace": "web",
        "name": "web",
        "operation": "UPDATE",
        "author": "alice",
    }
    assert alice["annotations"]["fieldPaths"] == "spec.replicas"
    assert alice["annotations"]["commit"] == SHA
    assert alice["annotations"]["changes"] == "2"
    assert alice["status"]["state"] == "active"
    assert timestamp(before - 1) <= alice["startsAt"] <= timestamp(time.time())
    assert timestamp(before + 600) <= alice["endsAt"] <= timestamp(time.time() + 600)


async def test_a_message_given_up_does_not_hold_the_queue_for_one_more_backoff() -> None:
    """The last attempt's failure ends the message at once: one delivery task serves every
    Alert, so a backoff after it delayed every other Alert's messages for nothing (up to 60 s)."""
    api, statuses = Api({}), Statuses()
    alerts = Alerts(api, statuses, backoff=3600.0)  # type: ignore[arg-type]
    key = ("team", "a")
    spec = {**slack_spec(), "delivery": {"attempts": 1}}
    obj = {"metadata": {"name": "a", "namespace": "team", "generation": 1}, "spec": spec}
    route = alerts._routes[key] = _route(key, obj)
    assert route.spec is not None
    message = _outgoing(key, route.spec, message_body("team/a", [], time.time()), 1)
    async with aiohttp.ClientSession() as session, asyncio.timeout(30):
        await alerts._deliver_one(session, message)  # SecretNotFound: worth retrying, but last
    assert route.failing is not None
    assert route.failing[0] == c.SECRET_NOT_FOUND
