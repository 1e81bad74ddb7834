"""Helpers for end-to-end tests: wait on conditions, run the operator as a real process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kubescribe.devenv.controlplane import ControlPlane, free_port

T = TypeVar("T")


def wait_for(
    check: Callable[[], T], timeout: float = 30, interval: float = 0.05, what: str = "condition"
) -> T:
    """Poll `check` until it returns a truthy value; fail with the last value after `timeout`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def stays(check: Callable[[], bool], seconds: float = 1.0, what: str = "condition") -> None:
    """A negative check: `check` must hold on every poll for `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert check(), f"{what} stopped holding"
        time.sleep(0.05)


class Operator:
    """`kubescribe run` as a child process with its JSON logs in a file."""

    def __init__(
        self, cp: ControlPlane, workdir: Path, *extra: str, allow_file_urls: bool = True
    ) -> None:
        self.cp = cp
        self.workdir = workdir
        # The tests' bare remotes are local paths, which a real deployment refuses.
        self.extra = (*extra, "--allow-file-urls") if allow_file_urls else extra
        self.metrics_port = free_port()
        self.log_path = workdir / f"operator-{time.monotonic_ns()}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Operator:
        self.workdir.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kubescribe",
                "run",
                "--kubeconfig",
                str(self.cp.kubeconfig),
                "--cache-dir",
                str(self.workdir / "cache"),
                "--metrics-addr",
                f"127.0.0.1:{self.metrics_port}",
                *self.extra,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        return self

    def stop(self, timeout: float = 30) -> None:
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
        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return str(r.read().decode())


def condition(
    cp: ControlPlane, kind: str, name: str, namespace: str | None, ctype: str
) -> dict[str, Any] | None:
    args = [kind, name] + (["-n", namespace] if namespace else [])
    obj = cp.get_json(*args)
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return dict(cond)
    return None


def manifest(*docs: dict[str, Any]) -> str:
    return "\n---\n".join(json.dumps(d) for d in docs)
