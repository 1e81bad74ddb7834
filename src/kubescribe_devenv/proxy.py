"""A throw-away HTTP proxy (Debian `tinyproxy`) on a random loopback port, for proving that Git
transfers go through `HTTPS_PROXY` and that `NO_PROXY` bypasses it.

Its log (`workdir/tinyproxy.log`, level Connect) has one line per request it took, e.g.
`Request (file descriptor 7): CONNECT 127.0.0.1:40687 HTTP/1.1`; `connects()` reads them.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from kubescribe_devenv.controlplane import free_port

_REQUEST = re.compile(r"Request \(file descriptor \d+\): (\S+) (\S+) HTTP/")


def tinyproxy_binary() -> str | None:
    found = shutil.which("tinyproxy")
    if found:
        return found
    return next(
        (p for p in ("/usr/bin/tinyproxy", "/usr/sbin/tinyproxy") if os.access(p, os.X_OK)), None
    )


@dataclass
class TinyProxy:
    """tinyproxy listening on `127.0.0.1:port`, taking requests from loopback only.

    `connect_ports`: the only ports CONNECT may reach (empty: any), to make it refuse."""

    workdir: Path
    port: int = field(default_factory=free_port)
    connect_ports: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        self.workdir = self.workdir.absolute()
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "tinyproxy.log"

    def connects(self) -> list[str]:
        """The targets of the CONNECT requests taken so far (`host:port`), oldest first."""
        return [target for method, target in self.requests() if method == "CONNECT"]

    def requests(self) -> list[tuple[str, str]]:
        """(method, target) of every request taken so far."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return []
        return [(m[1], m[2]) for m in _REQUEST.finditer(text)]

    def start(self, timeout: float = 10) -> TinyProxy:
        binary = tinyproxy_binary()
        if binary is None:
            raise RuntimeError("tinyproxy is not installed (apt-get install tinyproxy)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        lines = [
            f"Port {self.port}",
            "Listen 127.0.0.1",
            "Timeout 60",
            f'LogFile "{self.log_path}"',
            "LogLevel Connect",
            f'PidFile "{self.workdir / "tinyproxy.pid"}"',
            "MaxClients 32",
            "Allow 127.0.0.1",
            "DisableViaHeader Yes",
            *(f"ConnectPort {port}" for port in self.connect_ports),
        ]
        if os.geteuid() == 0:  # tinyproxy drops to this user; it only reads and writes workdir
            lines += ["User root", "Group root"]
        config = self.workdir / "tinyproxy.conf"
        config.write_text("\n".join(lines) + "\n")
        with (self.workdir / "tinyproxy.out").open("ab") as out:
            self._proc = subprocess.Popen(
                [binary, "-d", "-c", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"tinyproxy exited: {self._tail()}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"tinyproxy did not listen on port {self.port}: {self._tail()}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=5)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> TinyProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _tail(self) -> str:
        parts = []
        for name in ("tinyproxy.out", "tinyproxy.log"):
            with contextlib.suppress(OSError):
                parts.append(f"{name}: {(self.workdir / name).read_text()[-1500:]}")
        return "\n".join(parts) or "(no log)"
