"""Facts as flat records in a fact index, and the index seam the stores implement.

A store (`kubescribe.store`) keeps records (flat `str -> str` maps) under lookup keys, per
route, bounded, and wakes waiters when a route gets new records. It knows nothing about audit
events: this module turns facts into records and keys and back. Routes keep clusters apart:
a fact posted to one route is never found from another.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

from kubescribe.attribution.decode import (
    FACT_COLLECTION,
    FACT_DELETE,
    FACT_NAMED,
    FACT_WRITE,
    Fact,
)
from kubescribe.mirror.authors import Author

Record = Mapping[str, str]
Keyed = tuple[Sequence[str], Record]
FACT_MARK = "mark"  # no fact: how far a route has told (a batch's latest completed request)
RouteTally = tuple[int, float, float]
"""A route's facts received so far, when the last record arrived (wall clock) and the time its
records have told everything before (the watermark); 0.0 for nothing yet."""


class FactIndex(Protocol):
    """Records by (route, key); memory and Redis Streams backends implement it alike."""

    async def add(self, route: str, records: Sequence[Keyed]) -> None:
        """Store records, each under its keys (older records are evicted past the bound)."""
        ...

    def find(self, route: str, key: str) -> Sequence[Record]:
        """Records stored under `key` on `route`, oldest first (a local, non-blocking read)."""
        ...

    async def wait(self, route: str, timeout: float) -> bool:
        """Return True as soon as `route` gets a new record, False after `timeout` seconds."""
        ...

    def tally(self, route: str) -> RouteTally:
        """How much `route` has told, and until when (route health, the watermark)."""
        ...


def version_key(uid: str, resource_version: str) -> str:
    return f"rv/{uid}/{resource_version}"


def delete_key(uid: str) -> str:
    return f"del/{uid}"


def delete_name_key(group: str, resource: str, namespace: str, name: str) -> str:
    return f"delname/{_group(group)}/{resource}/{namespace}/{name}"


def written_key(group: str, resource: str, namespace: str, name: str) -> str:
    """A write (or a create with a name) whose response was not recorded."""
    return f"wname/{_group(group)}/{resource}/{namespace}/{name}"


def created_key(group: str, resource: str, namespace: str) -> str:
    """A create whose request named no object (proxied to an extension API server)."""
    return f"wnew/{_group(group)}/{resource}/{namespace}"


def collection_key(group: str, resource: str, namespace: str) -> str:
    return f"coll/{_group(group)}/{resource}/{namespace}"


def _group(group: str) -> str:
    """The core group is '' in audit events and sometimes spelled `core` elsewhere."""
    return "" if group == "core" else group


def keys_of(fact: Fact) -> tuple[str, ...]:
    """The lookup keys of a fact (see `AuditAuthorResolver` for how they are joined)."""
    if fact.kind == FACT_WRITE:
        return (version_key(fact.uid, fact.resource_version),)
    if fact.kind == FACT_DELETE:
        keys = []
        if fact.uid:
            keys.append(delete_key(fact.uid))
            if fact.resource_version:
                # A delete held by finalizers is an update too (deletionTimestamp set).
                keys.append(version_key(fact.uid, fact.resource_version))
        else:
            keys.append(delete_name_key(fact.group, fact.resource, fact.namespace, fact.name))
        return tuple(keys)
    if fact.kind == FACT_COLLECTION:
        return (collection_key(fact.group, fact.resource, fact.namespace),)
    if fact.kind == FACT_NAMED:
        if fact.name:
            return (written_key(fact.group, fact.resource, fact.namespace, fact.name),)
        return (created_key(fact.group, fact.resource, fact.namespace),)
    return ()


def to_record(fact: Fact) -> dict[str, str]:
    return {
        "kind": fact.kind,
        "verb": fact.verb,
        "name": fact.author.name,
        "email": fact.author.email,
        "user": fact.username,
        "group": fact.group,
        "resource": fact.resource,
        "subresource": fact.subresource,
        "namespace": fact.namespace,
        "object": fact.name,
        "uid": fact.uid,
        "rv": fact.resource_version,
        "received": repr(fact.received),
        "completed": repr(fact.completed),
        "audit_id": fact.audit_id,
    }


def from_record(record: Record) -> Fact | None:
    """The fact of a stored record; None for a record this version cannot read."""
    try:
        return Fact(
            kind=record["kind"],
            verb=record.get("verb", ""),
            author=Author(record["name"], record["email"], user=record.get("user", "")),
            username=record.get("user", ""),
            group=record.get("group", ""),
            resource=record.get("resource", ""),
            namespace=record.get("namespace", ""),
            name=record.get("object", ""),
            subresource=record.get("subresource", ""),
            uid=record.get("uid", ""),
            resource_version=record.get("rv", ""),
            received=float(record.get("received", "0")),
            completed=float(record.get("completed", "0")),
            audit_id=record.get("audit_id", ""),
        )
    except (KeyError, ValueError):
        return None


def keyed(facts: Iterable[Fact], latest: float = 0.0) -> list[Keyed]:
    """Records of `facts`, and a mark of `latest` (a stageTimestamp) when there is one."""
    records: list[Keyed] = [(keys_of(f), to_record(f)) for f in facts if keys_of(f)]
    if latest > 0:
        records.append(((), {"kind": FACT_MARK, "completed": repr(latest)}))
    return records
