"""Which replica writes which branch (pure: no I/O, clocks passed in).

Replicas announce themselves with a membership Lease each; a branch writer is owned through a
Lease of its own. The replica a writer *should* belong to is chosen by rendezvous hashing over
the live members, so load spreads evenly and a join or leave moves only the writers of the
replica that came or went.

A Lease is judged alive the way client-go judges leader leases: by when *this* replica last saw
it change (holder or renewTime), never by comparing its renewTime with the local clock, so clock
skew between nodes cannot make a live holder look dead.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


def rendezvous_owner(key: str, members: Iterable[str]) -> str | None:
    """The member with the highest hash of (member, key); None without members."""
    return max(
        members,
        key=lambda member: hashlib.sha256(f"{member}\0{key}".encode()).digest(),
        default=None,
    )


def lease_name(prefix: str, key: str) -> str:
    """A Lease name (DNS label) for an arbitrary key."""
    return f"{prefix}-{hashlib.sha256(key.encode()).hexdigest()[:20]}"


@dataclass(frozen=True)
class LeaseRecord:
    """What matters of a coordination.k8s.io/v1 Lease."""

    name: str
    holder: str
    renew_time: str
    duration: float
    resource_version: str

    @classmethod
    def of(cls, lease: Mapping[str, Any]) -> LeaseRecord:
        meta, spec = lease.get("metadata") or {}, lease.get("spec") or {}
        return cls(
            name=str(meta.get("name", "")),
            holder=str(spec.get("holderIdentity") or ""),
            renew_time=str(spec.get("renewTime") or ""),
            duration=float(spec.get("leaseDurationSeconds") or 0),
            resource_version=str(meta.get("resourceVersion", "")),
        )


class LeaseObserver:
    """Remembers when each Lease was last seen to change, on a monotonic clock."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[tuple[str, str], float]] = {}

    def observe(self, record: LeaseRecord, now: float) -> None:
        marker = (record.holder, record.renew_time)
        previous = self._seen.get(record.name)
        if previous is None or previous[0] != marker:
            self._seen[record.name] = (marker, now)

    def alive(self, record: LeaseRecord, now: float) -> bool:
        """Held, and renewed (as seen from here) within its duration."""
        if not record.holder:
            return False
        seen = self._seen.get(record.name)
        return seen is not None and now - seen[1] <= record.duration

    def forget(self, names: Iterable[str]) -> None:
        for name in names:
            self._seen.pop(name, None)


def live_members(
    records: Iterable[LeaseRecord], observer: LeaseObserver, now: float, *, me: str
) -> set[str]:
    """Holders of membership Leases that are alive; this replica always counts itself."""
    return {r.holder for r in records if observer.alive(r, now)} | {me}


def may_take(record: LeaseRecord | None, observer: LeaseObserver, now: float, me: str) -> bool:
    """A writer Lease can be taken when it does not exist, is free, is ours, or its holder
    stopped renewing it."""
    if record is None or not record.holder or record.holder == me:
        return True
    return not observer.alive(record, now)
