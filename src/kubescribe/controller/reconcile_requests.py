"""`kubescribe.io/reconcile-at`: ask for a reconcile now, as Flux's `reconcile.fluxcd.io/
requestedAt` does. A new value on a GitProvider reads its Secrets again and probes the remote at
once; on a GitTarget it lists every stream of the target afresh (a snapshot, not a resume).
`status.lastHandledReconcileAt` then holds the value the operator acted on."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kubescribe.controller.plan import ObjKey
from kubescribe.mirror.changes import TargetKey

ANNOTATION = "kubescribe.io/reconcile-at"
MAX_VALUE = 256  # a timestamp or a token; longer values are not acted on


def requested(obj: Mapping[str, Any]) -> str:
    """The annotation's value ('' when absent, empty or too long)."""
    value = ((obj.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION)
    return value if isinstance(value, str) and 0 < len(value) <= MAX_VALUE else ""


class ReconcileRequests:
    """Which requests were acted on, per kind and object (each replica keeps its own: the one
    that writes a status reports what it did)."""

    def __init__(self) -> None:
        self._handled: dict[tuple[str, ObjKey], str] = {}
        self._again: set[TargetKey] = set()

    def again(self, target: TargetKey) -> None:
        """List a target afresh at the next reconcile, as if asked (the operator's own
        request: its kustomize root is back, and what changed while it was held is written)."""
        self._again.add(target)

    def take(
        self,
        providers: Mapping[ObjKey, Mapping[str, Any]],
        targets: Mapping[ObjKey, Mapping[str, Any]],
        reprobe: Callable[[ObjKey], None],
    ) -> list[TargetKey]:
        """Act on the new requests: `reprobe` each provider asked; the targets to list afresh
        (against the remote's tip as it is now)."""
        for key in self._new("GitProvider", providers):
            reprobe(key)
        due = [TargetKey(*key) for key in self._new("GitTarget", targets)]
        due += sorted(self._again - set(due))
        self._again.clear()
        return due

    def status(self, kind: str, key: ObjKey) -> dict[str, str]:
        """The status field saying which request was acted on (none before the first)."""
        value = self._handled.get((kind, key))
        return {"lastHandledReconcileAt": value} if value else {}

    def _new(self, kind: str, objects: Mapping[ObjKey, Mapping[str, Any]]) -> list[ObjKey]:
        due = []
        for key, obj in objects.items():
            value = requested(obj)
            if value and self._handled.get((kind, key)) != value:
                self._handled[(kind, key)] = value
                due.append(key)
        return due
