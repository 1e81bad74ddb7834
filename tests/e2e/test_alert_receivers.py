"""The Slack and Alertmanager receivers end to end (#34): the operator with audit attribution
against a real kube-apiserver, a real Git remote, an HTTP server on loopback as the Slack
incoming webhook, and the real Alertmanager built from its Go module."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kubescribe_devenv.alertmanager import Alertmanager
from kubescribe_devenv.gitremote import BareRemote
from tests.e2e.conftest import Audited
from tests.e2e.test_alerts import (
    Receiver,
    alert_ready,
    create_as,
    deployment,
    last_commit_of,
    mirrored,
    receiver,
)
from tests.e2e.test_attribution import audit_flowing
from tests.manifests import API
from tests.support import Operator, condition, manifest, metric, wait_for

pytestmark = pytest.mark.controlplane

__all__ = ["receiver"]  # the fixture, shared with test_alerts

TOKEN = "T0KEN-of-the-slack-webhook"
SELECTOR = {"kinds": ["Deployment"], "excludeAuthors": {"users": ["bob"]}}
ALICE = {"kinds": ["Deployment"], "authors": ["alice"]}
SENT = ("kubescribe_alert_messages_total", 'result="sent"')


def alert(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "Alert",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"groupWindowSeconds": 1, "selector": SELECTOR, **spec},
    }


def slack_alert(name: str, namespace: str, secret: str, **spec: Any) -> dict[str, Any]:
    receiver = {"urlSecretRef": {"name": secret, "key": "url"}}
    return alert(name, namespace, slack=receiver, **spec)


def url_secret(name: str, namespace: str, url: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": {"url": url},
    }


def failing(audited: Audited, name: str, ns: str) -> dict[str, Any]:
    found: dict[str, Any] = wait_for(
        lambda: (
            cond
            if (cond := condition(audited.cp, "alert", name, ns, "DeliveryFailing"))
            and cond["status"] == "True"
            else None
        ),
        timeout=60,
        what=f"Alert {ns}/{name} DeliveryFailing",
    )
    return found


def scaled_by_alice(audited: Audited, ns: str, remote: BareRemote) -> str:
    """bob (excluded) creates Deployment `web`, alice scales it; the commit of alice's change."""
    create_as(audited, "bob", deployment("web", ns))
    web = f"mirror/{ns}/apps/deployments/web.yaml"
    wait_for(lambda: web in remote.files(), timeout=60, what="bob's deployment in Git")
    audited.kubectl_as("alice", "scale", "deployment", "web", "-n", ns, "--replicas=3")
    wait_for(lambda: "replicas: 3" in remote.read(web), timeout=60, what="alice's scale in Git")
    return last_commit_of(remote, "main", web)


def test_alices_scale_is_an_alert_in_alertmanager_and_a_metadata_address_is_refused(
    audited: Audited,
    ns: str,
    remote: BareRemote,
    alertmanager: Alertmanager,
    start_operator: Callable[..., Operator],
) -> None:
    audited.cp.wait_established("alerts.kubescribe.io")
    op = start_operator(*audited.flags())
    mirrored(audited, ns, remote.url, "main")
    audit_flowing(audited, op, ns)
    audited.cp.apply(
        manifest(
            alert("am", ns, alertmanager={"url": alertmanager.url}),
            alert("probe", ns, alertmanager={"url": "http://169.254.169.254:9093/"}),
        )
    )
    alert_ready(audited, "am", ns)
    refused = wait_for(
        lambda: condition(audited.cp, "alert", "probe", ns, "Ready"),
        timeout=30,
        what="the probe Alert's Ready condition",
    )
    assert (refused["status"], refused["reason"]) == ("False", "UrlRefused")
    assert "AddressNotAllowed" in refused["message"]
    assert "metadata" in refused["message"]

    commit = scaled_by_alice(audited, ns, remote)

    def held() -> list[dict[str, Any]]:
        return [a for a in alertmanager.alerts() if a["labels"].get("alert") == f"{ns}/am"]

    (found,) = wait_for(held, timeout=60, what="alice's change in Alertmanager")
    assert found["labels"] == {
        "alertname": "KubescribeChange",
        "alert": f"{ns}/am",
        "kind": "Deployment",
        "namespace": ns,
        "name": "web",
        "operation": "UPDATE",
        "author": "alice",
    }
    notes = found["annotations"]
    assert notes["fieldPaths"] == "spec.replicas"
    assert notes["commit"] == commit
    assert notes["summary"] == f"alice UPDATE Deployment {ns}/web: spec.replicas"
    assert found["status"]["state"] == "active"
    assert found["startsAt"] < found["endsAt"]
    wait_for(lambda: metric(op, *SENT) >= 1, timeout=30, what="the delivery counted")


def test_slack_hears_alice_with_hostile_names_escaped_and_only_its_own_secrets(
    audited: Audited,
    ns: str,
    remote: BareRemote,
    receiver: Receiver,
    start_operator: Callable[..., Operator],
) -> None:
    audited.cp.wait_established("alerts.kubescribe.io")
    op = start_operator(*audited.flags())
    other = f"slack-b-{uuid.uuid4().hex[:6]}"
    audited.cp.kubectl("create", "namespace", other)
    mirrored(audited, ns, remote.url, "main")
    audit_flowing(audited, op, ns)
    base = f"http://127.0.0.1:{receiver.port}"
    hook = f"/services/T0/B0/{TOKEN}"
    audited.cp.apply(
        manifest(
            url_secret("slack", ns, f"{base}{hook}\n"),
            url_secret("metadata", ns, f"http://169.254.169.254{hook}"),
            url_secret("theirs", other, f"{base}/stolen"),
            slack_alert("slack", ns, "slack"),
            # Only alice's change for these two: one delivery task serves every Alert, and a
            # failing message is retried for about 30 s before the next one is tried.
            # One try each: the delivery queue is shared, and a retried failure holds the next.
            slack_alert("probe", ns, "metadata", selector=ALICE, delivery={"attempts": 1}),
            slack_alert("elsewhere", ns, "theirs", selector=ALICE, delivery={"attempts": 1}),
        )
    )
    for name in ("slack", "probe", "elsewhere"):
        alert_ready(audited, name, ns)

    commit = scaled_by_alice(audited, ns, remote)
    hostile = "mallory <!channel> & co"
    audited.kubectl_as(hostile, "annotate", "deployment", "web", "-n", ns, "note=hello")
    web = f"mirror/{ns}/apps/deployments/web.yaml"
    wait_for(lambda: "note: hello" in remote.read(web), timeout=60, what="mallory's change")

    def told() -> str:
        return "\n".join(json.loads(r.body)["text"] for r in receiver.at(hook))

    wait_for(
        lambda: "alice" in told() and "mallory" in told(),
        timeout=150,
        what="both changes told to Slack",
    )
    text = told()
    assert "spec.replicas" in text
    assert commit in text
    assert "mallory &lt;!channel&gt; &amp; co" in text
    assert "metadata.annotations.note" in text
    for received in receiver.at(hook):
        assert "<!channel>" not in json.dumps(json.loads(received.body), ensure_ascii=False)

    probe = failing(audited, "probe", ns)
    assert probe["reason"] == "UrlRefused"
    assert "AddressNotAllowed" in probe["message"]
    assert "metadata" in probe["message"]
    assert TOKEN not in probe["message"]
    elsewhere = failing(audited, "elsewhere", ns)
    assert elsewhere["reason"] == "SecretNotFound"
    assert f"{ns}/theirs" in elsewhere["message"]
    assert receiver.at("/stolen") == []
