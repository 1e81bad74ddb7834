"""Who created each CommitRequest, as recorded by the validating admission webhook.

Records live in the fact index under a reserved route (audit routes are DNS labels, so they
never collide with it), with a bound of their own. A CommitRequest uid is created once: records
for one uid that name different authors cannot all be true, so none is believed (the request
then has no known requester).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from kubescribe.attribution.facts import FactIndex, Record
from kubescribe.mirror.authors import Author

ROUTE = "@commitrequests"


def _uid_key(uid: str) -> str:
    return f"cr-uid/{uid}"


def _name_key(namespace: str, name: str) -> str:
    return f"cr-name/{namespace}/{name}"


class RecordedRequestAuthors:
    """Records requesters and answers `author_of_request` for the CommitRequest controller
    (implements `kubescribe.mirror.authors.CommitRequestAuthors`).

    `grace` bounds how long a lookup waits for a record still on its way (with Redis, a
    review answered by another replica reaches this one a moment later).
    """

    def __init__(
        self,
        facts: FactIndex,
        grace: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.facts = facts
        self.grace = grace
        self.clock = clock

    async def record(
        self, namespace: str, name: str, uid: str, author: Author, groups: tuple[str, ...] = ()
    ) -> None:
        keys = [_name_key(namespace, name)] + ([_uid_key(uid)] if uid else [])
        record = {
            "namespace": namespace,
            "object": name,
            "uid": uid,
            "name": author.name,
            "email": author.email,
            "user": author.user,
            "groups": json.dumps(list(groups)),  # records hold strings
        }
        await self.facts.add(ROUTE, [(keys, record)])

    async def author_of_request(self, namespace: str, name: str, uid: str) -> Author | None:
        """The creator of the CommitRequest (by uid; by namespace/name when the uid was not
        recorded); None when no review was recorded within the grace period."""
        deadline = self.clock() + self.grace
        while True:
            found = self._find(namespace, name, uid)
            if found is not None:
                return found
            remaining = deadline - self.clock()
            if remaining <= 0:
                return None
            await self.facts.wait(ROUTE, remaining)

    async def groups_of_request(self, namespace: str, name: str, uid: str) -> tuple[str, ...]:
        """The groups of the recorded creator (at once: asked after `author_of_request`)."""
        record = self._record(namespace, name, uid)
        try:
            groups = json.loads(record.get("groups") or "[]") if record is not None else []
        except ValueError:
            return ()
        return tuple(g for g in groups if isinstance(g, str)) if isinstance(groups, list) else ()

    def _find(self, namespace: str, name: str, uid: str) -> Author | None:
        record = self._record(namespace, name, uid)
        return None if record is None else _author(record)

    def _record(self, namespace: str, name: str, uid: str) -> Record | None:
        if uid:
            records = self.facts.find(ROUTE, _uid_key(uid))
            if records:
                # Records of one uid that name different users cannot all be true.
                return records[-1] if len({_author(r) for r in records}) == 1 else None
        candidates = [
            r
            for r in self.facts.find(ROUTE, _name_key(namespace, name))
            if not uid or not r.get("uid") or r.get("uid") == uid
        ]
        return candidates[-1] if candidates else None


def _author(record: Record) -> Author | None:
    name, email, user = record.get("name"), record.get("email"), record.get("user")
    if not (name and email):
        return None
    return Author(name, email, user=user if isinstance(user, str) else "")
