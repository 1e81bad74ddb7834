"""A throw-away Git server over HTTPS: `git http-backend` behind nginx on a random loopback port.

nginx terminates TLS (a certificate from `CertificateAuthority`) and checks HTTP basic auth
or a bearer token; fcgiwrap runs a small CGI wrapper that answers 403 to pushes by read-only
users and otherwise hands over to `git http-backend`. Users, tokens and repositories can be
added while the server runs (nginx and the wrapper read their files on every request). Logs
are kept in `workdir` (`nginx-error.log`, `nginx-access.log`, `fcgiwrap.log`).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from kubescribe_devenv.controlplane import free_port
from kubescribe_devenv.gitremote import BareRemote
from kubescribe_devenv.pki import CertificateAuthority

_GIT_WRAPPER = """#!/bin/sh
# Read-only users may fetch but not push.
case "$QUERY_STRING $PATH_INFO" in
  *git-receive-pack*)
    if grep -qxF -- "$REMOTE_USER" "$KUBESCRIBE_READ_ONLY"; then
      printf 'Status: 403 Forbidden\\r\\nContent-Type: text/plain\\r\\n\\r\\n'
      echo "push denied: $REMOTE_USER has read-only access"
      exit 0
    fi ;;
esac
#UPLOAD-PACK#
exec "$KUBESCRIBE_GIT" http-backend
"""

_UPLOAD_PACK = """case "$QUERY_STRING $PATH_INFO" in
  *git-upload-pack*) exec "$KUBESCRIBE_PYTHON" "$KUBESCRIBE_UPLOAD_PACK" ;;
esac"""

# Runs `git http-backend` for upload-pack requests: records each advertisement and request body
# and the response, drops capabilities from the advertisement, and refuses (400, as Azure DevOps
# does) a request whose first want line lacks a required capability.
_UPLOAD_PACK_FILTER = """import gzip, os, subprocess, sys, time
log = os.environ["KUBESCRIBE_UPLOAD_LOG"]
drop = set(os.environ["KUBESCRIBE_DROP_CAPS"].split(",")) - {"-"}
need = set(os.environ["KUBESCRIBE_NEED_CAPS"].split(",")) - {"-"}
git, stamp = os.environ["KUBESCRIBE_GIT"], time.time_ns()


def lines(data):
    i = 0
    while i + 4 <= len(data):
        n = int(data[i : i + 4], 16)
        yield data[i + 4 : i + n] if n else b""
        i += n or 4


def pkt(line):
    return b"%04x" % (len(line) + 4) + line if line else b"0000"


def strip(payload):
    out, first = [], True
    for line in lines(payload):
        if first and b"\\0" in line:
            ref, caps = line.split(b"\\0", 1)
            kept = [c for c in caps.strip().split(b" ") if c.decode() not in drop]
            line, first = ref + b"\\0" + b" ".join(kept) + b"\\n", False
        out.append(pkt(line))
    return b"".join(out)


if os.environ.get("REQUEST_METHOD") == "POST":
    body = sys.stdin.buffer.read()
    plain = gzip.decompress(body) if os.environ.get("HTTP_CONTENT_ENCODING") == "gzip" else body
    with open(f"{log}/request-{stamp}.bin", "wb") as f:
        f.write(plain)
    want = next((x for x in lines(plain) if x.startswith(b"want ")), b"")
    missing = sorted(c for c in need if c.encode() not in want.split())
    if missing:
        sys.stdout.buffer.write(b"Status: 400 Bad Request\\r\\n")
        sys.stdout.buffer.write(b"Content-Type: text/plain\\r\\n\\r\\n")
        sys.stdout.buffer.write(f"clients must support {', '.join(missing)}\\n".encode())
        sys.exit(0)
    done = subprocess.run([git, "http-backend"], input=body, capture_output=True, check=False)
    with open(f"{log}/response-{stamp}.bin", "wb") as f:
        f.write(done.stdout)
    sys.stdout.buffer.write(done.stdout)
else:
    done = subprocess.run([git, "http-backend"], stdin=subprocess.DEVNULL, capture_output=True)
    head, _, payload = done.stdout.partition(b"\\r\\n\\r\\n")
    kept = [h for h in head.split(b"\\r\\n") if not h.lower().startswith(b"content-length")]
    head = b"\\r\\n".join(kept)
    payload = strip(payload) if b"service=git-upload-pack" in payload[:64] else payload
    with open(f"{log}/advertisement-{stamp}.bin", "wb") as f:
        f.write(payload)
    sys.stdout.buffer.write(head + b"\\r\\n\\r\\n" + payload)
"""

_BEARER_CHECK = """#!/bin/sh
# auth_request target: 204 with the token's user for a known bearer token, 401 otherwise.
token="${HTTP_AUTHORIZATION#Bearer }"
if [ -n "$token" ] && [ "$token" != "$HTTP_AUTHORIZATION" ]; then
  user=$(awk -v t="$token" '$1 == t { print $2; exit }' "$KUBESCRIBE_TOKENS")
  if [ -n "$user" ]; then
    printf 'Status: 204 No Content\\r\\nX-User: %s\\r\\n\\r\\n' "$user"
    exit 0
  fi
fi
printf 'Status: 401 Unauthorized\\r\\n\\r\\n'
"""


def _binary(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    return next(
        (p for d in ("/usr/sbin", "/usr/local/sbin") if os.access(p := f"{d}/{name}", os.X_OK)),
        None,
    )


def missing_binaries() -> list[str]:
    """The programs this server needs that are not installed."""
    return [name for name in ("nginx", "fcgiwrap", "git") if _binary(name) is None]


def _ssha(password: str) -> str:
    """nginx's salted SHA-1 password format (`{SSHA}`); no htpasswd binary needed."""
    salt = os.urandom(8)
    digest = hashlib.sha1(password.encode() + salt).digest()
    return "{SSHA}" + base64.b64encode(digest + salt).decode()


@dataclass
class HttpsGitServer:
    """nginx + fcgiwrap + `git http-backend` serving `workdir/repos` at `https://127.0.0.1:PORT/`."""

    workdir: Path
    ca: CertificateAuthority = field(default_factory=CertificateAuthority)
    port: int = field(default_factory=free_port)
    # Upload-pack (fetch) traffic: recorded under `workdir/upload-pack` when `trace_upload_pack`
    # (see `upload_pack_log`); capabilities dropped from the advertisement; capabilities each
    # request's first want line must name (400 otherwise, as Azure DevOps answers without
    # `multi_ack`).
    trace_upload_pack: bool = False
    drop_capabilities: tuple[str, ...] = ()
    require_capabilities: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.workdir = self.workdir.absolute()
        self._procs: list[tuple[str, subprocess.Popen[bytes]]] = []
        self._users: dict[str, str] = {}
        self._tokens: dict[str, str] = {}
        self._read_only: set[str] = set()

    @property
    def repos_dir(self) -> Path:
        return self.workdir / "repos"

    @property
    def upload_pack_log(self) -> Path:
        """Advertisements, request bodies (decompressed) and responses of upload-pack, one file
        each, named `advertisement-`, `request-`, `response-` and a time in ns."""
        return self.workdir / "upload-pack"

    def upload_pack_files(self, kind: str) -> list[bytes]:
        """The recorded files of one kind, oldest first."""
        paths = sorted(
            self.upload_pack_log.glob(f"{kind}-*.bin"), key=lambda p: int(p.stem.split("-")[1])
        )
        return [p.read_bytes() for p in paths]

    @property
    def ca_pem(self) -> bytes:
        return self.ca.cert_pem

    def url_for(self, repo_name: str) -> str:
        name = repo_name if repo_name.endswith(".git") else f"{repo_name}.git"
        return f"https://127.0.0.1:{self.port}/{name}"

    def create_repo(self, name: str, branch: str = "main") -> BareRemote:
        path = self.repos_dir / (name if name.endswith(".git") else f"{name}.git")
        return BareRemote.create(path, branch)

    def add_user(self, name: str, password: str, read_only: bool = False) -> None:
        """Accept `name`/`password` over basic auth."""
        self._users[name] = _ssha(password)
        self._set_access(name, read_only)
        self._write("htpasswd", "".join(f"{u}:{h}\n" for u, h in self._users.items()))

    def add_bearer_token(self, token: str, user: str, read_only: bool = False) -> None:
        """Accept `Authorization: Bearer <token>` as `user`."""
        self._tokens[token] = user
        self._set_access(user, read_only)
        self._write("tokens", "".join(f"{t} {u}\n" for t, u in self._tokens.items()))

    def start(self, timeout: float = 10) -> HttpsGitServer:
        missing = missing_binaries()
        if missing:
            raise RuntimeError(
                f"not installed: {', '.join(missing)} (apt-get install nginx fcgiwrap)"
            )
        self.repos_dir.mkdir(parents=True, exist_ok=True)
        for name in ("htpasswd", "tokens", "read-only"):
            (self.workdir / name).touch()
        tls = self.ca.issue("127.0.0.1", hosts=("127.0.0.1", "localhost"))
        self._write("tls.crt", tls.cert_pem.decode())
        self._write("tls.key", tls.key_pem.decode())
        (self.workdir / "tls.key").chmod(0o600)
        traced = self.trace_upload_pack or self.drop_capabilities or self.require_capabilities
        wrapper = _GIT_WRAPPER.replace("#UPLOAD-PACK#", _UPLOAD_PACK if traced else "")
        self.upload_pack_log.mkdir(exist_ok=True)
        self._write("upload-pack.py", _UPLOAD_PACK_FILTER)
        for name, text in (("git-http.sh", wrapper), ("bearer.sh", _BEARER_CHECK)):
            self._write(name, text)
            (self.workdir / name).chmod(0o755)
        socket_path = self.workdir / "fcgiwrap.sock"
        socket_path.unlink(missing_ok=True)
        self._write("nginx.conf", self._nginx_conf(socket_path))
        commands = {
            "fcgiwrap": ["-c", "4", "-s", f"unix:{socket_path}"],
            "nginx": [
                "-p", str(self.workdir),
                "-c", str(self.workdir / "nginx.conf"),
                "-e", str(self.workdir / "nginx-error.log"),
            ],
        }  # fmt: skip
        with (self.workdir / "fcgiwrap.log").open("ab") as log:
            for name, args in commands.items():
                # Own process group: fcgiwrap's pre-forked workers outlive a signal to it alone.
                proc = subprocess.Popen(
                    [str(_binary(name)), *args],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
                self._procs.append((name, proc))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            exited = [name for name, proc in self._procs if proc.poll() is not None]
            if exited:
                self.stop()
                raise RuntimeError(f"{exited[0]} exited: {self._log_tail()}")
            if socket_path.exists() and self._tls_answers():
                return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nginx did not answer on port {self.port}: {self._log_tail()}")

    def stop(self) -> None:
        for _, proc in reversed(self._procs):
            for sig in (signal.SIGTERM, signal.SIGKILL):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig)
                try:
                    proc.wait(timeout=5)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self._procs.clear()

    def __enter__(self) -> HttpsGitServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _set_access(self, user: str, read_only: bool) -> None:
        if read_only:
            self._read_only.add(user)
        else:
            self._read_only.discard(user)
        self._write("read-only", "".join(f"{u}\n" for u in sorted(self._read_only)))

    def _write(self, name: str, text: str) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        scratch = self.workdir / f".{name}.new"
        scratch.write_text(text)
        scratch.replace(self.workdir / name)

    def _nginx_conf(self, socket_path: Path) -> str:
        w = self.workdir
        cgi_env = (
            f"fastcgi_param PATH {os.environ.get('PATH', '/usr/bin:/bin')};\n"
            f"fastcgi_param HOME {w};\n"
            f"fastcgi_param KUBESCRIBE_GIT {_binary('git')};\n"
            f"fastcgi_param KUBESCRIBE_READ_ONLY {w / 'read-only'};\n"
            f"fastcgi_param KUBESCRIBE_TOKENS {w / 'tokens'};\n"
            f"fastcgi_param KUBESCRIBE_PYTHON {sys.executable};\n"
            f"fastcgi_param KUBESCRIBE_UPLOAD_PACK {w / 'upload-pack.py'};\n"
            f"fastcgi_param KUBESCRIBE_UPLOAD_LOG {self.upload_pack_log};\n"
            f"fastcgi_param KUBESCRIBE_DROP_CAPS {','.join(self.drop_capabilities) or '-'};\n"
            f"fastcgi_param KUBESCRIBE_NEED_CAPS {','.join(self.require_capabilities) or '-'};\n"
            "fastcgi_param HTTP_CONTENT_ENCODING $http_content_encoding;\n"
            "fastcgi_param REQUEST_METHOD $request_method;\n"
            "fastcgi_param QUERY_STRING $query_string;\n"
            "fastcgi_param CONTENT_TYPE $content_type;\n"
            "fastcgi_param CONTENT_LENGTH $content_length;\n"
            "fastcgi_param SERVER_PROTOCOL $server_protocol;\n"
            "fastcgi_param REMOTE_ADDR $remote_addr;\n"
            f"fastcgi_pass unix:{socket_path};\n"
        )
        return f"""
daemon off;
master_process on;
user root;
worker_processes 1;
pid {w / "nginx.pid"};
error_log {w / "nginx-error.log"} info;
events {{ worker_connections 64; }}
http {{
  access_log {w / "nginx-access.log"};
  client_body_temp_path {w / "tmp-body"};
  fastcgi_temp_path {w / "tmp-fastcgi"};
  proxy_temp_path {w / "tmp-proxy"};
  uwsgi_temp_path {w / "tmp-uwsgi"};
  scgi_temp_path {w / "tmp-scgi"};
  client_max_body_size 0;
  server {{
    listen 127.0.0.1:{self.port} ssl;
    ssl_certificate {w / "tls.crt"};
    ssl_certificate_key {w / "tls.key"};
    location = /_bearer {{
      internal;
      fastcgi_pass_request_body off;
      {cgi_env}
      fastcgi_param CONTENT_LENGTH "";
      fastcgi_param SCRIPT_FILENAME {w / "bearer.sh"};
    }}
    location / {{
      satisfy any;
      auth_basic "kubescribe test git";
      auth_basic_user_file {w / "htpasswd"};
      auth_request /_bearer;
      auth_request_set $bearer_user $upstream_http_x_user;
      {cgi_env}
      fastcgi_param SCRIPT_FILENAME {w / "git-http.sh"};
      fastcgi_param PATH_INFO $uri;
      fastcgi_param REMOTE_USER $remote_user$bearer_user;
      fastcgi_param GIT_PROJECT_ROOT {self.repos_dir};
      fastcgi_param GIT_HTTP_EXPORT_ALL 1;
    }}
  }}
}}
"""

    def _tls_answers(self) -> bool:
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        try:
            with (
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock,
                context.wrap_socket(sock, server_hostname="127.0.0.1"),
            ):
                return True
        except OSError:
            return False

    def _log_tail(self) -> str:
        parts = []
        for name in ("nginx-error.log", "fcgiwrap.log"):
            try:
                parts.append(f"{name}: {(self.workdir / name).read_text()[-1500:]}")
            except OSError:
                continue
        return "\n".join(parts) or "(no log)"
