"""Probes of a remote for GitProvider status: may the operator read it, and would it take a push.

`probe_remote` connects twice and transfers no objects. First as a fetch: the server's ref
advertisement, what `git ls-remote` shows. Then as a push: libgit2 connects to the receive-pack
service and reads its advertisement, and then hangs up without sending a single command. That
is where servers refuse read-only credentials (an OpenSSH forced command, HTTP 403 on
`info/refs?service=git-receive-pack`). Branch protection and hooks that decline an update are
only seen by a real push: the branch worker reports those.

Everything here blocks (libgit2); call it from an executor.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pygit2
from pygit2.ffi import C

from kubescribe.api import conditions as c
from kubescribe.git.repo import redact
from kubescribe.git.transport.callbacks import refuse_offsite_redirects, remote_callbacks
from kubescribe.git.transport.errors import GitFailure, classify_git_error
from kubescribe.git.transport.proxy import (
    ProxyConfigError,
    ProxySettings,
    process_settings,
    proxy_failure,
)
from kubescribe.git.transport.secret import Credentials
from kubescribe.git.urlpolicy import UrlRefused, check_url, resolve_host

__all__ = ["RemoteProbe", "Verdict", "probe_remote", "use_home"]

Status = Literal["True", "False", "Unknown"]

# A server that names the credential as the problem has answered: that is a refusal. Any
# other failure (no route, a timeout, a broken transfer) says nothing about permissions.
REFUSALS = frozenset({GitFailure.PERMISSION_DENIED, GitFailure.AUTHENTICATION_FAILED})

_SCRATCH_LOCK = threading.Lock()
_FETCH: int = C.GIT_DIRECTION_FETCH
_PUSH: int = C.GIT_DIRECTION_PUSH


@dataclass(frozen=True)
class Verdict:
    """One probe's outcome, shaped like a condition."""

    status: Status
    reason: str
    message: str


@dataclass(frozen=True)
class RemoteProbe:
    read: Verdict
    write: Verdict


def use_home(home: Path) -> None:
    """Point libgit2's home (its `~/.ssh/known_hosts` hint file, global config) at an
    operator-owned directory. Process-wide: call once.

    libgit2's `server_connect_timeout` is left alone: in libgit2 1.9.7 it leaves the socket
    non-blocking and every HTTPS transfer fails in OpenSSL with EAGAIN."""
    home.mkdir(parents=True, exist_ok=True)
    pygit2.settings.homedir = str(home)


def probe_remote(
    url: str,
    creds: Credentials,
    scratch_dir: Path,
    *,
    allow_file: bool = False,
    resolve: bool = True,
    proxies: ProxySettings | None = None,
) -> RemoteProbe:
    """Read and write probes of `url` with `creds`, through the proxy `proxies` (default:
    the process's environment) name for it; messages never hold a credential."""
    try:
        check_url(url, allow_file, resolve=resolve_host if resolve else None)
    except UrlRefused as refused:
        return RemoteProbe(
            Verdict("False", c.URL_REFUSED, f"{refused.message} ({refused.reason})"),
            Verdict("Unknown", c.URL_REFUSED, "Not probed: the URL is refused"),
        )
    try:
        proxy = (proxies or process_settings()).proxy_for(url)
    except ProxyConfigError as exc:  # `kubescribe run` refuses these at start
        return RemoteProbe(
            Verdict("Unknown", c.PROXY_REFUSED, f"Proxy settings: {exc}"),
            Verdict("Unknown", c.PROXY_REFUSED, "Not probed: the proxy settings are invalid"),
        )
    repo = _scratch(scratch_dir)
    try:
        heads = _connect(repo, url, creds, _FETCH, proxy)
    except Exception as exc:
        reason, message = _failure(exc, creds, url, proxy)
        return RemoteProbe(
            Verdict("False", reason, f"Cannot read the repository: {message}"),
            Verdict("Unknown", reason, "Not probed: the read probe failed"),
        )
    branches = sorted(h.removeprefix("refs/heads/") for h in heads if h.startswith("refs/heads/"))
    shown = ", ".join(branches[:5]) + (", …" if len(branches) > 5 else "")
    read = Verdict(
        "True",
        c.READABLE,
        f"Connected; {len(branches)} branch(es)" + (f": {shown}" if branches else ""),
    )
    try:
        _connect(repo, url, creds, _PUSH, proxy)
    except Exception as exc:
        reason, message = _failure(exc, creds, url, proxy)
        if reason in REFUSALS:
            return RemoteProbe(read, Verdict("False", reason, f"Pushes are refused: {message}"))
        return RemoteProbe(
            read, Verdict("Unknown", reason, f"The push probe could not run: {message}")
        )
    return RemoteProbe(
        read,
        Verdict(
            "True",
            c.WRITABLE,
            "The server offers push access to these credentials (probed without sending"
            " anything; branch protection shows on the first push)",
        ),
    )


def _scratch(scratch_dir: Path) -> pygit2.Repository:
    """An empty bare repository that anonymous remotes hang off; never holds objects."""
    path = scratch_dir / "probe.git"
    with _SCRATCH_LOCK:
        repo: pygit2.Repository | None = None
        if (path / "HEAD").exists():
            with contextlib.suppress(pygit2.GitError):
                repo = pygit2.Repository(str(path))
        if repo is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            repo = pygit2.init_repository(str(path), bare=True)
        refuse_offsite_redirects(repo)
        return repo


def _connect(
    repo: pygit2.Repository, url: str, creds: Credentials, direction: int, proxy: str | None
) -> Iterable[str]:
    remote = repo.remotes.create_anonymous(url)
    callbacks = remote_callbacks(creds, url)
    callbacks.proxied = proxy is not None
    try:
        remote.connect(callbacks=callbacks, direction=direction, proxy=proxy)
        return [str(head.name) for head in remote.list_heads(connect=False)]
    finally:
        del remote  # frees the remote, which hangs up without sending anything


def _failure(
    exc: BaseException, creds: Credentials, url: str, proxy: str | None
) -> tuple[str, str]:
    reason, message = classify_git_error(exc, creds)
    reason, message = proxy_failure(reason, message, proxy)
    return str(reason), redact(message, url).strip()
