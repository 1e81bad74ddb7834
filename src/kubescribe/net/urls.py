"""The one grammar of repository URLs, as Git reads them, and the key of a repository.

Git takes a URL with `://` as a URL, `name::address` as a remote helper, a path starting with
`/`, `.` or `~` as local, and `[user@]host:path` (the host in brackets when it is an IPv6
address, e.g. `git@[2001:db8::1]:org/repo.git`) as SSH in scp-like form; anything else is a
local path. `parse` never raises anything but `UrlSyntaxError`, a `ValueError`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

# The user runs to the last `@` before the host, as ssh reads it; one holding `@` is refused.
_SCP_LIKE = re.compile(
    r"^(?:(?P<user>[^/:\[\]]+)@)?(?P<host>\[[^\]/]*\]|[^/:\[\]@]+):(?P<path>.*)$", re.DOTALL
)
# `user:password@host:path`: the scp-like grammar reads `user` as the host; Git itself would
# read everything before the last `@` as the user name.
_SCP_PASSWORD = re.compile(r"^[^@/\[\]]*:[^/]*@")
_HELPER = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_SSH = frozenset({"ssh", "git+ssh", "ssh+git"})
_DEFAULT_PORTS = {"http": 80, "https": 443, "ssh": 22, "git+ssh": 22, "ssh+git": 22, "git": 9418}


class UrlSyntaxError(ValueError):
    """The URL does not parse; the message never repeats the URL."""


class Form(StrEnum):
    URL = "url"  # scheme://...
    SCP = "scp"  # [user@]host:path (SSH)
    LOCAL = "local"  # a path on this machine
    HELPER = "helper"  # name::address, a remote helper


@dataclass(frozen=True)
class RemoteUrl:
    """A parsed repository URL. `host` is lowercase without brackets; `port` None when not
    given; `password` says that the user info holds one (its value is not kept)."""

    form: Form
    scheme: str
    host: str = ""
    port: int | None = None
    user: str | None = None
    password: bool = False
    path: str = ""


def parse(url: str) -> RemoteUrl:
    """Read `url` as Git does (see the module). Raises `UrlSyntaxError` when it cannot be."""
    if _HELPER.match(url):
        return RemoteUrl(Form.HELPER, url.split("::", 1)[0].lower(), path=url.split("::", 1)[1])
    if "://" in url:
        return _parse_url(url)
    if url.startswith(("/", ".", "~")) or (scp := _SCP_LIKE.match(url)) is None:
        return RemoteUrl(Form.LOCAL, "file", path=url)
    host = scp["host"]
    if scp["user"] is not None and "@" in scp["user"]:
        raise UrlSyntaxError("more than one `@` before the host: which is the host is unclear")
    if host.startswith("["):
        host = host[1:-1]
        if _ipv6(host) is None:
            raise UrlSyntaxError("the host in brackets is not an IPv6 address")
    return RemoteUrl(
        Form.SCP,
        "ssh",
        host=host.lower(),
        user=scp["user"],
        password=_SCP_PASSWORD.match(url) is not None,
        path=scp["path"],
    )


def _parse_url(url: str) -> RemoteUrl:
    try:
        parts = urlsplit(url)
        port = parts.port
        host = parts.hostname or ""
    except ValueError:
        raise UrlSyntaxError("the URL does not parse") from None
    if "[" in parts.netloc and _ipv6(host) is None:
        raise UrlSyntaxError("the host in brackets is not an IPv6 address")
    return RemoteUrl(
        Form.URL,
        parts.scheme.lower(),
        host=host,
        port=port,
        user=parts.username,
        password=parts.password is not None,
        path=parts.path,
    )


def _ipv6(text: str) -> ipaddress.IPv6Address | None:
    try:
        return ipaddress.IPv6Address(text.split("%", 1)[0])
    except ValueError:
        return None


def normalize(url: str) -> str:
    """The key of a repository for "one writer per (repository, branch)".

    Lowercases scheme and host, drops default ports, credentials (an SSH user name is kept:
    it is part of the address, not a secret), a trailing `/` and `.git`; `user@host:path`
    becomes `ssh://user@host/path` and a local path a file:// URL. Raises `UrlSyntaxError`
    for what `parse` refuses.
    """
    remote = parse(url.strip())
    if remote.form is Form.LOCAL:
        return normalize(Path(remote.path).absolute().as_uri())
    if remote.form is Form.HELPER:
        return f"{remote.scheme}::{remote.path}"
    host = f"[{remote.host}]" if ":" in remote.host else remote.host
    if remote.port is not None and remote.port != _DEFAULT_PORTS.get(remote.scheme):
        host = f"{host}:{remote.port}"
    scheme = "ssh" if remote.form is Form.SCP or remote.scheme in _SSH else remote.scheme
    if scheme == "ssh" and remote.user:
        host = f"{remote.user}@{host}"
    path = remote.path if remote.form is Form.URL else "/" + remote.path.lstrip("/")
    path = path.rstrip("/").removesuffix(".git").rstrip("/")
    return urlunsplit((scheme, host, path, "", ""))
