"""Route health: how much each fact route has told, until when, and whether it went silent.

A route (an audit route, or the change webhook's `@admission`) is *silent* when no record
reached the fact index for `silent_after` seconds (counted from the operator's start while it
never had one). Its *watermark* is the latest completed request its records tell of (an audit
batch carries a mark of its latest event, also when no event became a fact): kube-apiserver
sends a route's events in the order they complete, so a route that told of a request that
completed `margin` seconds after a change was observed has told everything about that change.

The resolver stops waiting out the grace for a change once its route is silent or past the
change (`settled`), and the change gets the fallback author (the unresolved sentinel under
`attributed-author`). Audit only names the author: this decides how long to wait, never what is
written.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubescribe import metrics
from kubescribe.attribution.admitted import ROUTE as ADMISSION_ROUTE
from kubescribe.attribution.facts import FactIndex

SILENT_AFTER = 300.0
WATERMARK_MARGIN = 2.0
SETTLED_SILENT = "silent"
SETTLED_WATERMARK = "watermark"


@dataclass(frozen=True)
class RouteHealth:
    """One route as the status shows it; times are Unix seconds, 0.0 for none yet."""

    route: str
    facts: int
    last_record: float
    told_until: float
    silent: bool


class RouteWatch:
    """Route health over a fact index (`silent_after` 0: a route is never called silent)."""

    def __init__(
        self,
        facts: FactIndex,
        silent_after: float = SILENT_AFTER,
        margin: float = WATERMARK_MARGIN,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.facts = facts
        self.silent_after = silent_after
        self.margin = margin
        self.wall = wall
        self.started = wall()

    def health(self, route: str) -> RouteHealth:
        facts, last, told = self.facts.tally(route)
        silent = self._silent(last)
        metrics.ROUTE_SILENT.labels(route).set(1 if silent else 0)
        return RouteHealth(route, facts, last, told, silent)

    def settled(self, route: str, observed_wall: float) -> str | None:
        """Why a lookup for a change observed at `observed_wall` need wait no longer (None:
        it may still come)."""
        _, last, told = self.facts.tally(route)
        if told and told >= observed_wall + self.margin:
            return SETTLED_WATERMARK
        if self._silent(last):
            return SETTLED_SILENT
        return None

    def silent_in(self, route: str) -> float:
        """Seconds until `route` is silent unless a record comes (inf: never silent)."""
        if self.silent_after <= 0:
            return float("inf")
        _, last, _ = self.facts.tally(route)
        return max(0.0, max(last, self.started) + self.silent_after - self.wall())

    def _silent(self, last: float) -> bool:
        if self.silent_after <= 0:
            return False
        return self.wall() - max(last, self.started) > self.silent_after


REPORT_PERIOD = 60.0


class RouteReports:
    """The `status.attribution` of GitProviders (the operator's own routes) and ClusterProviders
    (their audit route), refreshed at most every `period` seconds (a status write is itself
    audited, so live counts would rewrite the status after each write), and at once when a
    route falls silent or speaks again."""

    def __init__(
        self,
        watch: RouteWatch,
        own: tuple[str, ...],
        period: float = REPORT_PERIOD,
        clock: Callable[[], float] = time.monotonic,
        *,
        audit: bool = True,
    ) -> None:
        self.watch = watch
        self.own = own
        self.audit = audit  # audit facts can arrive: a ClusterProvider's route is reported
        self.period = period
        self.clock = clock
        self._made: dict[tuple[str, ...], tuple[float, dict[str, Any]]] = {}

    def status(self, routes: tuple[str, ...] | None = None) -> dict[str, Any]:
        """The status of `routes` (the own routes by default)."""
        names = self.own if routes is None else routes
        made = self._made.get(names)
        now = self.clock()
        fresh = attribution_status([self.watch.health(r) for r in names])
        if made is None or now - made[0] >= self.period or _silences(made[1]) != _silences(fresh):
            made = self._made[names] = (now, fresh)  # a route that fell silent shows at once
        return made[1]


def attribution_status(routes: list[RouteHealth]) -> dict[str, Any]:
    """`status.attribution` of some routes (times as RFC 3339, absent when none yet)."""
    shown = []
    for h in routes:
        entry: dict[str, Any] = {
            "name": h.route,
            "source": "admission" if h.route == ADMISSION_ROUTE else "audit",
            "facts": h.facts,
            "silent": h.silent,
        }
        if h.last_record:
            entry["lastFactTime"] = _rfc3339(h.last_record)
        if h.told_until:
            entry["watermark"] = _rfc3339(h.told_until)
        shown.append(entry)
    out: dict[str, Any] = {"facts": sum(h.facts for h in routes), "routes": shown}
    last = max((h.last_record for h in routes), default=0.0)
    if last:
        out["lastFactTime"] = _rfc3339(last)
    return out


def _silences(status: dict[str, Any]) -> list[bool]:
    return [bool(r["silent"]) for r in status["routes"]]


def _rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
