"""Status of kubescribe objects: conditions from the plan and the branch workers, patched only
when something changed, with a Kubernetes Event on every Ready transition."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from kubescribe.api import conditions as c
from kubescribe.api.schema import ConditionStatus
from kubescribe.controller.events import EventRecorder
from kubescribe.git.records import Refusal
from kubescribe.kube.client import ApiError, KubeClient

log = structlog.get_logger(__name__)
GROUP_VERSION = "kubescribe.io/v1alpha1"


@dataclass(frozen=True)
class Cond:
    type: str
    status: ConditionStatus
    reason: str
    message: str


def documents_condition(failing: Sequence[Refusal]) -> Cond:
    """`DocumentsWritten`: False, with the first one's reason, while documents cannot be
    written (a path Git refuses, a conflict, a render or encryption refusal)."""
    failing = [f for f in failing if f.reason not in c.RENDER_REASONS]
    if not failing:
        return Cond(c.DOCUMENTS_WRITTEN, "True", c.DOCUMENTS_WRITTEN, "Every document is written")
    reason = failing[0].reason
    first = "; ".join(f"{f.identity.kind} {f.identity.ref}: {f.message}" for f in failing[:_LISTED])
    more = f" (and {len(failing) - _LISTED} more)" if len(failing) > _LISTED else ""
    text = f"{len(failing)} document(s) not written: {first}{more}"
    return Cond(c.DOCUMENTS_WRITTEN, "False", reason, text)


_LISTED = 3  # documents named in the message
NO_KUSTOMIZE = (
    "no kustomize binary in the operator (set --kustomize, or use an image with kustomize: "
    "docs/install.md)"
)


def render_condition(
    kustomization: str,
    failing: Sequence[Refusal],
    check_unavailable: bool = False,
) -> Cond:
    """`RenderMatchesLive` of a target written through `kustomization`: False while an object
    is not rendered as live (a construct not written through, or a render check mismatch);
    Unknown when nothing says so but the render check asked for cannot run (no kustomize
    binary): True would claim a check that never ran. Writes go on either way."""
    failing = [f for f in failing if f.reason in c.RENDER_REASONS]
    if not failing and check_unavailable:
        return Cond(
            c.RENDER_MATCHES_LIVE,
            "Unknown",
            c.RENDER_CHECK_UNAVAILABLE,
            f"Changes are written through {kustomization}, but the render check cannot run: "
            f"{NO_KUSTOMIZE}",
        )
    if not failing:
        return Cond(
            c.RENDER_MATCHES_LIVE,
            "True",
            c.RENDER_MATCHES_LIVE,
            f"Changes are written through {kustomization}",
        )
    identity, reason, message = failing[0]
    more = f" (and {len(failing) - 1} more)" if len(failing) > 1 else ""
    text = f"{identity.kind} {identity.ref}: {message}{more}"
    return Cond(c.RENDER_MATCHES_LIVE, "False", reason, text)


def rfc3339(timestamp: float) -> str:
    """A Unix timestamp as Kubernetes writes times (second precision, UTC, `Z`)."""
    return dt.datetime.fromtimestamp(timestamp, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_rfc3339() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def kstatus(domain: Sequence[Cond], *, progressing: str | None) -> list[Cond]:
    """Ready / Reconciling / Stalled from the domain conditions (kstatus conventions).

    The first False domain condition decides Ready; it is Stalled when its reason needs a
    user's change, otherwise the object is still Reconciling."""
    failing = next((d for d in domain if d.status == "False"), None)
    if failing is not None:
        stalled = failing.reason in c.STALLED_REASONS
        return [
            Cond(c.READY, "False", failing.reason, failing.message),
            Cond(
                c.STALLED,
                "True" if stalled else "False",
                failing.reason if stalled else c.OK,
                failing.message if stalled else "",
            ),
            Cond(
                c.RECONCILING,
                "False" if stalled else "True",
                c.OK if stalled else failing.reason,
                "" if stalled else failing.message,
            ),
        ]
    if progressing:
        return [
            Cond(c.READY, "Unknown", c.PROGRESSING, progressing),
            Cond(c.STALLED, "False", c.OK, ""),
            Cond(c.RECONCILING, "True", c.PROGRESSING, progressing),
        ]
    return [
        Cond(c.READY, "True", c.READY, "Ready"),
        Cond(c.STALLED, "False", c.OK, ""),
        Cond(c.RECONCILING, "False", c.OK, ""),
    ]


def status_path(plural: str, namespace: str, name: str) -> str:
    if namespace:
        return f"/apis/{GROUP_VERSION}/namespaces/{namespace}/{plural}/{name}/status"
    return f"/apis/{GROUP_VERSION}/{plural}/{name}/status"


def build_status(
    current: Mapping[str, Any], conds: Sequence[Cond], generation: int, extra: Mapping[str, Any]
) -> dict[str, Any]:
    now = now_rfc3339()
    conditions: list[dict[str, Any]] = list(current.get("conditions") or [])
    for cond in conds:
        conditions = c.set_condition(
            conditions,
            cond.type,
            cond.status,
            cond.reason,
            cond.message,
            generation,
            now,
        )
    wanted = {cond.type for cond in conds}
    conditions = [x for x in conditions if x["type"] in wanted]
    return {**extra, "observedGeneration": generation, "conditions": conditions}


def _ready(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    return next((x for x in status.get("conditions") or [] if x.get("type") == c.READY), None)


class StatusWriter:
    """Patches `.status` when it differs from what was last written or read."""

    def __init__(self, client: KubeClient, events: EventRecorder | None = None) -> None:
        self.client = client
        self.events = events or EventRecorder(client)

    async def write(
        self,
        obj: Mapping[str, Any],
        plural: str,
        conds: Sequence[Cond],
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        meta = obj["metadata"]
        namespace, name = meta.get("namespace") or "", meta["name"]
        current = obj.get("status") or {}
        status = build_status(current, conds, int(meta.get("generation") or 0), extra or {})
        if _comparable(status) == _comparable(current):
            return
        try:
            await self.client.merge_patch(status_path(plural, namespace, name), {"status": status})
        except ApiError as exc:
            if exc.status != 404:
                log.warning(
                    "status.patch_failed", kind=obj.get("kind"), name=name, error=exc.message
                )
            return
        before, after = _ready(current), _ready(status)
        if after and (before is None or before.get("status") != after["status"]):
            await self._event(obj, after)

    async def _event(self, obj: Mapping[str, Any], ready: Mapping[str, Any]) -> None:
        await self.events.record(
            obj,
            "Normal" if ready["status"] == "True" else "Warning",
            ready["reason"],
            ready["message"] or ready["reason"],
            "Reconcile",
        )


def _comparable(status: Mapping[str, Any]) -> Any:
    conds = sorted(
        (
            (x["type"], x["status"], x["reason"], x["message"], x.get("observedGeneration"))
            for x in status.get("conditions") or []
        ),
    )
    # a None removes a field (merge patch): the same as a status without it
    rest = {k: v for k, v in status.items() if k != "conditions" and v is not None}
    return conds, rest
