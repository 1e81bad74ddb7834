"""Operator-managed webhook certificates against a real control plane: the operator creates its
certificate Secret, serves TLS with it, keeps `caBundle` of a ValidatingWebhookConfiguration
verifying what it serves, and rotates the serving certificate without a restart."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import ssl
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubescribe_devenv.controlplane import ControlPlane, free_port
from tests.support import Operator, wait_for

SECRET = "kubescribe-webhook-certs"
VALIDITY = 30  # seconds: renewed about 20 s after it was issued


def served(port: int, ca_bundle: bytes | None = None) -> bytes:
    """The DER certificate the webhook port presents; with `ca_bundle`, verified against it
    (names included: the certificate is for 127.0.0.1)."""
    if ca_bundle is None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    else:
        ctx = ssl.create_default_context(cadata=ca_bundle.decode())
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as sock,
        ctx.wrap_socket(sock, server_hostname="127.0.0.1") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


def fingerprint(der: bytes) -> str:
    return hashlib.sha256(der).hexdigest()


def ca_bundle(cp: ControlPlane, name: str) -> bytes | None:
    hook = cp.get_json("validatingwebhookconfiguration", name)
    encoded = hook["webhooks"][0]["clientConfig"].get("caBundle")
    return base64.b64decode(encoded) if encoded else None


def webhook_configuration(name: str, port: int) -> str:
    """A webhook that never matches anything (no namespace has the label): only its caBundle
    matters here."""
    return json.dumps(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": name},
            "webhooks": [
                {
                    "name": "certs.e2e.kubescribe.io",
                    "clientConfig": {"url": f"https://127.0.0.1:{port}/validate-commitrequests"},
                    "rules": [
                        {
                            "apiGroups": ["kubescribe.io"],
                            "apiVersions": ["*"],
                            "operations": ["CREATE"],
                            "resources": ["commitrequests"],
                        }
                    ],
                    "namespaceSelector": {"matchLabels": {"kubescribe-e2e-never": "true"}},
                    "failurePolicy": "Ignore",
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                }
            ],
        }
    )


def test_created_served_injected_and_rotated_without_a_restart(
    crds: ControlPlane, operator: Callable[..., Operator], namespace: str, tmp_path: Path
) -> None:
    cp = crds
    port = free_port()
    hook = f"e2e-certs-{uuid.uuid4().hex[:6]}"
    cp.apply(webhook_configuration(hook, port))
    assert cp.kubectl("get", "secret", SECRET, "-n", namespace, check=False).returncode != 0
    op = operator(
        f"--webhook-addr=127.0.0.1:{port}",
        f"--webhook-cert-secret={SECRET}",
        f"--webhook-cert-namespace={namespace}",
        "--webhook-cert-host=127.0.0.1",
        "--webhook-cert-host=localhost",
        f"--webhook-cert-validity={VALIDITY}",
        f"--webhook-cert-dir={tmp_path / 'webhook-tls'}",
        f"--webhook-ca-inject={hook}",
    )
    try:
        secret = wait_for(lambda: find_secret(cp, namespace), timeout=30, what="the Secret")
        assert secret is not None
        assert {"ca.crt", "ca.key", "tls.crt", "tls.key", "ca-bundle.crt"} <= set(secret["data"])
        bundle = wait_for(lambda: ca_bundle(cp, hook), timeout=30, what="caBundle injected")
        assert bundle == base64.b64decode(secret["data"]["ca-bundle.crt"])

        first = wait_for(lambda: _try(lambda: served(port, bundle)), timeout=30, what="TLS")
        assert first == ssl.PEM_cert_to_DER_cert(
            base64.b64decode(secret["data"]["tls.crt"]).decode()
        )
        proc = op.proc
        assert proc is not None
        pid = proc.pid

        def rotated() -> bytes | None:
            der = _try(lambda: served(port))
            return der if der is not None and der != first else None

        second = wait_for(rotated, timeout=3 * VALIDITY, what="a rotated serving certificate")
        assert proc.poll() is None  # the same process, never restarted
        assert op.proc is proc
        assert proc.pid == pid
        assert second is not None
        assert fingerprint(second) != fingerprint(first)
        # the CA is kept: the caBundle on the webhook configuration verifies the new one
        assert ca_bundle(cp, hook) == bundle
        assert served(port, bundle) == second
        now = cp.get_json("secret", SECRET, "-n", namespace)
        assert now["data"]["ca.crt"] == secret["data"]["ca.crt"]
        metrics = op.metrics()
        assert 'kubescribe_webhook_certificate_rotations_total{event="created"} 1.0' in metrics
        assert 'kubescribe_webhook_certificate_rotations_total{event="serving_expiring"}' in metrics
        assert 'kubescribe_webhook_certificate_expiry_timestamp_seconds{certificate="serving"}' in (
            metrics
        )
        rotations = [
            json.loads(line) for line in op.logs().splitlines() if '"webhook_certs.rotated"' in line
        ]
        assert rotations[0]["events"] == ["created"]
        assert rotations[1]["events"] == ["serving_expiring"]
    finally:
        cp.kubectl("delete", "validatingwebhookconfiguration", hook, check=False)


def find_secret(cp: ControlPlane, namespace: str) -> dict[str, Any] | None:
    done = cp.kubectl("get", "secret", SECRET, "-n", namespace, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def _try(read: Callable[[], bytes]) -> bytes | None:
    try:
        return read()
    except (OSError, ssl.SSLError):
        return None
