"""A throw-away Prometheus Alertmanager on a random loopback port, with a temporary config and
storage, built from its Go module by `hack/build-alertmanager.sh` (cached per machine): the
Alert receiver tests post to it and read back the alerts it holds."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from kubescribe_devenv.cachedtool import cached_tool
from kubescribe_devenv.controlplane import REPO_ROOT, free_port

BUILD_SCRIPT = REPO_ROOT / "hack" / "build-alertmanager.sh"
# Every alert goes to a receiver that sends nothing: the tests read the alerts from the API.
CONFIG = """route:
  receiver: blackhole
  group_wait: 1h
receivers:
  - name: blackhole
"""


class AlertmanagerMissing(RuntimeError):
    pass


def binary() -> Path:
    """The alertmanager binary: `$ALERTMANAGER`, else built (or found cached) by the script."""
    return cached_tool(BUILD_SCRIPT, "alertmanager", "ALERTMANAGER", AlertmanagerMissing)


@dataclass
class Alertmanager:
    """One Alertmanager process (no cluster gossip: nothing listens but the web port)."""

    binary: Path
    workdir: Path
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _get(self, path: str) -> tuple[int, bytes]:
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no env proxies
        with direct.open(f"{self.url}{path}", timeout=5) as answer:
            status: int = answer.status
            return status, answer.read()

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts Alertmanager holds (`GET /api/v2/alerts`: active, silenced or not)."""
        _, body = self._get("/api/v2/alerts")
        found: list[dict[str, Any]] = json.loads(body)
        return found

    def start(self, timeout: float = 30) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "alertmanager.yml"
        config.write_text(CONFIG)
        log = (self.workdir / "alertmanager.log").open("wb")
        self._proc = subprocess.Popen(
            [
                str(self.binary),
                f"--config.file={config}",
                f"--storage.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=self.workdir,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                break
            with contextlib.suppress(OSError, urllib.error.URLError):
                if self._get("/-/ready")[0] == 200:
                    return
            time.sleep(0.1)
        self.stop()
        tail = (self.workdir / "alertmanager.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"alertmanager did not become ready on port {self.port}:\n{tail}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=10)

    def __enter__(self) -> Alertmanager:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
