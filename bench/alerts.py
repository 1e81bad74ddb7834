"""Alert latency: from an API write to the message at a receiver (docs/alerts.md).

Real control plane, bare remote over file://, the operator as a separate process with no
commit window, one Alert with `groupWindowSeconds: 0` posting to an aiohttp receiver on
loopback. Each sample creates one ConfigMap and waits for its message before the next; the
clock starts when the create call returns and stops when the receiver has read the body.
The path covers the watch event, the commit, the push, the report to the alert loop and the
POST. Prints one JSON object. Shared 2-core machines are noisy: compare within a run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import click
from aiohttp import web

from kubescribe.api.crds import render_crds
from kubescribe.kube.client import KubeClient
from kubescribe_devenv.controlplane import ControlPlane, free_port
from kubescribe_devenv.gitremote import BareRemote
from kubescribe_devenv.operator import OperatorProcess, compile_bytecode

NS = "bench"
API = "kubescribe.io/v1alpha1"


class Receiver:
    """Records when the message naming each ConfigMap arrived (monotonic seconds)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.arrived: dict[str, float] = {}
        self.messages = 0
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        now = time.monotonic()
        names = [c["what"]["name"] for c in json.loads(body)["changes"]]
        with self._lock:
            self.messages += 1
            for name in names:
                self.arrived.setdefault(name, now)
        return web.Response(status=204)

    def start(self) -> None:
        app = web.Application()
        app.router.add_post("/hook", self._handle)
        self._runner = web.AppRunner(app)

        async def start() -> None:
            assert self._runner is not None
            await self._runner.setup()
            await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

        threading.Thread(target=self._loop.run_forever, daemon=True).start()
        asyncio.run_coroutine_threadsafe(start(), self._loop).result(timeout=10)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)

    def wait(self, name: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if name in self.arrived:
                    return self.arrived[name]
            time.sleep(0.0005)
        raise TimeoutError(f"no message for {name}")


def objects(remote_url: str, hook: str) -> list[dict[str, Any]]:
    def obj(kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        return {
            "apiVersion": API,
            "kind": kind,
            "metadata": {"name": name, "namespace": NS},
            "spec": spec,
        }

    return [
        obj("GitProvider", "git", {"url": remote_url, "push": {"commitWindow": "0s"}}),
        obj("GitTarget", "mirror", {"providerRef": {"name": "git"}, "branch": "main", "path": "m"}),
        obj(
            "WatchRule",
            "cms",
            {
                "targetRef": {"name": "mirror"},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["configmaps"],
                        "labelSelector": {"matchLabels": {"bench": "yes"}},
                    }
                ],
            },
        ),
        obj(
            "Alert",
            "lat",
            {"webhook": {"url": hook}, "groupWindowSeconds": 0, "maxMessagesPerHour": 3600},
        ),
    ]


def cm(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS, "labels": {"bench": "yes"}},
        "data": {"v": "1"},
    }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(workdir: Path, samples: int, pause: float) -> dict[str, Any]:
    (workdir / "cp").mkdir()
    cp = ControlPlane(workdir=workdir / "cp")
    cp.start()
    receiver = Receiver()
    operator: OperatorProcess | None = None
    try:
        receiver.start()
        remote = BareRemote.create(workdir / "remote.git")
        cp.apply(render_crds())
        cp.kubectl("wait", "--for=condition=Established", "crd/alerts.kubescribe.io")
        cp.kubectl("create", "namespace", NS)
        hook = f"http://127.0.0.1:{receiver.port}/hook"
        cp.apply("\n---\n".join(json.dumps(d) for d in objects(remote.url, hook)))
        operator = OperatorProcess(cp.kubeconfig, workdir, "--log-level", "warning").start()

        async def measure() -> list[float]:
            client = await KubeClient.connect(cp.kubeconfig)
            path = f"/api/v1/namespaces/{NS}/configmaps"
            lat = []
            try:
                for k in range(24):  # until the operator mirrors and tells (it starts now)
                    await client.request("POST", path, body=cm(f"warm-up-{k}"))
                    with contextlib.suppress(TimeoutError):
                        await asyncio.to_thread(receiver.wait, f"warm-up-{k}", 5)
                        break
                for i in range(samples):
                    name = f"lat-{i}"
                    await client.request("POST", path, body=cm(name))
                    written = time.monotonic()
                    arrived = await asyncio.to_thread(receiver.wait, name, 60)
                    lat.append((arrived - written) * 1000)
                    await asyncio.sleep(pause)
            finally:
                await client.close()
            return lat

        lat = asyncio.run(measure())
    finally:
        if operator is not None:
            operator.stop(timeout=60)
        receiver.stop()
        cp.stop()
    return {
        "workload": "alert_latency",
        "samples": samples,
        "group_window_seconds": 0,
        "p50_ms": round(statistics.median(lat), 1),
        "p99_ms": round(percentile(lat, 0.99), 1),
        "max_ms": round(max(lat), 1),
        "min_ms": round(min(lat), 1),
        "messages": receiver.messages,
    }


@click.command()
@click.option("--samples", default=50, show_default=True, help="Changes measured.")
@click.option("--pause", default=0.2, show_default=True, help="Seconds between two changes.")
def main(samples: int, pause: float) -> None:
    compile_bytecode()  # start from bytecode, as the image does
    with tempfile.TemporaryDirectory(prefix="kubescribe-bench-") as tmp:
        print(json.dumps(run(Path(tmp), samples, pause)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
