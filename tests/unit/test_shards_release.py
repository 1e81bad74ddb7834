"""A Lease is given back even when our copy of it is stale, and never taken from another."""

from __future__ import annotations

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
