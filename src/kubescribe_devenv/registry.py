"""A throw-away OCI registry on a random loopback port: the CNCF distribution registry, built
from its Go module by `hack/build-registry.sh` (cached per machine), plain HTTP, filesystem
storage in a work directory, deletes allowed. Its log (one line per request) shows what was
pulled: `manifest_requests()`."""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from kubescribe_devenv.cachedtool import cached_tool
from kubescribe_devenv.controlplane import REPO_ROOT, free_port

BUILD_SCRIPT = REPO_ROOT / "hack" / "build-registry.sh"


class RegistryError(RuntimeError):
    pass


def binary() -> Path:
    """The registry binary: `$KUBESCRIBE_REGISTRY_BIN`, else built (or found cached)."""
    return cached_tool(BUILD_SCRIPT, "registry", "KUBESCRIBE_REGISTRY_BIN", RegistryError)


@dataclass
class Registry:
    """`with Registry(workdir) as r:` serves http://127.0.0.1:<r.port>/v2/."""

    workdir: Path
    port: int = field(default_factory=free_port)

    def __post_init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.workdir / "registry.log"

    def __enter__(self) -> Registry:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _config(self) -> Path:
        config = {  # JSON is YAML
            "version": 0.1,
            "log": {"level": "info", "formatter": "json", "accesslog": {"disabled": False}},
            "storage": {
                "filesystem": {"rootdirectory": str(self.workdir / "data")},
                "delete": {"enabled": True},
            },
            "http": {"addr": self.host, "secret": "kubescribe-devenv-not-secret"},
        }
        path = self.workdir / "config.yml"
        path.write_text(json.dumps(config, indent=1))
        return path

    def get(self, path: str, accept: str = "") -> tuple[int, dict[str, str], bytes]:
        """GET http://<host><path>: status, headers, body (errors included)."""
        request = urllib.request.Request(f"http://{self.host}{path}")
        if accept:
            request.add_header("Accept", accept)
        try:
            with urllib.request.urlopen(request, timeout=5) as resp:
                return resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def start(self, timeout: float = 20) -> None:
        exe = binary()
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self._config()
        self._log = self.log_path.open("wb")
        self._proc = subprocess.Popen(
            [str(exe), "serve", str(config)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RegistryError(
                    f"registry exited with {self._proc.returncode}:\n"
                    f"{self.log_path.read_text(errors='replace')[-3000:]}"
                )
            with contextlib.suppress(OSError):
                if self.get("/v2/")[0] == 200:
                    return
            time.sleep(0.05)
        self.stop()
        raise RegistryError(f"the registry did not answer on {self.host}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def requests(self) -> list[dict[str, Any]]:
        """The requests served so far (method, path, status, user agent), from the access log."""
        found = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and entry.get("msg") == "response completed":
                    found.append(entry)
        return found

    def manifest_requests(self, repository: str) -> list[dict[str, Any]]:
        """GET/HEAD requests of manifests of `repository` (a pull resolves its tag this way)."""
        prefix = f"/v2/{repository}/manifests/"
        return [
            r
            for r in self.requests()
            if r.get("http.request.method") in ("GET", "HEAD")
            and str(r.get("http.request.uri", "")).startswith(prefix)
        ]
