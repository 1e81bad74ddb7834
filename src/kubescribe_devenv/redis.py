"""A throw-away Redis server (Debian `redis-server`) on a random loopback port, optionally
behind TLS only and a password."""

from __future__ import annotations

import contextlib
import shutil
import socket
import ssl
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from kubescribe_devenv.controlplane import free_port

# The Redis entry-signing key of operators started by the dev tools (never for a real install).
DEV_HMAC_KEY = "kubescribe-devenv-redis-hmac-key-not-secret"


@dataclass(frozen=True)
class RedisTls:
    """PEM files of the server's certificate and key, and of the CA that signs it."""

    cert: Path
    key: Path
    ca: Path


@dataclass
class RedisServer:
    workdir: Path
    port: int = field(default_factory=free_port)
    tls: RedisTls | None = None  # set: TLS only (no plain port)
    password: str = ""

    def __post_init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://127.0.0.1:{self.port}/0"

    def _listen_args(self) -> list[str]:
        args = ["--requirepass", self.password] if self.password else []
        if self.tls is None:
            return [*args, "--port", str(self.port)]
        return [
            *args,
            "--port",
            "0",
            "--tls-port",
            str(self.port),
            "--tls-cert-file",
            str(self.tls.cert),
            "--tls-key-file",
            str(self.tls.key),
            "--tls-ca-cert-file",
            str(self.tls.ca),
            "--tls-auth-clients",
            "no",
        ]

    def _answers(self) -> bool:
        with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as raw:
            sock: socket.socket = raw
            if self.tls is not None:
                ctx = ssl.create_default_context(cafile=str(self.tls.ca))
                sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
            sock.sendall(b"PING\r\n")
            reply = sock.recv(64)
            # With a password the server answers NOAUTH: it is up all the same.
            return reply.startswith((b"+PONG", b"-NOAUTH"))

    def start(self, timeout: float = 10) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (apt-get install redis-server)")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            [
                binary,
                *self._listen_args(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
                "--logfile",
                str(self.workdir / "redis.log"),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                if self._answers():
                    return
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(timeout=5)
