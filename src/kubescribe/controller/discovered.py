"""The types the local API server serves, each kept for a grace period after it was last seen.

A type missing from one discovery (a CRD being replaced, an aggregated API server restarting) is
kept until it has been missing for `grace` seconds; then it is dropped, its streams stop, and the
manager tells each target that watched it that the type is gone (`gone`): its files are swept
under prune Always, counted as retained otherwise. A type seen again is no longer gone.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

import structlog

from kubescribe import metrics
from kubescribe.controller.streams import StreamSpec
from kubescribe.kube.discovery import Discovered
from kubescribe.mirror.changes import Snapshot

GVR = tuple[str, str, str]  # group, version, resource

log = structlog.get_logger(__name__)


class DiscoveredTypes:
    def __init__(self, grace: float) -> None:
        self.grace = grace
        self._seen: dict[GVR, tuple[Discovered, float]] = {}
        self.gone: set[GVR] = set()  # dropped after the grace, not served since

    def items(self) -> list[Discovered]:
        return [item for item, _ in self._seen.values()]

    def refresh(self, found: Iterable[Discovered], now: float) -> bool:
        """Record one discovery at `now`; True while a missing type waits out its grace (check
        again after it)."""
        for item in found:
            rt = item.rtype
            key = (rt.group, rt.version, rt.resource)
            self._seen[key] = (item, now)
            self.gone.discard(key)
        missing = [k for k, (_, seen) in self._seen.items() if seen < now]
        for key in missing:
            if now - self._seen[key][1] > self.grace:
                log.info("discovery.type_dropped", gvr="/".join(key))
                del self._seen[key]
                self.gone.add(key)
        waiting = sum(1 for k in missing if k in self._seen)
        metrics.DISCOVERY_MISSING.set(waiting)
        return waiting > 0

    def sweeps(
        self, stopped: Iterable[StreamSpec], running: Collection[StreamSpec], now: float
    ) -> list[Snapshot]:
        """An empty snapshot for each stopped stream of the operator's own cluster whose type
        is gone, unless another version of it still feeds the target: applied as any snapshot,
        it removes the type's files in one commit (prune Always) or retains them."""
        served = {(s.target, s.rtype.group, s.rtype.kind) for s in running}
        found: dict[tuple[object, ...], Snapshot] = {}
        for spec in stopped:
            rt = spec.rtype
            if spec.cluster or (rt.group, rt.version, rt.resource) not in self.gone:
                continue
            if (spec.target, rt.group, rt.kind) in served:
                continue
            scope = spec.namespace if rt.namespaced else ""
            key = (spec.target, rt.group, rt.kind, scope)
            if key not in found:
                log.info("discovery.type_swept", target=str(spec.target), gvr=rt.gvr)
                found[key] = Snapshot(spec.target, rt, scope, {}, now)
        return list(found.values())
