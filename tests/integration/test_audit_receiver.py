"""The audit receiver and admission webhook over real TLS; a real kube-apiserver posting to it."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner

from kubescribe import cli, metrics
from kubescribe.defaults import DEFAULT_MAX_BODY
from kubescribe.mirror.authors import Author, ObjectEvent
from kubescribe.server.attribution import AttributionOptions
from kubescribe.store.redis_options import RedisOptions
from kubescribe.wiring import Attribution, attribution
from kubescribe_devenv.controlplane import AuditWebhook, ControlPlane, free_port
from kubescribe_devenv.pki import CertificateAuthority, KeyPair
from kubescribe_devenv.redis import DEV_HMAC_KEY, RedisServer


@dataclass
class Pki:
    ca: CertificateAuthority
    client_ca: CertificateAuthority
    client: KeyPair
    other_client: KeyPair
    kubelet: KeyPair  # another certificate the same CA signed: no audit identity
    admission: KeyPair
    dir: Path

    def client_context(self, client: KeyPair | None) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        if client is not None:
            cert, key = self.dir / f"c{id(client)}.crt", self.dir / f"c{id(client)}.key"
            cert.write_bytes(client.cert_pem)
            key.write_bytes(client.key_pem)
            ctx.load_cert_chain(cert, key)
        return ctx


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    ca = CertificateAuthority("kubescribe-serving-ca")
    client_ca = CertificateAuthority("kubescribe-audit-client-ca")
    serving = ca.issue("kubescribe", hosts=("127.0.0.1", "localhost"))
    (tmp_path / "tls.crt").write_bytes(serving.cert_pem)
    (tmp_path / "tls.key").write_bytes(serving.key_pem)
    (tmp_path / "client-ca.crt").write_bytes(client_ca.cert_pem)
    return Pki(
        ca=ca,
        client_ca=client_ca,
        client=client_ca.issue("kubescribe-audit-local", client=True),
        other_client=client_ca.issue("other-cluster", client=True),
        kubelet=client_ca.issue("system:node:worker", organization="system:nodes", client=True),
        admission=client_ca.issue("kubescribe-admission", client=True),
        dir=tmp_path,
    )


def options(pki: Pki, **kw: Any) -> AttributionOptions:
    base: dict[str, Any] = {
        "audit_addr": f"127.0.0.1:{free_port()}",
        "audit_tls_cert": pki.dir / "tls.crt",
        "audit_tls_key": pki.dir / "tls.key",
        "audit_client_ca": pki.dir / "client-ca.crt",
        "audit_route": "local",
        "audit_extra_routes": ("bound=other-cluster", "open=*"),
        "audit_max_body": 256 * 1024,
        "grace": 2.0,
        "webhook_addr": f"127.0.0.1:{free_port()}",
        "webhook_tls_cert": pki.dir / "tls.crt",
        "webhook_tls_key": pki.dir / "tls.key",
        "webhook_client_ca": pki.dir / "client-ca.crt",
    }
    base.update(kw)
    return AttributionOptions(**base)


@pytest.fixture
async def running(pki: Pki) -> AsyncIterator[tuple[Attribution, AttributionOptions]]:
    opts = options(pki)
    async with attribution(opts) as att:
        yield att, opts


def event_list(*items: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": list(items)}


def create_event(user: str, uid: str, rv: str, name: str = "cm") -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    return {
        "stage": "ResponseComplete",
        "verb": "create",
        "user": {"username": "kube-apiserver-admin"},
        "impersonatedUser": {"username": user},
        "objectRef": {"resource": "configmaps", "namespace": "ns", "name": name},
        "responseStatus": {"code": 201},
        "responseObject": {"kind": "ConfigMap", "metadata": {"uid": uid, "resourceVersion": rv}},
        "requestReceivedTimestamp": now,
        "stageTimestamp": now,
    }


async def post(
    pki: Pki,
    opts: AttributionOptions,
    body: bytes,
    *,
    route: str = "local",
    client: KeyPair | None = None,
    use_client: bool = True,
    content_type: str = "application/json",
) -> tuple[int, Any]:
    ctx = pki.client_context((client or pki.client) if use_client else None)
    url = f"https://{opts.audit_addr}/audit-webhook/{route}?timeout=30s"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers={"Content-Type": content_type}, ssl=ctx) as resp,
    ):
        text = await resp.text()
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text


def sample(name: str, labels: dict[str, str]) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


async def test_a_batch_becomes_facts_the_resolver_joins(
    pki: Pki, running: tuple[Attribution, AttributionOptions]
) -> None:
    att, opts = running
    assert att.resolver is not None
    body = json.dumps(event_list(create_event("alice", "u-1", "7"))).encode()
    assert await post(pki, opts, body) == (200, {"accepted": 1, "skipped": {}})
    author = await att.resolver.author_of(
        ObjectEvent("u-1", "7", "", "configmaps", "ns", "cm", "CREATE"), time.monotonic()
    )
    assert author == Author("alice", "alice@users.kubescribe.invalid")


async def test_hostile_input_gets_the_right_error_and_the_receiver_keeps_working(
    pki: Pki, running: tuple[Attribution, AttributionOptions]
) -> None:
    att, opts = running
    assert att.resolver is not None
    ok = json.dumps(event_list(create_event("bob", "u-2", "9"))).encode()
    rejected_before = sample("kubescribe_audit_requests_total", {"code": "413"})

    oversized = json.dumps(
        event_list(*[create_event("mallory", f"x-{i}", "1") for i in range(2000)])
    ).encode()
    assert len(oversized) > opts.audit_max_body
    assert (await post(pki, opts, oversized))[0] == 413
    assert (await post(pki, opts, b"{not json"))[0] == 400
    assert (await post(pki, opts, b'{"kind": "Pod"}'))[0] == 400
    assert (await post(pki, opts, ok, content_type="text/plain"))[0] == 415
    assert (await post(pki, opts, ok, route="nobody"))[0] == 404
    assert (await post(pki, opts, ok, use_client=False))[0] == 401
    # A route bound to another client's certificate refuses this one, and takes its own.
    assert (await post(pki, opts, ok, route="bound"))[0] == 403
    assert (await post(pki, opts, ok, route="bound", client=pki.other_client))[0] == 200
    # A certificate from a CA the receiver does not trust fails the TLS handshake.
    stranger = CertificateAuthority("stranger").issue("kube-apiserver", client=True)
    with pytest.raises(aiohttp.ClientError):
        await post(pki, opts, ok, client=stranger)
    # Events whose response names no object are skipped and counted.
    bare = create_event("carol", "u-3", "1")
    bare["responseObject"] = {"kind": "Status", "apiVersion": "v1", "metadata": {}}
    skipped_before = sample("kubescribe_audit_events_total", {"outcome": "skipped_no_object"})
    status, answer = await post(pki, opts, json.dumps(event_list(bare)).encode())
    assert (status, answer) == (200, {"accepted": 0, "skipped": {"skipped_no_object": 1}})
    assert sample("kubescribe_audit_events_total", {"outcome": "skipped_no_object"}) == (
        skipped_before + 1
    )
    assert sample("kubescribe_audit_requests_total", {"code": "413"}) == rejected_before + 1

    # After all of that the receiver still takes a good batch, on the right route only.
    assert (await post(pki, opts, ok))[0] == 200
    event = ObjectEvent("u-2", "9", "", "configmaps", "ns", "cm", "CREATE")
    assert await att.resolver.author_of(event, time.monotonic()) == Author(
        "bob", "bob@users.kubescribe.invalid"
    )
    # The fact posted to route `bound` by the other cluster is not visible on `local`.
    assert att.facts.find("bound", "rv/u-2/9")
    assert len(att.facts.find("local", "rv/u-2/9")) == 1


async def test_the_default_body_cap_takes_batches_over_aiohttps_one_mebibyte(pki: Pki) -> None:
    opts = options(pki, audit_max_body=DEFAULT_MAX_BODY)
    big = json.dumps(
        event_list(*[create_event("dora", f"u-{i}", "1", name="n" * 200) for i in range(4000)])
    ).encode()
    assert len(big) > 2 * 1024 * 1024
    async with attribution(opts):
        status, answer = await post(pki, opts, big)
    assert status == 200
    assert answer["accepted"] == 4000


def review(user: dict[str, Any], *, kind: str = "CommitRequest", uid: str = "cr-1") -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "review-1",
                "kind": {"group": "kubescribe.io", "version": "v1alpha1", "kind": kind},
                "operation": "CREATE",
                "namespace": "ns",
                "name": "save",
                "userInfo": user,
                "object": {"metadata": {"name": "save", "namespace": "ns", "uid": uid}},
            },
        }
    ).encode()


async def test_admission_webhook_allows_and_records_the_requester(
    pki: Pki, running: tuple[Attribution, AttributionOptions]
) -> None:
    att, opts = running
    url = f"https://{opts.webhook_addr}/validate-commitrequests"
    ctx = pki.client_context(pki.admission)
    carol = {"username": "carol", "extra": {"example.org/email": ["carol@example.org"]}}
    async with aiohttp.ClientSession() as session:
        for body, want in (
            (review(carol), 200),
            (review({"username": "eve"}, kind="ConfigMap", uid="cm-1"), 200),
            (b"{}", 400),
            (b"[]", 400),
        ):
            headers = {"Content-Type": "application/json"}
            async with session.post(url, data=body, headers=headers, ssl=ctx) as resp:
                assert resp.status == want
                if want == 200:
                    answer = await resp.json()
                    assert answer["response"] == {"uid": "review-1", "allowed": True}
    assert att.requests is not None
    got = await att.requests.author_of_request("ns", "save", "cr-1")
    assert got == Author("carol", "carol@example.org")
    assert await att.requests.author_of_request("ns", "save", "cm-1") is None


def test_flag_problems_are_reported() -> None:
    bad = AttributionOptions(audit_addr="127.0.0.1:1", audit_route="Not_A_Label", grace=-1)
    problems = " | ".join(bad.problems())
    assert "--audit-tls-cert" in problems
    assert "--audit-client-ca" in problems
    assert "not a DNS label" in problems
    assert "negative" in problems
    odd = AttributionOptions(
        audit_route="a=",
        audit_extra_routes=("b=*,x",),
        audit_max_body=32 * 1024 * 1024,
        webhook_addr="127.0.0.1:1",
        webhook_client_cns=("*", "x"),
    )
    problems = " | ".join(odd.problems())
    assert "no client identity after '='" in problems
    assert "'*' cannot be combined" in problems
    assert "--audit-max-body must be between 1024 and 16777216" in problems
    assert "--webhook-client-cn" in problems


def test_the_admission_webhook_refuses_to_start_without_client_authentication(pki: Pki) -> None:
    opts = options(pki, webhook_client_ca=None)
    assert any("--webhook-addr needs --webhook-client-ca" in p for p in opts.problems())
    args = [
        "run",
        f"--webhook-addr=127.0.0.1:{free_port()}",
        f"--webhook-tls-cert={pki.dir / 'tls.crt'}",
        f"--webhook-tls-key={pki.dir / 'tls.key'}",
    ]
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 2
    assert "--webhook-addr needs --webhook-client-ca" in result.output


def refusals(server: str, reason: str) -> float:
    return sample("kubescribe_webhook_refusals_total", {"server": server, "reason": reason})


async def test_audit_routes_take_only_their_bound_client_identities(
    pki: Pki, running: tuple[Attribution, AttributionOptions]
) -> None:
    att, opts = running
    ok = json.dumps(event_list(create_event("bob", "u-9", "9"))).encode()
    before = refusals("audit", "client_not_allowed")
    # A kubelet's (or an admin's) certificate from the same CA posts no facts.
    assert (await post(pki, opts, ok, client=pki.kubelet))[0] == 403
    assert (await post(pki, opts, ok, client=pki.other_client))[0] == 403
    assert refusals("audit", "client_not_allowed") == before + 2
    assert not att.facts.find("local", "rv/u-9/9")
    # The identity may also be a DNS SAN; `name=*` takes any certificate of the CA.
    by_san = pki.client_ca.issue("audit", hosts=("kubescribe-audit-local",), client=True)
    assert (await post(pki, opts, ok, client=by_san))[0] == 200
    assert (await post(pki, opts, ok, route="open", client=pki.kubelet))[0] == 200
    assert len(att.facts.find("local", "rv/u-9/9")) == 1


async def raw_post(
    pki: Pki, addr: str, path: str, head: bytes, body: bytes, client: KeyPair
) -> bytes:
    """Send `head` (headers) and `body`, then wait for the answer: the status line."""
    host, port = addr.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(
        host, int(port), ssl=pki.client_context(client), server_hostname="localhost"
    )
    try:
        writer.write(b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n")
        writer.write(body)
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), 10)
    finally:
        writer.close()


async def test_hostile_audit_bodies_get_their_status_in_bounded_time(
    pki: Pki, redis_server: RedisServer
) -> None:
    opts = options(
        pki,
        audit_max_body=4 * 1024 * 1024,
        audit_max_events=100,
        read_timeout=1.0,
        redis=RedisOptions(redis_server.url, DEV_HMAC_KEY.encode()),
    )
    huge = create_event("u" * (1024 * 1024), "u-big", "1")
    bodies = {
        "deep nesting": (b'{"kind":"EventList","items":' + b"[" * 1_000_000, 400),
        "non-UTF-8": (b'{"kind":"EventList","items":["\xff\xfe"]}', 400),
        "too many events": (json.dumps(event_list(*[{}] * 101)).encode(), 413),
        # 3 MiB of empty objects would take about 75 MiB once parsed.
        "decoded size": (json.dumps(event_list(*[{}] * 10**6)).encode(), 413),
        "huge username": (json.dumps(event_list(huge)).encode(), 200),
    }
    async with attribution(opts) as att:
        for what, (body, want) in bodies.items():
            status, answer = await post(pki, opts, body)
            assert (what, status) == (what, want), answer
        assert answer == {"accepted": 0, "skipped": {"skipped_oversized": 1}}
        assert not att.facts.find("local", "rv/u-big/1")
        # A body that never finishes: 408 after the read timeout, not a held connection.
        head = b"Content-Type: application/json\r\nContent-Length: 1000\r\n"
        status_line = await raw_post(
            pki, opts.audit_addr, "/audit-webhook/local", head, b'{"kind":', pki.client
        )
        assert status_line.startswith(b"HTTP/1.1 408"), status_line
    for reason in ("not_an_event_list", "too_many_events", "decoded_too_large", "read_timeout"):
        assert refusals("audit", reason) >= 1


async def test_admission_takes_reviews_only_from_its_client_and_bounds_fields(
    pki: Pki, running: tuple[Attribution, AttributionOptions]
) -> None:
    att, opts = running
    assert att.requests is not None
    url = f"https://{opts.webhook_addr}/validate-commitrequests"
    mallory = review({"username": "mallory"}, uid="cr-forged")
    before = refusals("admission", "client_not_allowed")
    async with aiohttp.ClientSession() as session:

        async def send(body: bytes, client: KeyPair | None) -> int:
            headers = {"Content-Type": "application/json"}
            ctx = pki.client_context(client)
            async with session.post(url, data=body, headers=headers, ssl=ctx) as resp:
                return resp.status

        assert await send(mallory, None) == 401
        assert await send(mallory, pki.client) == 403  # the audit client is not the apiserver
        assert await send(mallory, pki.kubelet) == 403
        assert refusals("admission", "client_not_allowed") == before + 2
        assert await att.requests.author_of_request("ns", "save", "cr-forged") is None
        # Over-long fields are answered (allowed) but not stored.
        long_user = review({"username": "x" * (1024 * 1024)}, uid="cr-long")
        assert await send(long_user, pki.admission) == 200
        assert await att.requests.author_of_request("ns", "save", "cr-long") is None
        assert await send(b"[" * 1_000_000, pki.admission) == 400
        assert await send(b"{}" * (1536 * 1024), pki.admission) == 413


@pytest.mark.parametrize("backend", ["memory", "redis"])
async def test_one_fact_source_cannot_evict_another(
    pki: Pki, backend: str, redis_server: RedisServer
) -> None:
    shared = RedisOptions(redis_server.url, DEV_HMAC_KEY.encode())
    redis = {"redis": shared} if backend == "redis" else {}
    opts = options(pki, max_facts=20, max_request_records=5, **redis)
    async with attribution(opts) as att:
        assert att.requests is not None
        url = f"https://{opts.webhook_addr}/validate-commitrequests"
        ctx = pki.client_context(pki.admission)
        headers = {"Content-Type": "application/json"}
        async with aiohttp.ClientSession() as session:

            async def admit(user: str, uid: str) -> None:
                body = review({"username": user}, uid=uid)
                async with session.post(url, data=body, headers=headers, ssl=ctx) as resp:
                    assert resp.status == 200

            await admit("carol", "cr-carol")
            other = json.dumps(event_list(create_event("olga", "o-1", "1"))).encode()
            assert (await post(pki, opts, other, route="bound", client=pki.other_client))[0] == 200
            # The own cluster's route floods its own bound ...
            for batch in range(3):
                flood = [create_event("bot", f"f-{batch}-{i}", "1") for i in range(50)]
                assert (await post(pki, opts, json.dumps(event_list(*flood)).encode()))[0] == 200
            assert await att.requests.author_of_request("ns", "save", "cr-carol") == Author(
                "carol", "carol@users.kubescribe.invalid"
            )
            wait_until = time.monotonic() + 10
            while not att.facts.find("bound", "rv/o-1/1") and time.monotonic() < wait_until:
                await att.facts.wait("bound", 1)
            assert att.facts.find("bound", "rv/o-1/1")
            # ... and a flood of reviews evicts no audit fact.
            for i in range(10):
                await admit("bot", f"cr-{i}")
            assert att.resolver is not None
            event = ObjectEvent("f-2-49", "1", "", "configmaps", "ns", "cm", "CREATE")
            assert await att.resolver.author_of(event, time.monotonic()) == Author(
                "bot", "bot@users.kubescribe.invalid"
            )
    source = {"source": "local"}
    assert sample("kubescribe_attribution_facts", source) == 20


@pytest.mark.controlplane
async def test_real_apiserver_audit_names_impersonated_users_and_service_accounts(
    pki: Pki, tmp_path: Path
) -> None:
    opts = options(pki, webhook_addr="")
    async with attribution(opts) as att:
        assert att.resolver is not None
        hook = AuditWebhook(
            url=f"https://{opts.audit_addr}/audit-webhook/local",
            ca_pem=pki.ca.cert_pem,
            client=pki.client,
            mode="blocking",
        )
        (tmp_path / "cp").mkdir()
        cp = ControlPlane(audit=hook, workdir=tmp_path / "cp")
        await asyncio.to_thread(cp.start)
        try:

            async def kubectl(*args: str) -> str:
                done = await asyncio.to_thread(cp.kubectl, *args)
                return done.stdout

            await kubectl("create", "namespace", "ns")
            made: dict[str, tuple[str, str]] = {}
            for name, who in (
                ("by-alice", ["--as", "alice", "--as-user-extra", "example.org/name=Alice L"]),
                ("by-robot", ["--as", "system:serviceaccount:ns:robot"]),
            ):
                out = await kubectl(
                    "create", "configmap", name, "-n", "ns", "--as-group", "system:masters",
                    *who, "-o", "jsonpath={.metadata.uid} {.metadata.resourceVersion}",
                )  # fmt: skip
                uid, rv = out.split()
                made[name] = (uid, rv)
            authors = {}
            for name, (uid, rv) in made.items():
                event = ObjectEvent(uid, rv, "", "configmaps", "ns", name, "CREATE")
                authors[name] = await att.resolver.author_of(event, time.monotonic())
        finally:
            await asyncio.to_thread(cp.stop)
    assert authors == {
        "by-alice": Author("Alice L", "alice@users.kubescribe.invalid"),
        "by-robot": Author(
            "system:serviceaccount:ns:robot", "robot@ns.serviceaccount.kubescribe.invalid"
        ),
    }


async def test_anonymous_admission_only_when_asked_for(pki: Pki) -> None:
    """Managed clusters: the API server presents no client certificate. Only with
    `--webhook-allow-anonymous` does the webhook take its reviews (and then anyone's)."""
    strict = options(pki)
    assert strict.problems() == []
    anonymous = options(pki, webhook_client_ca=None, webhook_allow_anonymous=True)
    assert anonymous.problems() == []
    assert options(pki, webhook_client_ca=None).problems() != []
    async with attribution(anonymous) as att:
        assert att.requests is not None
        url = f"https://{anonymous.webhook_addr}/validate-commitrequests"
        body = review({"username": "carol"}, uid="cr-anon")
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                url,
                data=body,
                headers={"Content-Type": "application/json"},
                ssl=pki.client_context(None),
            ) as resp,
        ):
            assert resp.status == 200
        author = await att.requests.author_of_request("ns", "save", "cr-anon")
        assert author is not None
        assert author.name == "carol"
