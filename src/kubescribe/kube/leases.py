"""coordination.k8s.io/v1 Leases: read, create, and update under optimistic concurrency.

Every write carries the resourceVersion it was based on, so two replicas that race for one
Lease cannot both win: the loser gets `LeaseConflict` and looks again.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from kubescribe.kube.client import ApiError, KubeClient

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


class LeaseConflict(Exception):
    """Someone else wrote the Lease first (409), or it is gone."""


def micro_time(now: dt.datetime | None = None) -> str:
    """A MicroTime as the API server writes it."""
    moment = now or dt.datetime.now(dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaseClient:
    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self._base = LEASES.format(namespace=namespace)

    async def list(self, label_selector: str) -> list[dict[str, Any]]:
        page = await self.client.get(self._base, params={"labelSelector": label_selector})
        return list(page.get("items") or [])

    async def get(self, name: str) -> dict[str, Any] | None:
        try:
            lease: dict[str, Any] = await self.client.get(f"{self._base}/{name}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return lease

    async def create(
        self,
        name: str,
        holder: str,
        duration: float,
        *,
        labels: Mapping[str, str],
        annotations: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        now = micro_time()
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": dict(labels),
                "annotations": dict(annotations or {}),
            },
            "spec": {
                "holderIdentity": holder,
                "leaseDurationSeconds": max(1, round(duration)),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        return await self._write("POST", self._base, body)

    async def hold(self, lease: Mapping[str, Any], holder: str, duration: float) -> dict[str, Any]:
        """Renew (same holder) or take over (another holder) the Lease as it was read."""
        spec = dict(lease.get("spec") or {})
        now = micro_time()
        if spec.get("holderIdentity") != holder:
            spec["acquireTime"] = now
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(
            holderIdentity=holder, renewTime=now, leaseDurationSeconds=max(1, round(duration))
        )
        body = {**lease, "spec": spec}
        return await self._write("PUT", f"{self._base}/{lease['metadata']['name']}", body)

    async def release(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        """Give the Lease up: no holder, so the next owner need not wait for it to expire."""
        spec = {**dict(lease.get("spec") or {}), "holderIdentity": None}
        body = {**lease, "spec": spec}
        return await self._write("PUT", f"{self._base}/{lease['metadata']['name']}", body)

    async def delete(self, name: str) -> None:
        try:
            await self.client.request("DELETE", f"{self._base}/{name}")
        except ApiError as exc:
            if exc.status != 404:
                raise

    async def _write(self, method: str, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        try:
            written: dict[str, Any] = await self.client.request(method, path, body=body)
        except ApiError as exc:
            if exc.status in (404, 409):
                raise LeaseConflict(f"{exc.status} {exc.reason}") from None
            raise
        return written
