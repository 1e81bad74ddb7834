"""Which repository URLs the operator may connect to, so it cannot be used as a network probe.

Allowed: `https://`, `ssh://` (also `git+ssh://`, `ssh+git://`) and scp-like `user@host:path`.
`http://` and `git://` only with `allow_insecure`, `file://` and local paths only with
`allow_file` (an operator flag, never a per-object setting). Always refused: credentials in
the URL (an SSH user name is an address, not a secret, and stays allowed; any user info in an
HTTP URL is refused because tokens are often put there), link-local addresses and cloud
metadata endpoints, and hosts or paths that could be read as command-line options.

The check is on the literal host, including the legacy IPv4 spellings the resolver accepts
(`2852039166`, `0xa9.0xfe.0xa9.0xfe`, `169.254.43518`) and IPv4-mapped IPv6. A `resolve`
hook extends it to the addresses a name resolves to; a name that resolves differently at
connect time (DNS rebinding) is outside what a pre-connect check can see, and is left to
network policy.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from enum import StrEnum
from urllib.parse import urlsplit


class UrlRefusal(StrEnum):
    """Stable reasons for a refused URL."""

    MALFORMED = "MalformedURL"
    SCHEME_NOT_ALLOWED = "SchemeNotAllowed"
    CREDENTIALS_IN_URL = "CredentialsInURL"
    ADDRESS_NOT_ALLOWED = "AddressNotAllowed"


class UrlRefused(ValueError):
    """The URL may not be used; `message` never repeats credentials found in it."""

    def __init__(self, reason: UrlRefusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
_LINK_LOCAL = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
_SCP_LIKE = re.compile(
    r"^(?:(?P<user>[^@/:\[\]]+)@)?(?P<host>\[[^\]/]+\]|[^/:\[\]]+):(?P<path>.*)$"
)
_LEGACY_IPV4 = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$", re.IGNORECASE)
_HELPER = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_SECURE = {"https", "ssh", "git+ssh", "ssh+git"}
_INSECURE = {"http", "git"}

_NO_CREDENTIALS = "credentials do not belong in the URL; put them in the GitProvider's Secret"

Resolver = Callable[[str], Iterable[str]]


def check_url(
    url: str,
    allow_file: bool = False,
    *,
    allow_insecure: bool = False,
    resolve: Resolver | None = None,
) -> None:
    """Raise `UrlRefused` unless the operator may fetch from and push to `url`."""
    if not url or url != url.strip() or any(c.isspace() or ord(c) < 0x20 for c in url):
        raise UrlRefused(UrlRefusal.MALFORMED, "the URL is empty or contains whitespace")
    if _HELPER.match(url):
        raise UrlRefused(UrlRefusal.SCHEME_NOT_ALLOWED, "remote helpers (`name::`) are not allowed")
    if "://" in url:
        scheme, host, path = _split_url(url)
    elif url.startswith(("/", ".", "~")) or (scp := _SCP_LIKE.match(url)) is None:
        scheme, host, path = "file", "", url
    else:
        if ":" in url.split("@", 1)[0] and "@" in url.split("/", 1)[0]:
            raise UrlRefused(UrlRefusal.CREDENTIALS_IN_URL, _NO_CREDENTIALS)
        scheme, host, path = "ssh", scp["host"].strip("[]"), scp["path"]
        if not path:
            raise UrlRefused(UrlRefusal.MALFORMED, "the URL has no repository path")
    if scheme == "file":
        if not allow_file:
            raise UrlRefused(
                UrlRefusal.SCHEME_NOT_ALLOWED, "local repositories are disabled on this operator"
            )
        return
    if scheme in _INSECURE and not allow_insecure:
        raise UrlRefused(
            UrlRefusal.SCHEME_NOT_ALLOWED,
            f"{scheme}:// is unencrypted; use https:// or ssh://",
        )
    if scheme not in _SECURE | _INSECURE:
        raise UrlRefused(UrlRefusal.SCHEME_NOT_ALLOWED, f"the scheme {scheme!r} is not allowed")
    if not host:
        raise UrlRefused(UrlRefusal.MALFORMED, "the URL has no host")
    if host.startswith("-") or path.startswith("-"):
        raise UrlRefused(UrlRefusal.MALFORMED, "the host or path looks like a command option")
    _check_host(host)
    if resolve is not None:
        for address in resolve(host):
            _check_host(address, resolved_from=host)


def _split_url(url: str) -> tuple[str, str, str]:
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        raise UrlRefused(UrlRefusal.MALFORMED, "the URL does not parse") from None
    if port == 0:
        raise UrlRefused(UrlRefusal.MALFORMED, "port 0 is not a port")
    ssh_user = parts.username is not None and scheme in _SECURE - {"https"}
    if parts.password is not None or (parts.username is not None and not ssh_user):
        raise UrlRefused(UrlRefusal.CREDENTIALS_IN_URL, _NO_CREDENTIALS)
    path = parts.path.lstrip("/") if scheme != "file" else parts.path
    return scheme, host, path


def _check_host(host: str, resolved_from: str | None = None) -> None:
    name = host.lower().rstrip(".")
    shown = f"{resolved_from} ({host})" if resolved_from else host
    if name in METADATA_HOSTS:
        raise UrlRefused(UrlRefusal.ADDRESS_NOT_ALLOWED, f"{shown} is a cloud metadata endpoint")
    address = _literal_address(name)
    if address is None:
        return
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address in METADATA_ADDRESSES:
        raise UrlRefused(UrlRefusal.ADDRESS_NOT_ALLOWED, f"{shown} is a cloud metadata endpoint")
    if any(address in network for network in _LINK_LOCAL):
        raise UrlRefused(UrlRefusal.ADDRESS_NOT_ALLOWED, f"{shown} is a link-local address")


def _literal_address(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        pass
    if _LEGACY_IPV4.match(name):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(name))
        except OSError:
            return None
    return None
