"""The backlog of a watch resumed from a saved cursor, and the current states it is checked
against (the rule is `mirror.replay`; this is its I/O).

The horizon is the resourceVersion of a one-item LIST made before the watch opens: a consistent
read, so every event the watch delivers up to it happened before the states read afterwards.
An object's current state is read once per backlog, with a LIST of the stream's collection
filtered to its name and the stream's label selector (an object outside the selector is absent,
and the stream's own `list` permission is all it takes), as of the horizon or later. Past
`LOOKUPS` objects, one paginated LIST reads every state at once: a large backlog costs one
list, not a request per object.
"""

from __future__ import annotations

import time

from kubescribe import metrics
from kubescribe.kube.client import ApiError, KubeClient
from kubescribe.mirror import replay

ObjectKey = tuple[str, str]  # (namespace, name)
LOOKUPS = 64  # objects looked up one by one before the whole collection is listed


class Backlog:
    """Decides the events of one resumed watch up to its horizon; counts what it decided."""

    def __init__(
        self,
        client: KubeClient,
        path: str,
        horizon: str,
        *,
        gvr: str = "",
        label_selector: str | None = None,
        page_size: int = 500,
    ) -> None:
        self.client = client
        self.gvr = gvr
        self.path = path
        self.horizon = horizon
        self.label_selector = label_selector
        self.page_size = page_size
        self.applied = 0
        self.stale = 0
        self.lookups = 0
        self.listed = False
        self.seconds = 0.0  # spent reading current states
        self._states: dict[ObjectKey, str | None] = {}
        self._all: dict[ObjectKey, str] | None = None

    @classmethod
    async def open(
        cls,
        client: KubeClient,
        path: str,
        cursor: str,
        *,
        gvr: str = "",
        label_selector: str | None = None,
        page_size: int = 500,
    ) -> Backlog | None:
        """The backlog of a watch from `cursor`; None when it has none to check."""
        page = await client.get(path, params={"limit": "1"}, timeout=60)
        until = replay.horizon(cursor, str((page.get("metadata") or {}).get("resourceVersion")))
        if until is None:
            return None
        return cls(client, path, until, gvr=gvr, label_selector=label_selector, page_size=page_size)

    def covers(self, rv: str) -> bool:
        """Whether an event at `rv` is in the backlog (past it, every event is live)."""
        return replay.in_backlog(rv, self.horizon)

    def reached(self, bookmark: str) -> bool:
        return replay.reached(bookmark, self.horizon)

    async def applies(self, event_type: str, key: ObjectKey, rv: str) -> bool:
        """Whether a backlog event is still its object's current state (else it is stale)."""
        current = replay.is_current(event_type, rv, await self._state(key))
        if current:
            self.applied += 1
        else:
            self.stale += 1
        metrics.BACKLOG_EVENTS.labels(self.gvr, "applied" if current else "stale").inc()
        return current

    async def _state(self, key: ObjectKey) -> str | None:
        if self._all is not None:
            return self._all.get(key)
        if key in self._states:
            return self._states[key]
        started = time.perf_counter()
        try:
            return await self._read(key)
        finally:
            self.seconds += time.perf_counter() - started

    async def _read(self, key: ObjectKey) -> str | None:
        if self.lookups < LOOKUPS:
            try:
                return await self._look_up(key)
            except ApiError as exc:
                if exc.status != 400:
                    raise  # the watch restarts from the event before and reads again
                self.lookups = LOOKUPS  # an API without field selectors: list it all
        metrics.BACKLOG_LOOKUPS.labels(self.gvr, "list").inc()
        self._all = await self._list_all()
        self.listed = True
        return self._all.get(key)

    async def _look_up(self, key: ObjectKey) -> str | None:
        metrics.BACKLOG_LOOKUPS.labels(self.gvr, "object").inc()
        self.lookups += 1
        namespace, name = key
        fields = f"metadata.name={name}"
        if namespace:
            fields += f",metadata.namespace={namespace}"
        params = {"fieldSelector": fields, **self._not_older()}
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        page = await self.client.get(self.path, params=params, timeout=60)
        state = replay.states(page.get("items") or []).get(key)
        self._states[key] = state
        return state

    async def _list_all(self) -> dict[ObjectKey, str]:
        found: dict[ObjectKey, str] = {}
        params: dict[str, str] = {"limit": str(self.page_size), **self._not_older()}
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        while True:
            page = await self.client.get(self.path, params=params, timeout=120)
            found.update(replay.states(page.get("items") or []))
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return found
            params = {k: v for k, v in params.items() if not k.startswith("resourceVersion")}
            params["continue"] = token  # the pages of one list (a version goes with the first)

    def _not_older(self) -> dict[str, str]:
        """States as of the horizon or later are all the rule needs: the API server answers
        from its watch cache, without a quorum read of etcd per object."""
        return {"resourceVersion": self.horizon, "resourceVersionMatch": "NotOlderThan"}
