"""`kubescribe run` as a child process, for the demo, the benchmarks and end-to-end tests."""

from __future__ import annotations

import compileall
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import kubescribe
from kubescribe.store.redis_options import HMAC_KEY_ENV
from kubescribe_devenv.controlplane import free_port
from kubescribe_devenv.redis import DEV_HMAC_KEY

PACKAGE = Path(kubescribe.__file__).resolve().parent


def compile_bytecode() -> None:
    """Byte-compile kubescribe's modules where they are missing or stale, as the image does
    when it is built. A source checkout run with PYTHONDONTWRITEBYTECODE otherwise compiles
    every module again at each start (a fifth of a second of CPU), which start-up figures
    would count."""
    compileall.compile_dir(PACKAGE, quiet=1)


class OperatorProcess:
    """The operator with its JSON logs in `log_path` and metrics on a free loopback port.

    `allow_file_urls` is on by default: the local bare remotes used here are paths, which a real
    deployment refuses. With `--redis-url` it signs Redis entries with a fixed development key
    unless the environment names one.
    """

    def __init__(
        self, kubeconfig: Path, workdir: Path, *extra: str, allow_file_urls: bool = True
    ) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.extra = (*extra, "--allow-file-urls") if allow_file_urls else extra
        self.metrics_port = free_port()
        self.log_path = workdir / f"operator-{time.monotonic_ns()}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "kubescribe",
                    "run",
                    "--kubeconfig",
                    str(self.kubeconfig),
                    "--cache-dir",
                    str(self.workdir / "cache"),
                    "--metrics-addr",
                    f"127.0.0.1:{self.metrics_port}",
                    *self.extra,
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                # As the image runs it: two malloc arenas, not one per thread that ever
                # allocated (glibc's default lets a long run's memory fragment and grow).
                env={
                    HMAC_KEY_ENV: DEV_HMAC_KEY,
                    **os.environ,
                    "PYTHONUNBUFFERED": "1",
                    "MALLOC_ARENA_MAX": "2",
                },
            )
        return self

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (the operator flushes its branch workers), SIGKILL after `timeout`."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def logs(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return str(resp.read().decode())

    def rss_mb(self, field: str = "VmRSS") -> float:
        """Resident memory now (`VmHWM`: the peak so far), from /proc."""
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return round(int(line.split()[1]) / 1024, 1)
        return 0.0

    def open_files(self) -> int:
        assert self.proc is not None
        return len(list(Path(f"/proc/{self.proc.pid}/fd").iterdir()))
