"""Several replicas share the branch writers through Leases (coordination.k8s.io/v1).

Every `renew_every` seconds a replica renews its membership Lease, reads the membership and
writer Leases, and for each writer the manager wants decides by rendezvous hashing over the
live members who should own it:

* it should be ours: renew its Lease, or take it when it is free, missing, or its holder
  stopped renewing it (seen unchanged for its duration);
* it is ours and should be another's (a replica joined): it is *handed over*: the manager
  stops the writer (its batch is written and pushed), saves the cursors, then `release`s;
* it is ours and could not be renewed for its whole duration: it is lost, and the manager
  stops writing to it at once.

Pushes are compare-and-swap on the remote tip and never forced, so even two writers for a
moment (a partitioned replica that has not noticed yet) cost a rebuild, never a change.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from kubescribe import metrics
from kubescribe.controller.plan import WorkerKey
from kubescribe.controller.sharding import (
    LeaseObserver,
    LeaseRecord,
    lease_name,
    live_members,
    may_take,
    rendezvous_owner,
)
from kubescribe.kube.client import ApiError
from kubescribe.kube.leases import LeaseClient, LeaseConflict
from kubescribe.waits import wait_event

log = structlog.get_logger(__name__)

ROLE_LABEL = "kubescribe.io/lease"
WRITER_ANNOTATION = "kubescribe.io/writer"


def worker_name(key: WorkerKey) -> str:
    return lease_name("kubescribe-writer", "\n".join(key))


class Shards:
    def __init__(
        self,
        leases: LeaseClient,
        identity: str,
        *,
        duration: float = 10.0,
        renew_every: float = 2.0,
        on_change: Callable[[], None] = lambda: None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.leases = leases
        self.identity = identity
        self.duration = duration
        self.renew_every = renew_every
        self.on_change = on_change
        self.clock = clock
        self.members: set[str] = {identity}
        self._observer = LeaseObserver()
        self._wanted: dict[str, WorkerKey] = {}
        self._held: dict[str, dict[str, Any]] = {}  # lease name -> the Lease as last written
        self._renewed: dict[str, float] = {}
        self._handover: set[str] = set()
        self._member_lease: dict[str, Any] | None = None
        self._member_name = lease_name("kubescribe-member", identity)
        self._wake = asyncio.Event()
        # A tick and a release take turns: a renewal in flight must not write back a Lease
        # that was released meanwhile (the replica would hold it again, unknowingly).
        self._turn = asyncio.Lock()

    # -- what the manager asks -------------------------------------------------------------
    def want(self, keys: Iterable[WorkerKey]) -> None:
        wanted = {worker_name(k): k for k in keys}
        if wanted.keys() - self._wanted.keys():
            self._wake.set()  # a new writer: decide now, not at the next renewal
        self._wanted = wanted

    def owns(self, key: WorkerKey) -> bool:
        return worker_name(key) in self._held

    def handing_over(self, key: WorkerKey) -> bool:
        return worker_name(key) in self._handover

    def mine(self, key: str) -> bool:
        """Whether this replica speaks for an object no writer Lease covers (e.g. the status
        of a GitProvider): the rendezvous choice among the live members."""
        return rendezvous_owner(key, self.members) == self.identity

    # -- the loop --------------------------------------------------------------------------
    async def run(self) -> None:
        while True:
            try:
                await self.tick()
            except (ApiError, OSError, TimeoutError) as exc:
                log.warning("shards.tick_failed", error=str(exc) or type(exc).__name__)
                self._expire_unrenewed()
            await wait_event(self._wake, self.renew_every)
            self._wake.clear()

    async def tick(self) -> None:
        async with self._turn:
            await self._tick()

    async def _tick(self) -> None:
        now = self.clock()
        await self._renew_membership()
        members = [LeaseRecord.of(x) for x in await self.leases.list(f"{ROLE_LABEL}=member")]
        for record in members:
            self._observer.observe(record, now)
        self.members = live_members(members, self._observer, now, me=self.identity)
        metrics.LIVE_REPLICAS.set(len(self.members))
        writers = {
            record.name: (record, lease)
            for lease in await self.leases.list(f"{ROLE_LABEL}=writer")
            for record in [LeaseRecord.of(lease)]
        }
        for record, _ in writers.values():
            self._observer.observe(record, now)
        before = (set(self._held), set(self._handover))
        for name in list(self._held):
            if name not in self._wanted:
                await self._release(name)  # no target writes there any more
        for name, key in self._wanted.items():
            found = writers.get(name)
            await self._decide(name, key, found, now)
        self._expire_unrenewed()
        if (set(self._held), set(self._handover)) != before:
            self.on_change()

    async def _decide(
        self,
        name: str,
        key: WorkerKey,
        found: tuple[LeaseRecord, Mapping[str, Any]] | None,
        now: float,
    ) -> None:
        ours = rendezvous_owner(name, self.members) == self.identity
        if name in self._held:
            if found is not None and found[0].holder != self.identity:
                self._lose(name, f"now held by {found[0].holder or 'nobody'}")
                return
            if not ours:
                self._handover.add(name)  # keep renewing until the manager releases it
            else:
                self._handover.discard(name)
            await self._hold(name, found[1] if found else self._held[name])
            return
        if not ours:
            return
        record = found[0] if found else None
        if not may_take(record, self._observer, now, self.identity):
            return
        try:
            if found is None:
                written = await self.leases.create(
                    name,
                    self.identity,
                    self.duration,
                    labels={ROLE_LABEL: "writer"},
                    annotations={WRITER_ANNOTATION: " ".join(key)},
                )
            else:
                written = await self.leases.hold(found[1], self.identity, self.duration)
        except LeaseConflict:
            return  # someone else was quicker: look again next tick
        self._held[name], self._renewed[name] = written, self.clock()
        metrics.LEASE_TRANSITIONS.labels("acquired").inc()
        log.info("lease.acquired", writer=" ".join(key), lease=name)

    async def _hold(self, name: str, lease: Mapping[str, Any]) -> None:
        try:
            written = await self.leases.hold(lease, self.identity, self.duration)
        except LeaseConflict:
            self._lose(name, "taken by another replica")
            return
        self._held[name], self._renewed[name] = written, self.clock()

    def _expire_unrenewed(self) -> None:
        now = self.clock()
        for name in [n for n, at in self._renewed.items() if now - at > self.duration]:
            self._lose(name, "not renewed within its duration")

    def _lose(self, name: str, why: str) -> None:
        if self._held.pop(name, None) is None:
            return
        self._renewed.pop(name, None)
        self._handover.discard(name)
        metrics.LEASE_TRANSITIONS.labels("lost").inc()
        log.warning("lease.lost", lease=name, reason=why)
        self.on_change()

    async def _renew_membership(self) -> None:
        lease = self._member_lease or await self.leases.get(self._member_name)
        try:
            if lease is None:
                self._member_lease = await self.leases.create(
                    self._member_name,
                    self.identity,
                    self.duration,
                    labels={ROLE_LABEL: "member"},
                )
            else:
                self._member_lease = await self.leases.hold(lease, self.identity, self.duration)
        except LeaseConflict:
            self._member_lease = None  # read it again next tick

    # -- hand-over and shutdown ------------------------------------------------------------
    async def release(self, key: WorkerKey) -> None:
        await self.release_name(worker_name(key))

    async def release_name(self, name: str) -> None:
        async with self._turn:
            await self._release(name)

    async def _release(self, name: str) -> None:
        lease = self._held.pop(name, None)
        self._renewed.pop(name, None)
        self._handover.discard(name)
        if lease is None:
            return
        if await self._give_up(name, lease):
            metrics.LEASE_TRANSITIONS.labels("released").inc()
            log.info("lease.released", lease=name)
        else:
            log.warning("lease.release_failed", lease=name, reason="left to expire")

    async def _give_up(self, name: str, lease: Mapping[str, Any]) -> bool:
        """Release `lease`. Our copy can be stale (a renewal cancelled after the server applied
        it): on a conflict, read the Lease again and release it while it still names us."""
        for _ in range(3):
            try:
                await self.leases.release(lease)
                return True
            except LeaseConflict:
                try:
                    current = await self.leases.get(name)
                except (ApiError, OSError):
                    return False
                if (
                    current is None
                    or current.get("spec", {}).get("holderIdentity") != self.identity
                ):
                    return True  # gone, or someone else's already: nothing of ours is left
                lease = current
            except (ApiError, OSError):
                return False
        return False

    async def stop(self) -> None:
        """Release every writer Lease and leave the membership (after the writers stopped)."""
        async with self._turn:
            for name in list(self._held):
                await self._release(name)
            with contextlib.suppress(ApiError, OSError):
                await self.leases.delete(self._member_name)
