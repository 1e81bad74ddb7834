"""The test control plane is a real kube-apiserver + etcd: objects, watches, CRDs, audit."""

from __future__ import annotations

import http.client
import json
import queue
import ssl
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from kubescribe_devenv.aggregated import AGGREGATOR_ARGS, API_VERSION, GROUP, KIND, AggregatedServer
from kubescribe_devenv.controlplane import AuditWebhook, ControlPlane
from kubescribe_devenv.pki import CertificateAuthority

pytestmark = pytest.mark.controlplane


def _watch_events(
    cp: ControlPlane, path: str, until: str, timeout: float = 10
) -> list[dict[str, Any]]:
    host, port = cp.server.removeprefix("https://").split(":")
    conn = http.client.HTTPSConnection(host, int(port), context=cp.ssl_context(), timeout=timeout)
    conn.request("GET", path)
    resp = conn.getresponse()
    assert resp.status == 200, resp.read()
    events = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = resp.readline()
        if not line:
            break
        event = json.loads(line)
        events.append(event)
        if event["type"] == until:
            break
    conn.close()
    return events


def test_configmap_round_trip_and_watch(controlplane: ControlPlane, namespace: str) -> None:
    listed = controlplane.kubectl(
        "get", "--raw", f"/api/v1/namespaces/{namespace}/configmaps"
    ).stdout
    start_rv = json.loads(listed)["metadata"]["resourceVersion"]

    controlplane.kubectl("create", "configmap", "demo", "-n", namespace, "--from-literal=a=1")
    got = controlplane.get_json("configmap", "demo", "-n", namespace)
    assert got["data"] == {"a": "1"}
    controlplane.kubectl("patch", "configmap", "demo", "-n", namespace, "-p", '{"data":{"a":"2"}}')
    controlplane.kubectl("delete", "configmap", "demo", "-n", namespace)

    events = _watch_events(
        controlplane,
        f"/api/v1/namespaces/{namespace}/configmaps?watch=1&resourceVersion={start_rv}"
        "&fieldSelector=metadata.name%3Ddemo&timeoutSeconds=10",
        until="DELETED",
    )
    assert [(e["type"], e["object"].get("data")) for e in events] == [
        ("ADDED", {"a": "1"}),
        ("MODIFIED", {"a": "2"}),
        ("DELETED", {"a": "2"}),
    ]


CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.kubescribe.io
spec:
  group: example.kubescribe.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
"""


def test_custom_resource_definition_is_served(controlplane: ControlPlane, namespace: str) -> None:
    controlplane.apply(CRD)
    controlplane.wait_established("widgets.example.kubescribe.io")
    widget = {
        "apiVersion": "example.kubescribe.io/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "namespace": namespace},
        "spec": {"size": 3},
    }
    deadline = time.monotonic() + 20
    while True:  # discovery in kubectl may lag the Established condition by a moment
        done = controlplane.kubectl("apply", "-f", "-", input=json.dumps(widget), check=False)
        if done.returncode == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert done.returncode == 0, done.stderr
    assert controlplane.get_json("widgets.example.kubescribe.io", "w1", "-n", namespace)[
        "spec"
    ] == {"size": 3}


class _AuditReceiver:
    """A tiny HTTPS server that records every audit EventList POSTed to it."""

    def __init__(self) -> None:
        self.ca = CertificateAuthority("audit-test-ca")
        serving = self.ca.issue("audit", hosts=("127.0.0.1",))
        self.posts: queue.Queue[tuple[str, dict[str, Any]]] = queue.Queue()
        posts = self.posts

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                posts.put((self.path, json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        with tempfile.NamedTemporaryFile() as cert, tempfile.NamedTemporaryFile() as key:
            cert.write(serving.cert_pem)
            cert.flush()
            key.write(serving.key_pem)
            key.flush()
            ctx.load_cert_chain(cert.name, key.name)
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}/audit-webhook/test"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def audit_receiver() -> Iterator[_AuditReceiver]:
    receiver = _AuditReceiver()
    yield receiver
    receiver.server.shutdown()


def test_audit_webhook_reports_response_resource_version(
    audit_receiver: _AuditReceiver, tmp_path: Any
) -> None:
    hook = AuditWebhook(url=audit_receiver.url, ca_pem=audit_receiver.ca.cert_pem)
    with ControlPlane(audit=hook, workdir=tmp_path) as cp:
        cp.kubectl("create", "namespace", "audited")
        created = json.loads(
            cp.kubectl(
                "create", "configmap", "seen", "-n", "audited", "--from-literal=k=v", "-o", "json"
            ).stdout
        )
        rv = created["metadata"]["resourceVersion"]
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                path, body = audit_receiver.posts.get(timeout=1)
            except queue.Empty:
                continue
            assert path.startswith("/audit-webhook/test")
            assert body["kind"] == "EventList"
            for event in body["items"]:
                ref = event.get("objectRef", {})
                if ref.get("resource") == "configmaps" and ref.get("name") == "seen":
                    assert event["verb"] == "create"
                    assert event["stage"] == "ResponseComplete"
                    assert event["user"]["username"] == "kubescribe-admin"
                    assert event["responseObject"]["metadata"]["resourceVersion"] == rv
                    return
        pytest.fail("no audit event for the ConfigMap create arrived")


def test_audit_of_writes_proxied_to_an_aggregated_api_has_no_objects(
    audit_receiver: _AuditReceiver, tmp_path: Any
) -> None:
    """What attribution can know of an aggregated API's writes: kube-apiserver's audit event
    names group, resource, namespace (and the name, except for a create), never the objects."""
    hook = AuditWebhook(url=audit_receiver.url, ca_pem=audit_receiver.ca.cert_pem)
    with (
        AggregatedServer() as api,
        ControlPlane(audit=hook, workdir=tmp_path, extra_apiserver_args=AGGREGATOR_ARGS) as cp,
    ):
        api.register(cp)
        cp.kubectl("create", "namespace", "agg")
        widget = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "w"}, "spec": {}}
        cp.kubectl("create", "--validate=false", "-n", "agg", "-f", "-", input=json.dumps(widget))
        cp.kubectl("patch", "widget", "w", "-n", "agg", "--type=merge", "-p", '{"spec":{"a":1}}')
        cp.kubectl("delete", "widget", "w", "-n", "agg")
        assert cp.kubectl("get", "widgets", "-n", "agg", "-o", "name").stdout == ""
        seen: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + 30
        while len(seen) < 3 and time.monotonic() < deadline:
            try:
                _, body = audit_receiver.posts.get(timeout=1)
            except queue.Empty:
                continue
            for event in body["items"]:
                ref = event.get("objectRef") or {}
                if ref.get("apiGroup") == GROUP and event.get("stage") == "ResponseComplete":
                    seen[event["verb"]] = event
        assert set(seen) == {"create", "patch", "delete"}, sorted(seen)
        for verb, event in seen.items():
            assert event["level"] == "RequestResponse"
            assert "requestObject" not in event, verb
            assert "responseObject" not in event, verb
            ref = event["objectRef"]
            assert (ref["resource"], ref["namespace"]) == ("widgets", "agg")
            assert ref.get("name", "") == ("" if verb == "create" else "w")


def test_two_control_planes_run_side_by_side(controlplane: ControlPlane, tmp_path: Any) -> None:
    with ControlPlane(workdir=tmp_path) as other:
        assert other.server != controlplane.server
        other.kubectl("create", "namespace", "only-in-other")
        assert other.get_json("namespace", "only-in-other")["metadata"]["name"] == "only-in-other"
        missing = controlplane.kubectl("get", "namespace", "only-in-other", check=False)
        assert missing.returncode != 0
