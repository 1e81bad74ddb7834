"""What the delivery of every Alert receiver shares (docs/alerts.md): the POST under the URL
policy, how its answer is judged, and reading a key of a Secret in the Alert's own namespace.

Before every attempt the URL is checked again with its host resolved (a name re-pointed at a
metadata address is refused then); redirects are not followed; 5xx, 408, 429 and connection
errors are worth retrying, other answers are not.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from collections.abc import Callable, Mapping
from typing import Protocol
from urllib.parse import quote

import aiohttp

from kubescribe.api import conditions as c
from kubescribe.git.urlpolicy import UrlRefused, check_receiver_url
from kubescribe.kube.client import ApiError, KubeClient
from kubescribe.kube.informer import ObjectKey

Resolve = Callable[[str], list[str]]
USER_AGENT = "kubescribe-alerts"


class DeliveryFailed(Exception):
    """A message could not be delivered; `retry` False when trying again cannot help."""

    def __init__(self, reason: str, message: str, *, retry: bool = True) -> None:
        super().__init__(message)
        self.reason, self.message, self.retry = reason, message, retry


class Outgoing(Protocol):
    """A rendered message for one receiver, that knows how to send itself."""

    @property
    def route(self) -> ObjectKey: ...

    @property
    def count(self) -> int: ...

    @property
    def body(self) -> bytes: ...

    @property
    def attempts(self) -> int:
        """Tries in all (spec.delivery.attempts)."""

    @property
    def backoff_cap(self) -> float:
        """The longest wait between two tries (spec.delivery.maxBackoffSeconds)."""

    async def send(
        self, session: aiohttp.ClientSession, client: KubeClient, resolve: Resolve
    ) -> None:
        """Deliver once; raise `DeliveryFailed`."""


async def post(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    resolve: Resolve,
    *,
    shown: str | None = None,
) -> None:
    """POST `body` as JSON to `url` (see the module). `shown` names a URL that is itself a
    credential (a Slack webhook's): error messages say it instead of repeating the URL."""
    loop = asyncio.get_running_loop()
    try:  # again, resolved: a name re-pointed at a refused address is refused now
        await loop.run_in_executor(None, check_receiver_url, url, resolve)
    except UrlRefused as exc:
        raise DeliveryFailed(c.URL_REFUSED, f"{exc.reason}: {exc.message}") from None
    sent = {"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers}
    try:
        async with session.post(url, data=body, headers=sent, allow_redirects=False) as response:
            status = response.status
    except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
        text = str(exc) or type(exc).__name__
        if shown is not None:
            text = text.replace(url, shown)
        raise DeliveryFailed(c.RECEIVER_UNREACHABLE, f"POST failed: {text}") from None
    if 200 <= status < 300:
        return
    retry = status >= 500 or status in (408, 429)
    raise DeliveryFailed(c.RECEIVER_REJECTED, f"the receiver answered {status}", retry=retry)


async def secret_value(client: KubeClient, namespace: str, name: str, key: str) -> bytes:
    """The non-empty value of `key` of the Secret `name` of `namespace` (the Alert's own: the
    name is quoted into that namespace's path, never read as a path of its own)."""
    try:
        secret = await client.get(
            f"/api/v1/namespaces/{quote(namespace, safe='')}/secrets/{quote(name, safe='')}"
        )
    except ApiError as exc:
        reason = c.SECRET_NOT_FOUND if exc.status == 404 else c.SECRET_UNAVAILABLE
        raise DeliveryFailed(reason, f"Secret {namespace}/{name}: {exc.message}") from None
    data = secret.get("data") if isinstance(secret, Mapping) else None
    value = data.get(key) if isinstance(data, Mapping) else None
    try:
        decoded = base64.b64decode(value if isinstance(value, str) else "", validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    if not decoded:
        raise DeliveryFailed(
            c.SECRET_INVALID, f"Secret {namespace}/{name} has no `{key}`", retry=False
        )
    return decoded


def secret_text(value: bytes, namespace: str, name: str, key: str) -> str:
    """A Secret value that is one line of printable ASCII (a URL, a token), without the
    surrounding whitespace a `kubectl create secret --from-file` often leaves."""
    text = value.decode("ascii", errors="replace").strip()
    if not text or any(not " " < ch < "\x7f" for ch in text):
        raise DeliveryFailed(
            c.SECRET_INVALID,
            f"Secret {namespace}/{name}: `{key}` is not one line of printable ASCII",
            retry=False,
        )
    return text
