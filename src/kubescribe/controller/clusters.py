"""ClusterProviders at run time: a client, reachability and discovery per remote cluster.

Each valid ClusterProvider gets a task that reads its kubeconfig Secret (direct GET, again every
`interval`), builds a client under the untrusted-kubeconfig rules and the provider's QPS/burst,
asks the API server for `/version`, and discovers its types (again every `discovery_interval`).

A cluster that stops answering keeps its last discovery: its streams stay wanted and retry, no
snapshot completes, so nothing is swept while it is away; it is reported in the
ClusterProvider's `SourceClusterReachable` condition and on the GitTargets that mirror it.

The server is held to the address policy of Git URLs (`kubescribe.net.addresses`): its literal
host when the kubeconfig is read, and every address its name resolves to at every new
connection (`kube.client.GuardedResolver`); a refusal is `ClusterAddressRefused`. Whatever the
server answers stays out of status: a failure is described in fixed words (the details go to
the log), so a ClusterProvider cannot be used to read what some address serves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import structlog

from kubescribe.api import conditions as c
from kubescribe.api.schema import ConditionStatus
from kubescribe.attribution.health import RouteReports
from kubescribe.controller.ownership import secret_data
from kubescribe.controller.plan import ClusterPlan
from kubescribe.controller.status import Cond, kstatus
from kubescribe.kube.client import AddressRefused, ApiError, KubeClient, RateLimit
from kubescribe.kube.config import (
    KubeconfigRefused,
    ServerAddressRefused,
    from_untrusted_kubeconfig,
)
from kubescribe.kube.discovery import Discovered, discover

log = structlog.get_logger(__name__)


@dataclass
class _Cluster:
    spec_json: str
    task: asyncio.Task[None] | None = None
    client: KubeClient | None = None
    secret_version: str = ""
    reachable: Cond = field(
        default_factory=lambda: Cond(
            c.SOURCE_CLUSTER_REACHABLE, "Unknown", c.CONNECTING, "Not reached yet"
        )
    )
    server: str = ""
    version: str = ""
    discovered: list[Discovered] | None = None
    discovered_at: float = -1e9


class ClusterProviders:
    def __init__(
        self,
        client: KubeClient,
        *,
        allow_insecure: bool = False,
        interval: float = 5.0,
        discovery_interval: float = 60.0,
        on_change: Callable[[], None] = lambda: None,
        routes: RouteReports | None = None,
    ) -> None:
        self.client = client  # the operator's own cluster: where the kubeconfig Secrets are
        self.routes = routes  # status.attribution: the health of each cluster's audit route
        self.allow_insecure = allow_insecure
        self.interval = interval
        self.discovery_interval = discovery_interval
        self.on_change = on_change
        self._clusters: dict[str, _Cluster] = {}

    def sync(self, plans: Mapping[str, ClusterPlan]) -> None:
        valid = {n: p for n, p in plans.items() if p.problem is None and p.spec is not None}
        for name in [n for n in self._clusters if n not in valid]:
            self._drop(name)
        for name, plan in valid.items():
            assert plan.spec is not None
            spec_json = plan.spec.model_dump_json()
            current = self._clusters.get(name)
            if current is not None and current.spec_json == spec_json:
                continue
            if current is not None:
                self._drop(name)
            state = self._clusters[name] = _Cluster(spec_json)
            state.task = asyncio.create_task(self._follow(name, plan), name=f"cluster {name}")

    def client_of(self, name: str) -> KubeClient | None:
        state = self._clusters.get(name)
        return state.client if state is not None and state.discovered is not None else None

    def discovered(self) -> dict[str, list[Discovered]]:
        return {n: s.discovered for n, s in self._clusters.items() if s.discovered is not None}

    def reachable(self, name: str) -> Cond | None:
        state = self._clusters.get(name)
        return state.reachable if state is not None else None

    def status(self, plan: ClusterPlan) -> tuple[list[Cond], dict[str, Any]]:
        if plan.problem is not None:
            validated = Cond(c.VALIDATED, "False", plan.problem.reason, plan.problem.message)
            return [validated, *kstatus([validated], progressing=None)], {}
        state = self._clusters.get(plan.name)
        domain = [Cond(c.VALIDATED, "True", c.VALIDATED, "Spec is valid")]
        extra: dict[str, Any] = {}
        if state is not None:
            domain.append(state.reachable)
            if state.server:
                extra["server"] = state.server
            if state.version:
                extra["serverVersion"] = state.version
        route = plan.spec.audit_route if plan.spec is not None else None
        if route and self.routes is not None and self.routes.audit:
            extra["attribution"] = self.routes.status((route,))
        return domain + kstatus(domain, progressing=None), extra

    async def close(self) -> None:
        for name in list(self._clusters):
            self._drop(name)

    def _drop(self, name: str) -> None:
        state = self._clusters.pop(name, None)
        if state is None:
            return
        if state.task is not None:
            state.task.cancel()
        if state.client is not None:
            asyncio.get_running_loop().create_task(state.client.close())

    # -- one cluster -----------------------------------------------------------------------
    async def _follow(self, name: str, plan: ClusterPlan) -> None:
        state = self._clusters[name]
        while True:
            before = (state.reachable, state.discovered is not None, state.client)
            try:
                await self._refresh(name, plan, state)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never the end of the loop
                log.exception("cluster.refresh_failed", cluster=name)
                self._set(state, "False", c.CLUSTER_UNREACHABLE, f"{type(exc).__name__}")
            if (state.reachable, state.discovered is not None, state.client) != before:
                self.on_change()
            await asyncio.sleep(self.interval)

    async def _refresh(self, name: str, plan: ClusterPlan, state: _Cluster) -> None:
        spec = plan.spec
        assert spec is not None
        ref = spec.kubeconfig_secret_ref
        try:
            secret = await self.client.get(f"/api/v1/namespaces/{ref.namespace}/secrets/{ref.name}")
        except ApiError as exc:
            reason = c.KUBECONFIG_NOT_FOUND if exc.status == 404 else c.CLUSTER_UNREACHABLE
            where = "the operator's cluster" if exc.status != 404 else "it"
            self._set(
                state,
                "False",
                reason,
                f"Secret {ref.namespace}/{ref.name}: {exc.status} {exc.reason} (reading {where})",
            )
            return
        version = str((secret.get("metadata") or {}).get("resourceVersion", ""))
        if version != state.secret_version or state.client is None:
            raw = secret_data(secret).get(ref.key)
            if raw is None:
                self._set(
                    state,
                    "False",
                    c.KUBECONFIG_NOT_FOUND,
                    f"Secret {ref.namespace}/{ref.name} has no key {ref.key!r}",
                )
                return
            try:
                connection = from_untrusted_kubeconfig(
                    raw, spec.context, allow_insecure=self.allow_insecure
                )
            except KubeconfigRefused as exc:
                if isinstance(exc, ServerAddressRefused):
                    self._set(state, "False", c.CLUSTER_ADDRESS_REFUSED, str(exc))
                else:
                    self._set(state, "False", c.KUBECONFIG_REFUSED, f"{exc.reason}: {exc}")
                if state.client is not None:
                    await state.client.close()
                state.client, state.discovered = None, None
                return
            old = state.client
            state.client = KubeClient(connection, RateLimit(spec.qps, spec.burst))
            state.secret_version, state.server = version, connection.host
            if old is not None:
                await old.close()
        assert state.client is not None
        try:
            info = await state.client.get("/version", timeout=5)
            if state.discovered is None or (
                time.monotonic() - state.discovered_at > self.discovery_interval
            ):
                state.discovered = await discover(state.client)
                state.discovered_at = time.monotonic()
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            log.warning("cluster.unreachable", cluster=name, error=str(exc)[:300])
            refused = _address_refusal(exc)
            if refused is not None:
                self._set(state, "False", c.CLUSTER_ADDRESS_REFUSED, str(refused))
            else:
                self._set(state, "False", c.CLUSTER_UNREACHABLE, _unreachable(exc))
            return
        state.version = str(info.get("gitVersion", "") if isinstance(info, dict) else "")[:64]
        self._set(state, "True", c.SOURCE_CLUSTER_REACHABLE, f"Connected to {state.server}")

    @staticmethod
    def _set(state: _Cluster, status: ConditionStatus, reason: str, message: str) -> None:
        state.reachable = Cond(c.SOURCE_CLUSTER_REACHABLE, status, reason, message)


def _address_refusal(exc: BaseException) -> AddressRefused | None:
    """The address policy's refusal behind a failed connection, if that is what it was."""
    if isinstance(exc, AddressRefused):
        return exc
    if isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, AddressRefused):
        return exc.os_error
    return None


def _unreachable(exc: BaseException) -> str:
    """How reaching the server failed, in fixed words: never what the server sent."""
    if isinstance(exc, ApiError):
        meaning = {401: "the credentials were refused", 403: "the identity may not read it"}
        what = meaning.get(exc.status, "not a usable answer")
        return f"The API server answered HTTP {exc.status} to /version or discovery ({what})"
    if isinstance(exc, TimeoutError | aiohttp.ServerTimeoutError):
        return "The API server did not answer in time"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
        return "TLS verification of the API server failed (check certificate-authority-data)"
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return "The API server's name does not resolve"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return "The API server could not be connected to"
    if isinstance(exc, ValueError):
        return "The API server's answer is not a Kubernetes API response"
    return f"The connection to the API server failed ({type(exc).__name__})"
