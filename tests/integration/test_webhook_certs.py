"""The certificate upkeep against a real API server: with exactly the chart's RBAC (the Secret
by name, create in its namespace), replicas racing for one Secret, and a write refused by RBAC
(the reason is counted and the previous certificate kept)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from kubescribe import metrics
from kubescribe.controller.certrotation import Policy
from kubescribe.controller.webhookcerts import CertificateOptions, WebhookCertificates
from kubescribe.kube.client import KubeClient
from kubescribe_devenv.controlplane import ControlPlane

pytestmark = pytest.mark.controlplane

SECRET = "webhook-certs"
VALIDITY = dt.timedelta(hours=1)
POLICY = Policy(VALIDITY, dt.timedelta(days=365), ("webhooks.test.svc", "127.0.0.1"))


def sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def role(cp: ControlPlane, namespace: str, user: str, *, update: bool) -> None:
    """The chart's Role: get (and update) of the Secret by name, create in the namespace."""
    verbs = ["get", "update"] if update else ["get"]
    cp.apply(
        json.dumps(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "webhook-certs", "namespace": namespace},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["secrets"],
                        "resourceNames": [SECRET],
                        "verbs": verbs,
                    },
                    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
                ],
            }
        )
    )
    cp.kubectl(
        "create", "rolebinding", "webhook-certs", "-n", namespace, "--role=webhook-certs",
        f"--user={user}", check=False,
    )  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.offset = dt.timedelta()

    def __call__(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC) + self.offset


Make = Callable[[Path, str, Clock], Awaitable[WebhookCertificates]]


@pytest.fixture
async def upkeep(controlplane: ControlPlane, namespace: str, tmp_path: Path) -> AsyncIterator[Make]:
    """Certificate upkeep as a replica would run it (kubeconfig, files folder, clock)."""
    clients: list[KubeClient] = []

    async def make(kubeconfig: Path, name: str, clock: Clock) -> WebhookCertificates:
        client = await KubeClient.connect(kubeconfig)
        clients.append(client)
        options = CertificateOptions(namespace, SECRET, POLICY, tmp_path / name)
        return WebhookCertificates(client, options, clock=clock)

    yield make
    for client in clients:
        await client.close()


async def test_least_privilege_create_renew_and_a_refused_write_keeps_serving(
    controlplane: ControlPlane, namespace: str, upkeep: Make, tmp_path: Path
) -> None:
    user = f"certs-{namespace}"
    role(controlplane, namespace, user, update=True)
    clock = Clock()
    certs = await upkeep(controlplane.user_kubeconfig(user), "a", clock)
    await certs.start()  # creates the Secret: allowed by the name-less create rule
    first = certs.material
    assert first is not None
    assert (tmp_path / "a" / "tls.crt").read_bytes() == first.serving.cert_pem
    assert controlplane.kubectl("get", "secret", SECRET, "-n", namespace).returncode == 0

    role(controlplane, namespace, user, update=False)
    clock.offset = VALIDITY * 0.7  # past 2/3: the serving certificate is due
    refused = sample("kubescribe_webhook_certificate_errors_total", reason="SecretForbidden")
    wait = await certs.tick()
    after = sample("kubescribe_webhook_certificate_errors_total", reason="SecretForbidden")
    assert after == refused + 1
    assert wait >= 10  # tried again at a calm pace, not in a loop
    assert certs.material == first  # keeps serving the certificate it has
    assert (tmp_path / "a" / "tls.crt").read_bytes() == first.serving.cert_pem

    role(controlplane, namespace, user, update=True)
    renewed = sample("kubescribe_webhook_certificate_rotations_total", event="serving_expiring")
    await certs.tick()
    assert certs.material is not None
    assert certs.material.serving.fingerprint != first.serving.fingerprint
    assert certs.material.ca == first.ca
    assert (tmp_path / "a" / "tls.crt").read_bytes() == certs.material.serving.cert_pem
    total = sample("kubescribe_webhook_certificate_rotations_total", event="serving_expiring")
    assert total == renewed + 1


async def test_replicas_racing_for_one_secret_write_it_once_and_serve_the_same(
    controlplane: ControlPlane, namespace: str, upkeep: Make
) -> None:
    clock = Clock()
    replicas = [await upkeep(controlplane.kubeconfig, name, clock) for name in ("r1", "r2", "r3")]
    created = sample("kubescribe_webhook_certificate_rotations_total", event="created")
    await asyncio.gather(*(r.start() for r in replicas))
    assert sample("kubescribe_webhook_certificate_rotations_total", event="created") == created + 1
    assert len({r.material.serving.fingerprint for r in replicas if r.material}) == 1

    clock.offset = VALIDITY * 0.7
    renewed = sample("kubescribe_webhook_certificate_rotations_total", event="serving_expiring")
    for _ in range(3):  # a replica that lost the race reads the winner's at its next round
        await asyncio.gather(*(r.tick() for r in replicas))
    total = sample("kubescribe_webhook_certificate_rotations_total", event="serving_expiring")
    assert total == renewed + 1
    served = {r.material.serving.fingerprint for r in replicas if r.material}
    assert len(served) == 1
    secret = controlplane.get_json("secret", SECRET, "-n", namespace)
    assert replicas[0].material is not None
    assert replicas[0].material.to_data(clock())["tls.crt"] == secret["data"]["tls.crt"]
