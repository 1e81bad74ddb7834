"""A thin async Kubernetes client on aiohttp.

We own the request and watch loops (see the design brief): the generated client's watch helper
retries 410 only once and can hang, and its connection pool stalls past 100 watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from kubescribe.kube import config
from kubescribe.net.addresses import network_policy, refusal

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class ApiError(Exception):
    """A non-2xx answer from the API server, with its Status reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class AddressRefused(OSError):
    """An untrusted API server's name resolved to an address the address policy refuses."""


class GuardedResolver(AbstractResolver):
    """Resolves through `inner` and refuses the whole answer when any address is one the
    address policy refuses, at every new connection (a name re-pointed after the kubeconfig
    was read is caught at the next one). Literal addresses never reach a resolver; they are
    checked when the kubeconfig is read."""

    def __init__(self, inner: AbstractResolver | None = None) -> None:
        self._inner = inner or DefaultResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        answers = await self._inner.resolve(host, port, family)
        policy = network_policy()
        for answer in answers:
            why = refusal(answer["host"], policy)
            if why is not None:
                raise AddressRefused(f"{host} resolves to {answer['host']}, which {why}")
        return answers

    async def close(self) -> None:
        await self._inner.close()


class RateLimit:
    """A token bucket: `qps` requests per second on average, `burst` at once."""

    def __init__(self, qps: float, burst: int) -> None:
        self.qps, self.burst = qps, burst
        self._tokens = float(burst)
        self._at = time.monotonic()
        self._lock = asyncio.Lock()

    async def take(self) -> None:
        async with self._lock:
            now = time.monotonic()
            self._tokens = min(self.burst, self._tokens + (now - self._at) * self.qps)
            self._at = now
            if self._tokens < 1:
                await asyncio.sleep((1 - self._tokens) / self.qps)
                self._at = time.monotonic()
                self._tokens = 1.0
            self._tokens -= 1


class KubeClient:
    """JSON requests and watch streams against one API server (requests, and the start of each
    watch, under `limit` when given). An untrusted connection (a ClusterProvider's) resolves
    through `GuardedResolver` (`resolver` replaces its inner resolver, for tests) and follows
    no redirects."""

    def __init__(
        self,
        connection: config.Connection,
        limit: RateLimit | None = None,
        *,
        resolver: AbstractResolver | None = None,
    ) -> None:
        self.host = connection.host
        self._connection = connection
        self._limit = limit
        self._redirects = not connection.untrusted
        guard = GuardedResolver(resolver) if connection.untrusted else None
        connector = aiohttp.TCPConnector(limit=0, ssl=connection.ssl, resolver=guard)
        self._session = aiohttp.ClientSession(connector=connector)

    @classmethod
    async def connect(
        cls, kubeconfig: str | os.PathLike[str] | None = None, context: str | None = None
    ) -> KubeClient:
        """As kubectl: `kubeconfig` alone when given, else $KUBECONFIG's files merged, else
        ~/.kube/config, else the in-cluster service account (`config.resolve`)."""
        return cls(await config.connect_settings(kubeconfig, context))

    async def _headers(self, accept: str) -> dict[str, str]:
        headers = {"Accept": accept}
        authorization = await self._connection.authorization()
        if authorization:
            headers["Authorization"] = authorization
        return headers

    async def close(self) -> None:
        await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = JSON,
        accept: str = JSON,
        timeout: float = 30,
    ) -> Any:
        if self._limit is not None:
            await self._limit.take()
        data = None if body is None else json.dumps(body)
        for attempt in (1, 2):
            headers = await self._headers(accept)
            if body is not None:
                headers["Content-Type"] = content_type
            async with self._session.request(
                method,
                self.host + path,
                params=params,
                data=data,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=timeout),
                allow_redirects=self._redirects,
            ) as resp:
                payload = await resp.read()
                # As client-go: credentials the server refuses are fetched again once (a
                # rotated token file, an exec plugin's revoked token).
                if (
                    resp.status == 401
                    and attempt == 1
                    and self._connection.rejected(headers.get("Authorization"))
                ):
                    continue
                if resp.status >= 300:
                    raise _api_error(resp.status, payload)
                return json.loads(payload) if payload else None
        raise AssertionError("unreachable")  # pragma: no cover

    async def get(self, path: str, **kwargs: Any) -> Any:
        return await self.request("GET", path, **kwargs)

    async def get_text(self, path: str, timeout: float = 10) -> str:
        """A GET whose answer is not JSON (metrics and health through the API server's proxy)."""
        if self._limit is not None:
            await self._limit.take()
        async with self._session.get(
            self.host + path,
            headers=self._headers("*/*"),
            timeout=aiohttp.ClientTimeout(total=timeout),
            allow_redirects=self._redirects,
        ) as resp:
            payload = await resp.read()
            if resp.status >= 300:
                raise _api_error(resp.status, payload)
            return payload.decode("utf-8", "replace")

    async def merge_patch(self, path: str, body: Any) -> Any:
        return await self.request("PATCH", path, body=body, content_type=MERGE_PATCH)

    async def watch(
        self, path: str, params: Mapping[str, str], *, idle_timeout: float
    ) -> AsyncIterator[dict[str, Any]]:
        """Yield watch events (one JSON object per line). A stream silent for `idle_timeout`
        seconds raises `asyncio.TimeoutError`-compatible `aiohttp.ServerTimeoutError`."""
        if self._limit is not None:
            await self._limit.take()
        headers = await self._headers(JSON)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=idle_timeout)
        async with self._session.get(
            self.host + path,
            params=params,
            headers=headers,
            timeout=timeout,
            allow_redirects=self._redirects,
        ) as resp:
            if resp.status >= 300:
                if resp.status == 401:
                    self._connection.rejected(headers.get("Authorization"))  # the next try
                raise _api_error(resp.status, await resp.read())
            if resp.connection is not None and resp.connection.transport is not None:
                _keep_alive(resp.connection.transport.get_extra_info("socket"))
            # Split lines ourselves: aiohttp caps a line at 128 KiB, objects reach 1.5 MiB.
            buffer = b""
            async for chunk in resp.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield json.loads(line)


# A watch may rightly stay silent until the server ends it; a peer that vanished (a node or a
# network gone without a FIN) is found by TCP keepalive instead: about 30 s + 3 x 10 s.
_KEEPALIVE = [(socket.SO_KEEPALIVE, socket.SOL_SOCKET, 1)]
_KEEPALIVE += [
    (getattr(socket, name), socket.IPPROTO_TCP, value)
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3))
    if hasattr(socket, name)
]


def _keep_alive(sock: socket.socket | None) -> None:
    if sock is None:
        return
    for option, level, value in _KEEPALIVE:
        with contextlib.suppress(OSError):
            sock.setsockopt(level, option, value)


def _api_error(status: int, payload: bytes) -> ApiError:
    try:
        doc = json.loads(payload)
        return ApiError(status, str(doc.get("reason", "")), str(doc.get("message", "")))
    except (ValueError, AttributeError):  # not JSON, or JSON that is not a Status
        return ApiError(status, "", payload[:200].decode(errors="replace"))
