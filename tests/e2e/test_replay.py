"""A replay echoes no history: a new owner that resumes from a cursor saved before changes the
previous owner pushed makes no commit for them.

Real control plane, real Redis (resume cursors), a real bare remote, no commit window (one
commit per change, where an echo shows). The cursor a hand-over would have lost is simulated
by writing an older one back through the cursor store.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from kubescribe.controller.plan import WorkerKey
from kubescribe.controller.sharding import rendezvous_owner
from kubescribe.controller.shards import worker_name
from kubescribe.net.urls import normalize
from kubescribe.store.cursors import StreamCursor
from kubescribe.store.redis_cursors import RedisCursorStore
from kubescribe.store.redis_options import RedisOptions
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.redis import DEV_HMAC_KEY, RedisServer
from tests.manifests import cm_path, configmap, provider, target, watch_rule
from tests.support import Operator, manifest, setup_mirror, wait_for

pytestmark = pytest.mark.controlplane


class Cursors:
    """The operator's cursor record of one stream, read and written through the store API."""

    def __init__(self, redis: RedisServer, prefix: str, stream: str) -> None:
        self.options = RedisOptions(redis.url, DEV_HMAC_KEY.encode(), key_prefix=prefix)
        self.stream = stream
        self.record = f"{prefix}streams:cursor:{stream}"

    def load(self) -> StreamCursor | None:
        return asyncio.run(self._load())

    def restore(self, cursor: StreamCursor) -> None:
        asyncio.run(self._restore(cursor))

    async def _fingerprint(self) -> str:
        """The stream's configuration fingerprint, as the operator saved it (a plain field)."""
        client = aioredis.Redis.from_url(self.options.url, decode_responses=True)
        try:
            return str(await client.hget(self.record, "fingerprint") or "")
        finally:
            await client.aclose()

    async def _load(self) -> StreamCursor | None:
        fingerprint = await self._fingerprint()
        store = RedisCursorStore(self.options)
        try:
            return await store.load(self.stream, fingerprint)
        finally:
            await store.close()

    async def _restore(self, cursor: StreamCursor) -> None:
        fingerprint = await self._fingerprint()
        store = RedisCursorStore(self.options)
        try:
            await store.save(
                self.stream, fingerprint, cursor.resource_version, cursor.known, (), replace=True
            )
        finally:
            await store.close()


def rv(cp: ControlPlane, ns: str, name: str) -> int:
    return int(cp.get_json("configmap", name, "-n", ns)["metadata"]["resourceVersion"])


def test_a_resume_from_a_cursor_older_than_the_last_push_commits_nothing(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    tmp_path: Path,
    redis_server: RedisServer,
) -> None:
    cp, ns = crds, namespace
    prefix = f"replay-{uuid.uuid4().hex[:8]}:"
    flags = (f"--redis-url={redis_server.url}", f"--redis-key-prefix={prefix}")
    # One replica: the stream of every target's ConfigMaps is one, with one cursor.
    cursors = Cursors(redis_server, prefix, "shared|core/v1/configmaps")
    first = Operator(cp, tmp_path / "first", *flags).start()
    try:
        setup_mirror(cp, ns, remote)
        for name in ("doomed", "kept", "recreated"):
            cp.kubectl("create", "configmap", name, "-n", ns, "--from-literal=v=1")
        created = max(rv(cp, ns, n) for n in ("doomed", "kept", "recreated"))
        old = wait_for(
            lambda: (c := cursors.load()) and int(c.resource_version) >= created and c,
            timeout=60,
            what="a cursor covering the three creations",
        )
        # What the old owner does after the cursor the new owner will resume from: an update
        # then a delete, an update that stays, a delete then a create under the same name.
        cp.kubectl("patch", "configmap", "doomed", "-n", ns, "-p", '{"data":{"v":"2"}}')
        cp.kubectl("delete", "configmap", "doomed", "-n", ns)
        cp.kubectl("patch", "configmap", "kept", "-n", ns, "-p", '{"data":{"v":"2"}}')
        cp.kubectl("delete", "configmap", "recreated", "-n", ns)
        cp.kubectl("create", "configmap", "recreated", "-n", ns, "--from-literal=v=3")
        last = rv(cp, ns, "recreated")
        wait_for(
            lambda: (c := cursors.load()) and int(c.resource_version) >= last,
            timeout=60,
            what="the old owner's changes pushed and acknowledged",
        )
    finally:
        first.stop()
    assert cm_path(ns, "doomed") not in remote.files()
    assert "v: '2'" in remote.read(cm_path(ns, "kept"))
    assert "v: '3'" in remote.read(cm_path(ns, "recreated"))
    pushed = cursors.load()
    assert pushed is not None
    tip = remote.tip()

    cursors.restore(old)  # the cursor save of the hand-over was lost
    second = Operator(cp, tmp_path / "second", *flags).start()
    try:
        wait_for(
            lambda: (
                (c := cursors.load()) and int(c.resource_version) >= int(pushed.resource_version)
            ),
            timeout=60,
            what="the replay acknowledged",
        )
        echoes = git("log", "--format=%H %s", f"{tip}..main", cwd=remote.path).strip()
        assert echoes == "", f"the replay made commits:\n{echoes}"
        assert cm_path(ns, "doomed") not in remote.files()
        # Stale: doomed's update, recreated's delete. Applied (no commit: Git holds them):
        # doomed's delete, kept's update, recreated's creation.
        assert backlog(second, "stale") == 2
        assert backlog(second, "applied") == 3
    finally:
        second.stop()


def backlog(op: Operator, result: str) -> float:
    prefix = "kubescribe_resume_backlog_events_total{"
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in op.metrics().splitlines()
        if line.startswith(prefix) and f'result="{result}"' in line
    )


def test_a_hand_over_saves_the_cursor_of_its_last_push(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    tmp_path: Path,
    redis_server: RedisServer,
) -> None:
    cp, ns = crds, namespace
    prefix = f"replay-{uuid.uuid4().hex[:8]}:"

    def replica(name: str) -> Operator:
        return Operator(
            cp,
            tmp_path / name,
            f"--replica-id={name}",
            f"--lease-namespace={ns}",
            f"--redis-url={redis_server.url}",
            f"--redis-key-prefix={prefix}",
        ).start()

    # A branch whose writer moves to r2 when r2 joins.
    branch = next(
        b
        for b in (f"b{i}" for i in range(64))
        if rendezvous_owner(worker_name(WorkerKey(ns, normalize(remote.url), b)), ["r1", "r2"])
        == "r2"
    )
    cursors = Cursors(redis_server, prefix, f"{ns}/mirror|core/v1/configmaps|{ns}")
    r1 = replica("r1")
    r2: Operator | None = None
    try:
        cp.apply(
            manifest(
                provider("git", ns, remote.url, push={"commitWindow": "60s"}),
                target("mirror", ns, "git", "mirror", branch=branch),
                watch_rule("rule", ns, "mirror", {"apiGroups": [""], "resources": ["configmaps"]}),
            )
        )
        wait_for(cursors.load, timeout=60, what="the cursor of the first (empty) snapshot")
        opened = windows_opened(r1)
        cp.apply(manifest(*(configmap(f"cm-{i}", ns, {"v": "1"}) for i in range(3))))
        wait_for(lambda: windows_opened(r1) > opened, timeout=30, what="a commit window open")
        r2 = replica("r2")  # r1 hands the branch over: closes the window, pushes, saves
        wait_for(
            lambda: {cm_path(ns, f"cm-{i}") for i in range(3)} <= set(remote.files(branch)),
            timeout=60,
            what="the hand-over's push",
        )
        # A change after the hand-over, seen live by r2: what it replayed came before it.
        cp.kubectl("delete", "configmap", "cm-0", "-n", ns)
        assert r2 is not None
        wait_for(lambda: watch_events(r2, "DELETED") >= 1, timeout=60, what="r2 sees the delete")
        assert watch_events(r2, "ADDED") == 0, "r2 replayed what r1 had pushed"
    finally:
        for op in (r2, r1):
            if op is not None:
                op.stop()


def windows_opened(op: Operator) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in op.metrics().splitlines()
        if line.startswith("kubescribe_windows_opened_total")
    )


def watch_events(op: Operator, event_type: str) -> float:
    wanted = f'gvr="core/v1/configmaps",type="{event_type}"'
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in op.metrics().splitlines()
        if line.startswith("kubescribe_watch_events_total{") and wanted in line
    )
