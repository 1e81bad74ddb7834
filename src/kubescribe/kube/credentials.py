"""Bearer credentials of an API server connection, kept fresh as kubectl keeps them.

- `StaticToken`: a kubeconfig's `token`.
- `TokenFile`: a kubeconfig's `tokenFile` or the in-cluster projected token. Read again when the
  file changes (kubelet swaps a symlink when it rotates a projected token) and at least once a
  minute, as client-go's cached token source does, and after a 401.
- `ExecPlugin`: a kubeconfig's `exec` (EKS, GKE, AKS, OIDC helpers): the plugin is run once and
  its ExecCredential reused until nine tenths of its life (`status.expirationTimestamp`) have
  passed, so the next token is in use before the last one expires; after a 401 it runs again.

`header()` gives the Authorization header; `rejected(header)` tells the credentials that the API
server answered 401 to it, and returns whether asking again may give another.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kubescribe.waits import within

TOKEN_FILE_PERIOD = 60.0  # seconds: client-go re-reads a token file once a minute
EXEC_TIMEOUT = 120.0  # seconds an exec plugin may take (a hung one would stall every request)
EXEC_API_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")


class CredentialError(Exception):
    """Credentials cannot be obtained (a plugin failed, a token file cannot be read)."""


class Credentials(Protocol):
    async def header(self) -> str | None: ...

    def rejected(self, header: str | None) -> bool: ...


@dataclass
class StaticToken:
    token: str

    async def header(self) -> str | None:
        return f"Bearer {self.token}"

    def rejected(self, header: str | None) -> bool:
        return False


@dataclass
class TokenFile:
    """A token file, re-read when it changes, every `period` seconds, and after a 401."""

    path: Path
    period: float = TOKEN_FILE_PERIOD
    clock: Callable[[], float] = time.monotonic
    _token: str | None = field(default=None, init=False)
    _read_at: float = field(default=0.0, init=False)
    _stat: tuple[int, int, int] | None = field(default=None, init=False)

    def _current(self) -> str:
        try:
            st = self.path.stat()
        except OSError as exc:
            if self._token is not None:
                return self._token  # mid-rotation: keep the last token until the file is back
            raise CredentialError(f"token file {self.path}: {exc.strerror}") from None
        stat = (st.st_ino, st.st_mtime_ns, st.st_size)
        now = self.clock()
        if self._token is None or stat != self._stat or now - self._read_at >= self.period:
            try:
                token = self.path.read_text().strip()
            except OSError as exc:
                if self._token is not None:
                    return self._token
                raise CredentialError(f"token file {self.path}: {exc.strerror}") from None
            if token or self._token is None:
                self._token = token
            self._stat, self._read_at = stat, now
        return self._token or ""

    async def header(self) -> str | None:
        token = self._current()
        return f"Bearer {token}" if token else None

    def rejected(self, header: str | None) -> bool:
        self._stat = None  # read again at the next request
        return True


def _timestamp(value: Any) -> float | None:
    if not value:
        return None
    try:
        when = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise CredentialError(
            f"the exec plugin's expirationTimestamp {value!r} is not an RFC 3339 time"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.timestamp()


@dataclass
class ExecPlugin:
    """A kubeconfig's `exec` entry (`spec`, paths resolved against `base`)."""

    spec: Mapping[str, Any]
    base: Path
    cluster: Mapping[str, Any] = field(default_factory=dict)
    tls: ssl.SSLContext | None = None  # receives a client certificate the plugin returns
    clock: Callable[[], float] = time.time
    _header: str | None = field(default=None, init=False)
    _fresh: bool = field(default=False, init=False)
    _refresh_at: float | None = field(default=None, init=False)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock, init=False)
    runs: int = field(default=0, init=False)

    @property
    def command(self) -> str:
        command = str(self.spec.get("command") or "")
        # kubectl: a command with a path separator is relative to the kubeconfig's folder
        if os.sep in command and not os.path.isabs(command):
            return str(self.base / command)
        return command

    def _due(self) -> bool:
        return not self._fresh or (
            self._refresh_at is not None and self.clock() >= self._refresh_at
        )

    async def header(self) -> str | None:
        if self._due():
            async with self._lock:
                if self._due():
                    await self._run()
        return self._header

    def rejected(self, header: str | None) -> bool:
        if header == self._header:
            self._fresh = False  # a 401: run the plugin again at the next request
        return True

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        for item in self.spec.get("env") or []:
            if isinstance(item, Mapping) and item.get("name"):
                env[str(item["name"])] = str(item.get("value", ""))
        info: dict[str, Any] = {
            "apiVersion": self.spec.get("apiVersion") or EXEC_API_VERSIONS[0],
            "kind": "ExecCredential",
            "spec": {"interactive": False},
        }
        if self.spec.get("provideClusterInfo"):
            info["spec"]["cluster"] = {
                key: value
                for key, value in (
                    ("server", self.cluster.get("server")),
                    ("certificate-authority-data", self.cluster.get("certificate-authority-data")),
                    ("insecure-skip-tls-verify", self.cluster.get("insecure-skip-tls-verify")),
                )
                if value is not None
            }
        env["KUBERNETES_EXEC_INFO"] = json.dumps(info)
        return env

    def _failure(self, what: str) -> CredentialError:
        hint = str(self.spec.get("installHint") or "").strip()
        return CredentialError(
            f"exec plugin {self.command!r} {what}" + (f" ({hint.splitlines()[0]})" if hint else "")
        )

    async def _run(self) -> None:
        command = self.command
        if not command:
            raise CredentialError("the kubeconfig's exec entry has no command")
        args = [str(a) for a in self.spec.get("args") or []]
        try:
            proc = await asyncio.create_subprocess_exec(
                command,
                *args,
                env=self._environment(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except FileNotFoundError:
            raise self._failure("not found: install it or fix the path in the kubeconfig") from None
        except PermissionError:
            raise self._failure("is not executable") from None
        talk = asyncio.ensure_future(proc.communicate())
        if not await within(talk, EXEC_TIMEOUT):
            proc.kill()
            await proc.wait()
            raise self._failure(f"gave no answer in {EXEC_TIMEOUT:.0f} s")
        out, err = talk.result()
        self.runs += 1
        if proc.returncode != 0:
            last = (err.decode(errors="replace").strip().splitlines() or [""])[-1]
            raise self._failure(f"exited with {proc.returncode}: {last[:300]}")
        self._accept(out)

    def _accept(self, out: bytes) -> None:
        try:
            doc = json.loads(out)
        except ValueError:
            raise self._failure("did not print an ExecCredential (JSON)") from None
        if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
            raise self._failure("did not print an ExecCredential")
        want = self.spec.get("apiVersion")
        if want and doc.get("apiVersion") != want:
            raise self._failure(f"answered {doc.get('apiVersion')!r}, the kubeconfig asks {want!r}")
        status = doc.get("status") or {}
        token = status.get("token")
        cert, key = status.get("clientCertificateData"), status.get("clientKeyData")
        if not token and not (cert and key):
            raise self._failure("gave neither a token nor a client certificate")
        if cert and key and self.tls is not None:
            load_pem_chain(self.tls, str(cert).encode(), str(key).encode())
        now = self.clock()
        expiry = _timestamp(status.get("expirationTimestamp"))
        # Nine tenths of its life: the next credential is in use before this one expires.
        self._refresh_at = None if expiry is None else now + max(0.0, expiry - now) * 0.9
        self._header = f"Bearer {token}" if token else None
        self._fresh = True


def load_pem_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """load_cert_chain only reads files: stage them in a private folder for the call."""
    with tempfile.TemporaryDirectory(prefix="kubescribe-tls-") as tmp:
        cert_path, key_path = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        cert_path.write_bytes(cert)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        ctx.load_cert_chain(cert_path, key_path)
