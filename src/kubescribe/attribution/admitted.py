"""Who wrote each object, as the change admission webhook saw it (managed clusters: no audit).

A validating webhook sees a write before it is stored: there is no resourceVersion yet, and the
write may still be refused by another webhook or by validation. So a fact is joined with the
watch event that follows on what both sides know:

* create/update: group, resource, namespace, name **and the content digest** of the admitted
  object (`kubescribe.mirror.digest`): a refused write has content no stored version has, so it
  never lends its author to someone else's change;
* delete: the object's uid.

Only facts received within `window` seconds before the event was observed count, and for one
key not before the event that last used it (content that comes back, X -> Y -> X, is not
credited to whoever wrote X first). Facts that match and name different authors name nobody
(the sentinel is honest; a guess is not).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubescribe.attribution.decode import FIELD_CAPS, author_from_user
from kubescribe.attribution.facts import FactIndex, Record
from kubescribe.mirror.authors import Author, ObjectEvent
from kubescribe.mirror.digest import content_digest

ROUTE = "@admission"
SOURCE = "admission"


def write_key(group: str, resource: str, namespace: str, name: str, digest: str) -> str:
    return f"adm/{group}/{resource}/{namespace}/{name}#{digest}"


def delete_key(uid: str) -> str:
    return f"adm-del/{uid}"


def admitted_facts(req: Mapping[str, Any], now: float) -> list[tuple[list[str], dict[str, str]]]:
    """The fact of one AdmissionReview request (v1), or nothing for what it cannot key."""
    operation = req.get("operation")
    resource = req.get("resource")
    user = req.get("userInfo")
    if req.get("dryRun") is True or not isinstance(resource, Mapping):
        return []
    username = user.get("username") if isinstance(user, Mapping) else None
    if not isinstance(username, str) or not 0 < len(username) <= FIELD_CAPS["username"]:
        return []
    if req.get("subResource"):
        return []  # /status, /scale: the watch shows them, but their content is not the object's
    group, plural = str(resource.get("group") or ""), str(resource.get("resource") or "")
    namespace, name = str(req.get("namespace") or ""), str(req.get("name") or "")
    extra = user.get("extra") if isinstance(user, Mapping) else None
    author = author_from_user(username, extra if isinstance(extra, Mapping) else None)
    record = {
        "name": author.name,
        "email": author.email,
        "user": username,
        "operation": str(operation),
        "received": repr(now),
    }
    if operation in ("CREATE", "UPDATE"):
        obj = req.get("object")
        if not isinstance(obj, Mapping):
            return []
        meta = obj.get("metadata")
        name = name or (str(meta.get("name") or "") if isinstance(meta, Mapping) else "")
        if not name or len(name) > FIELD_CAPS["name"] or len(namespace) > FIELD_CAPS["namespace"]:
            return []
        return [([write_key(group, plural, namespace, name, content_digest(obj))], record)]
    if operation == "DELETE":
        old = req.get("oldObject")
        meta = old.get("metadata") if isinstance(old, Mapping) else None
        uid = meta.get("uid") if isinstance(meta, Mapping) else None
        if isinstance(uid, str) and 0 < len(uid) <= FIELD_CAPS["uid"]:
            return [([delete_key(uid)], record)]
    return []


@dataclass(frozen=True)
class Match:
    key: str
    author: Author | None  # None: the matching facts disagree


class AdmittedAuthors:
    """The admission half of the resolver (see the module docstring)."""

    def __init__(self, facts: FactIndex, window: float = 30.0, remember: int = 100_000) -> None:
        self.facts = facts
        self.window = window
        self.remember = remember
        self._used: OrderedDict[str, float] = OrderedDict()  # key -> when an event used it

    def match(self, event: ObjectEvent, observed_wall: float) -> Match | None:
        """The facts that match `event` (a lookup; `use` it when it names the author)."""
        if event.operation == "DELETE":
            key = delete_key(event.uid) if event.uid else ""
        elif event.digest:
            key = write_key(event.group, event.resource, event.namespace, event.name, event.digest)
        else:
            key = ""
        if not key:
            return None
        since = max(observed_wall - self.window, self._used.get(key, 0.0))
        found = [a for a in map(_author, self.facts.find(ROUTE, key)) if a and a[1] >= since]
        if not found:
            return None
        # Authors are equal by name and email; two users behind one name name nobody either.
        names = {(author, author.user): author for author, _ in found}
        return Match(key, next(iter(names.values())) if len(names) == 1 else None)

    def use(self, match: Match, observed_wall: float) -> None:
        self._used[match.key] = observed_wall
        self._used.move_to_end(match.key)
        while len(self._used) > self.remember:
            self._used.popitem(last=False)

    async def wait(self, timeout: float) -> bool:
        return await self.facts.wait(ROUTE, timeout)


def _author(record: Record) -> tuple[Author, float] | None:
    try:
        author = Author(record["name"], record["email"], SOURCE, record.get("user", ""))
        return author, float(record.get("received", "0"))
    except (KeyError, ValueError):
        return None
