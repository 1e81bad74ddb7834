"""Delivery to Alertmanager's API (docs/alerts.md): the alerts of a message POSTed to
`<url>/api/v2/alerts`, with a bearer token from a Secret of the Alert's own namespace."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from kubescribe.api.alert import SecretKeyReference
from kubescribe.controller.alert_delivery import Resolve, post, secret_text, secret_value
from kubescribe.kube.client import KubeClient
from kubescribe.kube.informer import ObjectKey


@dataclass(frozen=True)
class AlertmanagerMessage:
    route: ObjectKey
    url: str  # the endpoint: mirror.alertmanager.endpoint
    token_ref: SecretKeyReference | None
    body: bytes  # mirror/alertmanager.py
    count: int
    attempts: int = 8  # spec.delivery
    backoff_cap: float = 60.0

    async def send(
        self, session: aiohttp.ClientSession, client: KubeClient, resolve: Resolve
    ) -> None:
        headers = {}
        if self.token_ref is not None:
            namespace, ref = self.route[0], self.token_ref
            raw = await secret_value(client, namespace, ref.name, ref.key)
            headers["Authorization"] = "Bearer " + secret_text(raw, namespace, ref.name, ref.key)
        await post(session, self.url, self.body, headers, resolve)
