"""Our watch loop against a real API server: initial snapshot, live events, 410 Gone re-list."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from kubescribe import metrics
from kubescribe.kube import backlog
from kubescribe.kube.client import KubeClient
from kubescribe.kube.informer import Informer, ObjectKey, as_is
from kubescribe.mirror.identity import ResourceType
from kubescribe_devenv.controlplane import ControlPlane
from tests.support import wait_for

pytestmark = pytest.mark.controlplane
CM = ResourceType("", "v1", "configmaps", "ConfigMap", True)


class Recorder:
    def __init__(self) -> None:
        self.snapshots: list[tuple[set[ObjectKey], set[ObjectKey]]] = []
        self.events: list[tuple[str, str]] = []
        self.changed = asyncio.Event()

    async def on_snapshot(self, objects: Any, deleted: set[ObjectKey], rv: str) -> None:
        self.snapshots.append((set(objects), set(deleted)))
        self.changed.set()

    async def on_event(self, event_type: str, obj: dict[str, Any], rv: str) -> None:
        self.events.append((event_type, obj["metadata"]["name"]))
        self.changed.set()

    async def until(self, check: Any, timeout: float = 20) -> None:
        async with asyncio.timeout(timeout):
            while not check():
                self.changed.clear()
                await self.changed.wait()


async def test_initial_snapshot_then_live_events(
    controlplane: ControlPlane, namespace: str
) -> None:
    controlplane.kubectl("create", "configmap", "early", "-n", namespace, "--from-literal=a=1")
    client = await KubeClient.connect(controlplane.kubeconfig)
    rec = Recorder()
    informer = Informer(client, CM, rec, prepare=as_is, namespace=namespace)
    task = asyncio.create_task(informer.run())
    try:
        await rec.until(lambda: rec.snapshots)
        assert rec.snapshots[0][0] >= {(namespace, "early")}
        await asyncio.to_thread(
            controlplane.kubectl,
            "create",
            "configmap",
            "late",
            "-n",
            namespace,
            "--from-literal=a=1",
        )
        await asyncio.to_thread(
            controlplane.kubectl, "delete", "configmap", "early", "-n", namespace
        )
        await rec.until(lambda: ("DELETED", "early") in rec.events)
        assert rec.events[:2] == [("ADDED", "late"), ("DELETED", "early")]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()


async def test_gone_relists_and_reports_deletes_missed_in_the_gap(tmp_path: Path) -> None:
    # No watch cache and fast compaction: a stale resourceVersion gets 410 Gone quickly.
    args = ("--watch-cache=false", "--etcd-compaction-interval=1s")
    with ControlPlane(workdir=tmp_path, extra_apiserver_args=args) as cp:
        cp.kubectl("create", "namespace", "gap")
        cp.kubectl("create", "configmap", "stays", "-n", "gap", "--from-literal=a=1")
        cp.kubectl("create", "configmap", "vanishes", "-n", "gap", "--from-literal=a=1")
        client = await KubeClient.connect(cp.kubeconfig)
        rec = Recorder()
        informer = Informer(client, CM, rec, prepare=as_is, namespace="gap")
        task = asyncio.create_task(informer.run())
        try:
            await rec.until(lambda: rec.snapshots)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        stale = informer.rv
        await asyncio.to_thread(cp.kubectl, "delete", "configmap", "vanishes", "-n", "gap")
        for i in range(5):
            await asyncio.to_thread(
                cp.kubectl, "create", "configmap", f"churn-{i}", "-n", "gap", "--from-literal=a=1"
            )
        watch = (
            f"/api/v1/namespaces/gap/configmaps?watch=1&resourceVersion={stale}&timeoutSeconds=1"
        )

        def compacted() -> bool:
            return '"code":410' in cp.kubectl("get", "--raw", watch, check=False).stdout

        await asyncio.to_thread(wait_for, compacted, 30, 0.2, "compaction of the stale revision")
        informer.rv = stale
        task = asyncio.create_task(informer.run())
        try:
            await rec.until(lambda: len(rec.snapshots) >= 2, timeout=30)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await client.close()
        objects, deleted = rec.snapshots[1]
        assert deleted == {("gap", "vanishes")}
        assert ("gap", "stays") in objects
        assert {("gap", f"churn-{i}") for i in range(5)} <= objects


class Replay(Recorder):
    """Also records the backlog events the informer found stale."""

    def __init__(self) -> None:
        super().__init__()
        self.stale: list[tuple[str, str]] = []

    async def on_stale(self, event_type: str, obj: dict[str, Any], rv: str) -> None:
        self.stale.append((event_type, obj["metadata"]["name"]))


def backlog_events(result: str) -> float:
    return float(metrics.BACKLOG_EVENTS.labels(CM.gvr, result)._value.get())


@pytest.mark.parametrize("lookups", [64, 2], ids=["by-object", "by-list"])
async def test_a_resumed_watch_delivers_of_its_backlog_only_current_states(
    controlplane: ControlPlane, namespace: str, lookups: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backlog, "LOOKUPS", lookups)
    cp, ns = controlplane, namespace

    def kubectl(*args: str) -> None:
        cp.kubectl(*args, "-n", ns)

    for name in ("a", "b", "c", "e"):
        kubectl("create", "configmap", name, "--from-literal=v=1")
        kubectl("label", "configmap", name, "app=x")
    listed = cp.kubectl("get", "--raw", f"/api/v1/namespaces/{ns}/configmaps?limit=1").stdout
    cursor = str(json.loads(listed)["metadata"]["resourceVersion"])
    # What happened after the cursor, in order; the informer resumes from it afterwards.
    kubectl("patch", "configmap", "a", "-p", '{"data":{"v":"2"}}')
    kubectl("delete", "configmap", "a")
    kubectl("patch", "configmap", "b", "-p", '{"data":{"v":"2"}}')
    kubectl("patch", "configmap", "b", "-p", '{"data":{"v":"3"}}')
    kubectl("delete", "configmap", "c")
    kubectl("create", "configmap", "c", "--from-literal=v=4")
    kubectl("label", "configmap", "c", "app=x")
    kubectl("create", "configmap", "d", "--from-literal=v=1")
    kubectl("label", "configmap", "d", "app=x")
    kubectl("delete", "configmap", "d")
    kubectl("label", "configmap", "e", "app=y", "--overwrite")  # leaves the selection
    kubectl("patch", "configmap", "e", "-p", '{"data":{"v":"2"}}')  # outside it: no event
    stale_before, applied_before = backlog_events("stale"), backlog_events("applied")

    client = await KubeClient.connect(cp.kubeconfig)
    rec = Replay()
    informer = Informer(
        client,
        CM,
        rec,
        prepare=as_is,
        namespace=ns,
        label_selector="app=x",
        resume_from=cursor,
        known=[(ns, n) for n in ("a", "b", "c", "e")],
        on_stale=rec.on_stale,
    )
    task = asyncio.create_task(informer.run())
    try:
        await rec.until(lambda: ("DELETED", "e") in rec.events)
        await asyncio.to_thread(kubectl, "create", "configmap", "live", "--from-literal=v=1")
        await asyncio.to_thread(kubectl, "label", "configmap", "live", "app=x")
        await rec.until(lambda: ("ADDED", "live") in rec.events)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()
    assert rec.events == [
        ("DELETED", "a"),
        ("MODIFIED", "b"),  # v3: its current state
        ("ADDED", "c"),  # created again (it enters the selection when labelled)
        ("DELETED", "d"),
        ("DELETED", "e"),  # out of the selection is absent for this stream
        ("ADDED", "live"),  # past the horizon: live, applied as it comes
    ]
    assert rec.stale == [
        ("MODIFIED", "a"),
        ("MODIFIED", "b"),  # v2
        ("DELETED", "c"),
        ("ADDED", "d"),
    ]
    assert backlog_events("stale") - stale_before == 4
    assert backlog_events("applied") - applied_before == 5
    assert set(informer.known) == {(ns, "b"), (ns, "c"), (ns, "live")}


async def test_forbidden_is_reported_and_clears_once_granted(
    controlplane: ControlPlane, namespace: str
) -> None:
    user = f"reader-{namespace}"
    client = await KubeClient.connect(controlplane.user_kubeconfig(user))
    rec = Recorder()
    changes: list[str | None] = []
    informer: Informer[dict[str, Any]] | None = None

    def on_access() -> None:
        assert informer is not None
        changes.append(informer.forbidden)
        rec.changed.set()

    informer = Informer(client, CM, rec, prepare=as_is, namespace=namespace, on_access=on_access)
    task = asyncio.create_task(informer.run())
    try:
        await rec.until(lambda: informer.forbidden is not None)
        assert "forbidden" in (informer.forbidden or "").lower()
        assert not informer.synced.is_set()
        controlplane.kubectl(
            "create", "role", "cm-reader", "-n", namespace, "--verb=get,list,watch",
            "--resource=configmaps",
        )  # fmt: skip
        controlplane.kubectl(
            "create", "rolebinding", "cm-reader", "-n", namespace, "--role=cm-reader",
            f"--user={user}",
        )  # fmt: skip
        await rec.until(lambda: rec.snapshots, timeout=45)  # retried with backoff
        assert informer.forbidden is None
        assert changes[-1] is None
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()


def restarts(reason: str) -> float:
    return float(metrics.WATCH_RESTARTS.labels(CM.gvr, reason)._value.get())


async def test_an_idle_stream_is_restarted_on_time_never_counted_dead(
    controlplane: ControlPlane, namespace: str
) -> None:
    client = await KubeClient.connect(controlplane.kubeconfig)
    rec = Recorder()
    # The server ends each watch after 1-2 s; nothing changes in the namespace meanwhile.
    # By default too, a watch may stay silent for as long as the server keeps it open.
    default = Informer(client, CM, rec, prepare=as_is)
    assert default.idle_timeout > default.server_timeout
    informer = Informer(client, CM, rec, prepare=as_is, namespace=namespace, server_timeout=2)
    dead, timeouts = restarts("dead"), restarts("timeout")
    task = asyncio.create_task(informer.run())
    try:
        await rec.until(lambda: rec.snapshots)
        await asyncio.to_thread(
            wait_for, lambda: restarts("timeout") >= timeouts + 3, 30, 0.1, "three quiet watches"
        )
        assert restarts("dead") == dead
        await asyncio.to_thread(
            controlplane.kubectl, "create", "configmap", "after", "-n", namespace
        )
        await rec.until(lambda: ("ADDED", "after") in rec.events)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()


class FreezingProxy:
    """A TCP proxy to the API server that can stop passing bytes (a hung peer)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    await self.flowing.wait()
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def test_a_hung_stream_is_dead_after_its_timeout_and_grace(
    controlplane: ControlPlane, namespace: str
) -> None:
    client = await KubeClient.connect(controlplane.kubeconfig)
    target = urlsplit(client.host)
    proxy = FreezingProxy((target.hostname or "127.0.0.1", target.port or 443))
    client.host = f"https://127.0.0.1:{await proxy.start()}"
    rec = Recorder()
    informer = Informer(
        client, CM, rec, prepare=as_is, namespace=namespace, server_timeout=2, idle_timeout=4
    )
    dead = restarts("dead")
    task = asyncio.create_task(informer.run())
    try:
        await rec.until(lambda: rec.snapshots)
        proxy.flowing.clear()
        await asyncio.to_thread(wait_for, lambda: restarts("dead") > dead, 30, 0.1, "dead")
        proxy.flowing.set()
        await asyncio.to_thread(
            controlplane.kubectl, "create", "configmap", "revived", "-n", namespace
        )
        await rec.until(lambda: ("ADDED", "revived") in rec.events, timeout=30)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()
        if proxy.server is not None:
            proxy.server.close()
