"""A throw-away Git server over SSH: the real OpenSSH `sshd` on a random loopback port.

It runs as root with its own config, host key and authorized_keys in `workdir`, and serves
bare repositories under `workdir/repos` to the local `root` account (key login only). Keys
added with `read_only=True` are forced through a wrapper that only runs `git-upload-pack`
and refuses pushes with a message on stderr, the way hosted Git servers refuse read-only
deploy keys. The server log is kept in `workdir/sshd.log`.
"""

from __future__ import annotations

import os
import shlex
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from kubescribe_devenv.controlplane import free_port
from kubescribe_devenv.gitremote import BareRemote

# Debian keeps sshd outside an unprivileged PATH; sshd must be started by absolute path.
_SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
READ_ONLY_REFUSAL = "ERROR: this key is read only; push denied"

_READ_ONLY_WRAPPER = f"""#!/bin/sh
# Forced command of read-only keys: fetches only.
case "$SSH_ORIGINAL_COMMAND" in
  "git-upload-pack "*|"git upload-pack "*) exec git-shell -c "$SSH_ORIGINAL_COMMAND" ;;
esac
echo {shlex.quote(READ_ONLY_REFUSAL)} >&2
exit 1
"""


def sshd_binary() -> str | None:
    """The absolute path of `sshd`, or None when openssh-server is not installed."""
    found = shutil.which("sshd")
    if found:
        return found
    return next((c for c in _SSHD_CANDIDATES if os.access(c, os.X_OK)), None)


@dataclass
class SshGitServer:
    """`sshd -D` serving bare repositories under `workdir/repos` to `root`."""

    workdir: Path
    port: int = field(default_factory=free_port)
    user: str = "root"
    # Host key types, in the server's order; hosted services offer several (GitHub: all three).
    host_key_types: tuple[str, ...] = ("ed25519",)

    def __post_init__(self) -> None:
        self.workdir = self.workdir.absolute()
        self._proc: subprocess.Popen[bytes] | None = None
        self._keys: list[str] = []

    @property
    def repos_dir(self) -> Path:
        return self.workdir / "repos"

    @property
    def log_path(self) -> Path:
        return self.workdir / "sshd.log"

    @property
    def host_public_key(self) -> str:
        """The server's first host key as `ssh-ed25519 AAAA...` (no comment)."""
        return self._public_host_key(self.host_key_types[0])

    @property
    def host_key_line(self) -> str:
        """A known_hosts line for the first host key (`[127.0.0.1]:PORT ssh-ed25519 AAAA...`)."""
        return f"[127.0.0.1]:{self.port} {self.host_public_key}"

    @property
    def host_key_lines(self) -> list[str]:
        """known_hosts lines for every host key, as `ssh-keyscan` would print them."""
        return [f"[127.0.0.1]:{self.port} {self._public_host_key(t)}" for t in self.host_key_types]

    def url_for(self, repo_name: str) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}{self._repo_path(repo_name)}"

    def create_repo(self, name: str, branch: str = "main") -> BareRemote:
        return BareRemote.create(self._repo_path(name), branch)

    def authorize(self, public_key_line: str, read_only: bool = False) -> None:
        """Allow a key (`ssh-ed25519 AAAA... comment`); a read-only key may only fetch."""
        options = "restrict"
        if read_only:
            options += f',command="{self.workdir / "read-only.sh"}"'
        self._keys.append(f"{options} {public_key_line.strip()}")
        scratch = self.workdir / "authorized_keys.new"
        scratch.write_text("".join(f"{line}\n" for line in self._keys))
        scratch.replace(self.workdir / "authorized_keys")

    def start(self, timeout: float = 10) -> SshGitServer:
        binary = sshd_binary()
        if binary is None:
            raise RuntimeError("sshd is not installed (apt-get install openssh-server)")
        self.repos_dir.mkdir(parents=True, exist_ok=True)
        # sshd refuses to start without its privilege separation directory.
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
        for kind in self.host_key_types:
            host_key = self._host_key_path(kind)
            if not host_key.exists():
                subprocess.run(
                    ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", "", "-f", str(host_key)],
                    check=True,
                    capture_output=True,
                )
        wrapper = self.workdir / "read-only.sh"
        wrapper.write_text(_READ_ONLY_WRAPPER)
        wrapper.chmod(0o755)
        (self.workdir / "authorized_keys").touch()
        config = self.workdir / "sshd_config"
        host_keys = [f"HostKey {self._host_key_path(kind)}" for kind in self.host_key_types]
        settings = [
            f"Port {self.port}",
            "ListenAddress 127.0.0.1",
            *host_keys,
            f"PidFile {self.workdir / 'sshd.pid'}",
            f"AuthorizedKeysFile {self.workdir / 'authorized_keys'}",
            f"AllowUsers {self.user}",
            "PermitRootLogin prohibit-password",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PermitUserEnvironment no",
            "AllowTcpForwarding no",
            "X11Forwarding no",
            "PrintMotd no",
            "LogLevel VERBOSE",
        ]
        config.write_text("".join(f"{line}\n" for line in settings))
        self._proc = subprocess.Popen(
            [binary, "-D", "-e", "-f", str(config), "-E", str(self.log_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self._proc.returncode}: {self._log_tail()}")
            if self._banner():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"sshd did not answer on port {self.port}: {self._log_tail()}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def __enter__(self) -> SshGitServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _host_key_path(self, kind: str) -> Path:
        return self.workdir / f"ssh_host_{kind}_key"

    def _public_host_key(self, kind: str) -> str:
        text = self._host_key_path(kind).with_suffix(".pub").read_text().split()
        return f"{text[0]} {text[1]}"

    def _repo_path(self, name: str) -> Path:
        return self.repos_dir / (name if name.endswith(".git") else f"{name}.git")

    def _banner(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                return sock.recv(8).startswith(b"SSH-2.0")
        except OSError:
            return False

    def _log_tail(self) -> str:
        try:
            return self.log_path.read_text()[-2000:]
        except OSError:
            return "(no log)"
