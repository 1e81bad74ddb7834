"""Delivery to a Slack-compatible incoming webhook (docs/alerts.md). Its URL carries a token, so
it comes from a key of a Secret in the Alert's own namespace, read before every attempt, checked
by the receiver URL policy and never repeated in a status or a log."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from kubescribe.api.alert import SecretKeyReference
from kubescribe.controller.alert_delivery import Resolve, post, secret_text, secret_value
from kubescribe.kube.client import KubeClient
from kubescribe.kube.informer import ObjectKey


@dataclass(frozen=True)
class SlackMessage:
    route: ObjectKey
    url_ref: SecretKeyReference
    body: bytes  # mirror/slack.py
    count: int
    attempts: int = 8  # spec.delivery
    backoff_cap: float = 60.0

    async def send(
        self, session: aiohttp.ClientSession, client: KubeClient, resolve: Resolve
    ) -> None:
        namespace, ref = self.route[0], self.url_ref
        raw = await secret_value(client, namespace, ref.name, ref.key)
        url = secret_text(raw, namespace, ref.name, ref.key)
        shown = f"the URL in Secret {namespace}/{ref.name}"
        await post(session, url, self.body, {}, resolve, shown=shown)
