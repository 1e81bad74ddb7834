"""The change admission webhook's registration, kept in step with what is watched.

With `--changes-webhook-url`, the operator owns one ValidatingWebhookConfiguration whose rules
are the types its streams watch in its own cluster. It never denies (`failurePolicy: Ignore`,
the handler always allows), has no side effects, and a short timeout: it only records who
wrote what, for attribution on clusters without an audit webhook.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from kubescribe.controller.ownership import MANAGED_BY
from kubescribe.controller.streams import StreamSpec
from kubescribe.kube.client import ApiError, KubeClient

log = structlog.get_logger(__name__)

NAME = "kubescribe-attribution"
PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
TIMEOUT_SECONDS = 2


def registration(url: str, ca_pem: bytes, streams: Iterable[StreamSpec]) -> dict[str, Any] | None:
    """The ValidatingWebhookConfiguration for the local streams' types; None when none."""
    types = sorted(
        {(s.rtype.group, s.rtype.version, s.rtype.resource) for s in streams if not s.cluster}
    )
    if not types:
        return None
    rules = [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "resources": [resource],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "scope": "*",
        }
        for group, version, resource in types
    ]
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": NAME, "labels": dict(MANAGED_BY)},
        "webhooks": [
            {
                "name": "changes.attribution.kubescribe.io",
                "clientConfig": {
                    **client_config(url),
                    "caBundle": base64.b64encode(ca_pem).decode(),
                },
                "rules": rules,
                "failurePolicy": "Ignore",
                "sideEffects": "None",
                "timeoutSeconds": TIMEOUT_SECONDS,
                "admissionReviewVersions": ["v1"],
                "matchPolicy": "Equivalent",
            }
        ],
    }


_SERVICE = re.compile(r"^https://([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?::(\d+))?(/.*)?$")


def client_config(url: str) -> dict[str, Any]:
    """`https://<name>.<namespace>.svc[:port]/path` becomes a Service reference (the API server
    reaches Services without cluster DNS); any other URL is used as it is."""
    found = _SERVICE.match(url)
    if found is None:
        return {"url": url}
    name, namespace, port, path = found.groups()
    return {
        "service": {
            "name": name,
            "namespace": namespace,
            "port": int(port or 443),
            "path": path or "/",
        }
    }


class ChangeWebhook:
    """`ca_pem` is asked at each sync: operator-managed certificates change the bundle."""

    def __init__(self, client: KubeClient, url: str, ca_pem: Callable[[], bytes]) -> None:
        self.client = client
        self.url = url
        self.ca_pem = ca_pem
        self._applied: str | None = None

    async def sync(self, streams: Iterable[StreamSpec]) -> None:
        wanted = registration(self.url, self.ca_pem(), streams)
        fingerprint = json.dumps(wanted, sort_keys=True)
        if fingerprint == self._applied:
            return
        try:
            current = await self._get()
            if wanted is None:
                if current is not None:
                    await self.client.request("DELETE", f"{PATH}/{NAME}")
            elif current is None:
                await self.client.request("POST", PATH, body=wanted)
            else:
                body = {**wanted, "metadata": {**wanted["metadata"], **_version(current)}}
                await self.client.request("PUT", f"{PATH}/{NAME}", body=body)
        except ApiError as exc:  # 409: written meanwhile; try again next reconcile
            log.warning("webhook.sync_failed", status=exc.status, error=exc.message)
            return
        self._applied = fingerprint
        log.info("webhook.registered", types=len(wanted["webhooks"][0]["rules"]) if wanted else 0)

    async def _get(self) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self.client.get(f"{PATH}/{NAME}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return found


def _version(obj: dict[str, Any]) -> dict[str, str]:
    return {"resourceVersion": str(obj["metadata"]["resourceVersion"])}
