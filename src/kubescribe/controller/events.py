"""Kubernetes Events on kubescribe objects (core/v1, as `kubectl describe` shows them)."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping
from typing import Any

import structlog

from kubescribe.kube.client import ApiError, KubeClient

log = structlog.get_logger(__name__)
GROUP_VERSION = "kubescribe.io/v1alpha1"
MESSAGE_MAX = 1024  # what events.k8s.io keeps of a note; longer ones are cut with "…"
_IN_FLIGHT_MAX = 256  # events posted and not yet answered; more are dropped (and logged)


class EventRecorder:
    """Posts Events; `post` is for synchronous callers (fire and forget, bounded)."""

    def __init__(self, client: KubeClient, instance: str = "") -> None:
        self.client = client
        self.instance = instance or "kubescribe"
        self._in_flight: set[asyncio.Task[None]] = set()

    def post(
        self, obj: Mapping[str, Any], type_: str, reason: str, message: str, action: str
    ) -> None:
        if len(self._in_flight) >= _IN_FLIGHT_MAX:
            log.warning("event.dropped", reason=reason, name=obj["metadata"].get("name"))
            return
        task = asyncio.get_running_loop().create_task(
            self.record(obj, type_, reason, message, action)
        )
        self._in_flight.add(task)
        task.add_done_callback(self._in_flight.discard)

    async def record(
        self, obj: Mapping[str, Any], type_: str, reason: str, message: str, action: str
    ) -> None:
        meta = obj["metadata"]
        namespace = meta.get("namespace") or "default"
        now = dt.datetime.now(dt.UTC)
        if len(message) > MESSAGE_MAX:
            message = message[: MESSAGE_MAX - 1] + "…"
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion") or GROUP_VERSION,
                "kind": obj.get("kind"),
                "name": meta["name"],
                "namespace": meta.get("namespace") or "",
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message or reason,
            "type": type_,
            "source": {"component": "kubescribe"},
            "firstTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "lastTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "eventTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "reportingComponent": "kubescribe",
            "reportingInstance": self.instance,
            "action": action,
            "count": 1,
        }
        try:
            await self.client.request("POST", f"/api/v1/namespaces/{namespace}/events", body=event)
        except (ApiError, OSError) as exc:
            log.debug("event.failed", reason=reason, error=str(exc))
