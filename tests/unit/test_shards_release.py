"""A Lease is given back even when our copy of it is stale, and never taken from another."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from kubescribe.controller.shards import Shards
from kubescribe.kube.leases import LeaseConflict


class _Server:
    """Leases with resourceVersion compare-and-swap, as the API server keeps them."""

    def __init__(self) -> None:
        self.leases: dict[str, dict[str, Any]] = {}

    def put(self, name: str, holder: str) -> dict[str, Any]:
        old = self.leases.get(name)
        rv = str(int(old["metadata"]["resourceVersion"]) + 1) if old else "1"
        lease = {
            "metadata": {"name": name, "resourceVersion": rv},
            "spec": {"holderIdentity": holder},
        }
        self.leases[name] = lease
        return copy.deepcopy(lease)

    async def get(self, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.leases.get(name))

    async def release(self, lease: dict[str, Any]) -> dict[str, Any]:
        name = lease["metadata"]["name"]
        if self.leases[name]["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"]:
            raise LeaseConflict("409 Conflict")
        return self.put(name, "")

    async def delete(self, name: str) -> None:
        self.leases.pop(name, None)


class _SlowRenewals(_Server):
    """Renewals the server applies at once but answers only at `go`, as a slow network does."""

    def __init__(self) -> None:
        super().__init__()
        self.renewing = asyncio.Event()
        self.go = asyncio.Event()

    async def list(self, label_selector: str) -> list[dict[str, Any]]:
        kind = label_selector.rpartition("=")[2]
        return [copy.deepcopy(x) for n, x in self.leases.items() if n.startswith(kind)]

    async def create(self, name: str, holder: str, duration: float, **_: Any) -> dict[str, Any]:
        return self.put(name, holder)

    async def hold(self, lease: dict[str, Any], holder: str, duration: float) -> dict[str, Any]:
        name = lease["metadata"]["name"]
        if self.leases[name]["metadata"]["resourceVersion"] != lease["metadata"]["resourceVersion"]:
            raise LeaseConflict("409 Conflict")
        written = self.put(name, holder)
        if name.startswith("writer"):
            self.renewing.set()
            await self.go.wait()
        return written


async def test_a_stale_copy_is_read_again_and_released() -> None:
    server = _Server()
    shards = Shards(server, "r1")  # type: ignore[arg-type]
    shards._held["w"] = server.put("w", "r1")
    server.put("w", "r1")  # a renewal the server applied, whose answer we never saw
    await shards.stop()
    assert server.leases["w"]["spec"]["holderIdentity"] == ""


async def test_a_lease_another_replica_took_is_left_to_it() -> None:
    server = _Server()
    shards = Shards(server, "r1")  # type: ignore[arg-type]
    shards._held["w"] = server.put("w", "r1")
    server.put("w", "r2")
    await shards.stop()
    assert server.leases["w"]["spec"]["holderIdentity"] == "r2"


async def test_a_release_during_a_renewal_is_not_undone_by_it() -> None:
    server = _SlowRenewals()
    shards = Shards(server, "r1")  # type: ignore[arg-type]
    shards._held["writer-a"] = server.put("writer-a", "r1")
    shards._wanted = {"writer-a": ("ns", "url", "a")}  # type: ignore[dict-item]
    shards._member_name = "member-r1"
    tick = asyncio.create_task(shards.tick())
    await server.renewing.wait()  # the renewal is in flight
    release = asyncio.create_task(shards.release_name("writer-a"))
    await asyncio.sleep(0.05)
    server.go.set()
    await asyncio.gather(tick, release)
    assert "writer-a" not in shards._held  # not held again by the late renewal
    assert server.leases["writer-a"]["spec"]["holderIdentity"] == ""
