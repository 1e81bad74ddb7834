"""Join observed changes to audit facts: who made this change?

Tiers, per observed change (first hit wins; the outcome is counted by tier):

- DELETE: `delete` — a delete request for the object's uid (the first one: who asked for the
  delete, also when a controller later removed the last finalizer and the final DELETED event
  has a resourceVersion no request returned); `collection` — a deletecollection over the
  object's group/resource in its namespace (or all namespaces) whose request window covers the
  moment the delete was observed; then `exact` as below.
- CREATE/UPDATE: `exact` — the fact whose response carried the object's uid and the
  resourceVersion of the watch event (a `/scale` patch answers with the parent's uid and new
  resourceVersion, so it joins here too). Several facts may carry one version (a no-op write
  returns the unchanged version). Facts naming the same author agree. Among facts naming
  different authors, the earliest completed one wins only when it completed before each other
  request was received (those can only have returned a version that already existed);
  otherwise nothing proves who wrote the version: `ambiguous`.
- CREATE/UPDATE, once the route has settled or the grace is over (no exact fact came):
  `named` — the `named` facts (writes whose response was not recorded: requests proxied to an
  extension API server) for the object's name, and for a CREATE the creates in its
  group/resource/namespace that named no object, whose request window covers the moment the
  change was observed; they must all name one author, else `ambiguous` (two users creating
  objects at once never get each other's commits).
- otherwise `unresolved` (None), after waiting at most `grace` seconds from `observed_at`, or
  less once the route has told what came after the change, or went silent
  (`attribution.health`: the watermark and silence of a route; counted in
  `kubescribe_attribution_settled_early_total`).

An ambiguous answer is the sentinel author `UNRESOLVED` itself, not None: contradicting facts
are evidence, and a guess (`inferFromManagedFields`) may only fill in when no fact matched.

Audit only names the author (ground rule 2): nothing here changes what is written.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from kubescribe import metrics
from kubescribe.attribution.admitted import AdmittedAuthors
from kubescribe.attribution.decode import FACT_COLLECTION, FACT_DELETE, FACT_NAMED, Fact
from kubescribe.attribution.facts import (
    FactIndex,
    collection_key,
    created_key,
    delete_key,
    delete_name_key,
    from_record,
    version_key,
    written_key,
)
from kubescribe.attribution.health import RouteWatch
from kubescribe.mirror.authors import UNRESOLVED, Author, ObjectEvent

OUTCOME_EXACT = "exact"
OUTCOME_DELETE = "delete"
OUTCOME_COLLECTION = "collection"
OUTCOME_NAMED = "named"
OUTCOME_AMBIGUOUS = "ambiguous"
OUTCOME_UNRESOLVED = "unresolved"
OUTCOME_ADMITTED = "admitted"


class AuditAuthorResolver:
    """An `AuthorResolver` over the facts of one audit route: the operator's own cluster's, or
    the one an event names (a ClusterProvider's cluster: only its own facts ever match).

    `collection_before`/`collection_after` widen a deletecollection's request window when it
    is compared with the (operator-clock) moment a delete was observed: watch delivery lags,
    and the two clocks may differ a little. `named_before`/`named_after` do the same for
    `named` facts (narrower: a later write by someone else must not overlap).
    """

    def __init__(
        self,
        facts: FactIndex,
        route: str,
        grace: float = 3.0,
        *,
        collection_before: float = 1.0,
        collection_after: float = 5.0,
        named_before: float = 1.0,
        named_after: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        audit: bool = True,
        admitted: AdmittedAuthors | None = None,
        routes: RouteWatch | None = None,
    ) -> None:
        """`audit`: audit facts of `route` can arrive (a receiver runs, or Redis shares them);
        `admitted`: the change admission webhook's facts (the operator's own cluster)."""
        self.facts = facts
        self.route = route
        self.audit = audit
        self.admitted = admitted
        self.routes = routes  # route health: stop waiting for a silent route, or past its mark
        self.unresolved_streak = 0  # changes in a row no source named: a wiring problem
        self.grace = grace
        self.collection_before = collection_before
        self.collection_after = collection_after
        self.named_before = named_before
        self.named_after = named_after
        self.clock = clock
        self.wall = wall

    async def author_of(self, event: ObjectEvent, observed_at: float) -> Author | None:
        """Audit facts first (exact); the admission facts of the operator's own cluster when
        audit has nothing (at once when no audit facts can arrive, else after the grace)."""
        started = self.clock()
        deadline = observed_at + self.grace
        observed_wall = self.wall() - (started - observed_at)
        own = event.route in ("", self.route)
        admitted = self.admitted if own else None
        while True:
            found = self._find(event, observed_wall) if self.audit or not own else None
            if found is not None:
                outcome, fact = found
                author = fact.author if fact else UNRESOLVED
                return self._answer("audit", outcome, started, author)
            remaining = self._remaining(event, deadline, observed_wall, own)
            named = self._named(event, observed_wall) if remaining <= 0 else None
            if named is not None:  # settled: every fact that could name it has come
                outcome, fact = named
                return self._answer("audit", outcome, started, fact.author if fact else UNRESOLVED)
            match = admitted.match(event, observed_wall) if admitted is not None else None
            if match is not None and (not self.audit or remaining <= 0):
                assert admitted is not None
                admitted.use(match, observed_wall)
                outcome = OUTCOME_ADMITTED if match.author else OUTCOME_AMBIGUOUS
                return self._answer("admission", outcome, started, match.author or UNRESOLVED)
            if remaining <= 0:
                return self._answer("none", OUTCOME_UNRESOLVED, started, None)
            if self.audit or not own:
                await self.facts.wait(event.route or self.route, remaining)
            elif admitted is not None:
                await admitted.wait(remaining)
            else:
                return self._answer("none", OUTCOME_UNRESOLVED, started, None)

    def _remaining(
        self, event: ObjectEvent, deadline: float, observed_wall: float, own: bool
    ) -> float:
        """Seconds left to wait for an audit fact: none once the route has settled."""
        remaining = deadline - self.clock()
        if remaining <= 0 or self.routes is None or not (self.audit or not own):
            return remaining
        route = event.route or self.route
        why = self.routes.settled(route, observed_wall)
        if why is None:  # wake when the route would fall silent: no record wakes the wait then
            return min(remaining, self.routes.silent_in(route) + 0.1)
        metrics.ATTRIBUTION_SETTLED.labels(route, why).inc()
        return 0.0

    def _answer(
        self, source: str, outcome: str, started: float, author: Author | None
    ) -> Author | None:
        metrics.ATTRIBUTION.labels(outcome).inc()
        metrics.ATTRIBUTION_SOURCES.labels(source, outcome).inc()
        self.unresolved_streak = self.unresolved_streak + 1 if source == "none" else 0
        metrics.ATTRIBUTION_WAIT.observe(self.clock() - started)
        if author is None or author is UNRESOLVED:
            return author  # the sentinel carries no source trailer
        return dataclasses.replace(author, source=source)

    def _find(self, event: ObjectEvent, observed_wall: float) -> tuple[str, Fact | None] | None:
        route = event.route or self.route
        if event.operation == "DELETE":
            fact = self._first(route, delete_key(event.uid)) if event.uid else None
            if fact is None:
                key = delete_name_key(event.group, event.resource, event.namespace, event.name)
                fact = self._first(route, key, lambda f: self._in_window(f, observed_wall))
            if fact is not None and fact.kind == FACT_DELETE:
                by_collection = fact.verb == "deletecollection"
                return (OUTCOME_COLLECTION if by_collection else OUTCOME_DELETE), fact
            for namespace in dict.fromkeys((event.namespace, "")):
                fact = self._first(
                    route,
                    collection_key(event.group, event.resource, namespace),
                    lambda f: f.kind == FACT_COLLECTION and self._in_window(f, observed_wall),
                )
                if fact is not None:
                    return OUTCOME_COLLECTION, fact
        if event.uid and event.resource_version:
            return self._version(route, version_key(event.uid, event.resource_version))
        return None

    def _version(self, route: str, key: str) -> tuple[str, Fact | None] | None:
        """The writer of one object version (see the module docstring), or ambiguous."""
        facts = [f for f in map(from_record, self.facts.find(route, key)) if f is not None]
        if not facts:
            return None
        first = min(facts, key=lambda f: f.completed)
        others = [f for f in facts if (f.author, f.username) != (first.author, first.username)]
        if all(first.completed < f.received for f in others):
            return OUTCOME_EXACT, first
        return OUTCOME_AMBIGUOUS, None

    def _named(self, event: ObjectEvent, observed_wall: float) -> tuple[str, Fact | None] | None:
        """The one author of the `named` facts that may have made this change, or ambiguous."""
        if event.operation not in ("CREATE", "UPDATE"):
            return None
        route = event.route or self.route
        keys = [written_key(event.group, event.resource, event.namespace, event.name)]
        if event.operation == "CREATE":
            keys.append(created_key(event.group, event.resource, event.namespace))
        found = [
            fact
            for key in keys
            for fact in map(from_record, self.facts.find(route, key))
            if fact is not None
            and fact.kind == FACT_NAMED
            and fact.received - self.named_before
            <= observed_wall
            <= fact.completed + self.named_after
        ]
        if not found:
            return None
        if len({(f.author, f.username) for f in found}) == 1:
            return OUTCOME_NAMED, min(found, key=lambda f: f.completed)
        return OUTCOME_AMBIGUOUS, None

    def _first(
        self, route: str, key: str, accept: Callable[[Fact], bool] | None = None
    ) -> Fact | None:
        for record in self.facts.find(route, key):
            fact = from_record(record)
            if fact is not None and (accept is None or accept(fact)):
                return fact
        return None

    def _in_window(self, fact: Fact, observed_wall: float) -> bool:
        start = (fact.received or fact.completed) - self.collection_before
        return start <= observed_wall <= fact.completed + self.collection_after
