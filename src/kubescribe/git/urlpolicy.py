"""Which repository URLs the operator may connect to, so it cannot be used as a network probe.

Allowed: `https://`, `ssh://` (also `git+ssh://`, `ssh+git://`) and scp-like `user@host:path`.
`http://` and `git://` only with `allow_insecure`, `file://` and local paths only with
`allow_file` (an operator flag, never a per-object setting). Always refused: credentials in
the URL (an SSH user name is an address, not a secret, and stays allowed; any user info in an
HTTP URL is refused because tokens are often put there), link-local addresses and cloud
metadata endpoints, and hosts or paths that could be read as command-line options.

The check is on the literal host, including the legacy IPv4 spellings the resolver accepts
(`2852039166`, `0xa9.0xfe.0xa9.0xfe`, `169.254.43518`) and IPv4 addresses embedded in IPv6
(IPv4-mapped, IPv4-compatible, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4, Teredo). A
`resolve` hook extends it to the addresses a name resolves to: the probe and every fetch and
push resolve again (`check_transfer`), so a name re-pointed after the probe (DNS rebinding)
is refused at the next transfer. libgit2 resolves once more when it connects; that last
instant is left to network policy.

With `NetworkPolicy(deny_private=True)` (`kubescribe run --deny-private-networks`) every
address that is not globally routable is refused too (RFC 1918, loopback, CGNAT, ULA,
unspecified, multicast), and so are names that only resolve inside a cluster or a LAN
(`*.cluster.local`, `*.svc`, `*.local`, `localhost`, single-label names).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from urllib.parse import urlsplit

"""The condition reason of a refused URL (its `UrlRefusal` says why)."""


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
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_LOCAL_SUFFIXES = (".cluster.local", ".svc", ".local", ".localhost", ".internal")

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_SCP_LIKE = re.compile(
    r"^(?:(?P<user>[^@/:\[\]]+)@)?(?P<host>\[[^\]/]+\]|[^/:\[\]]+):(?P<path>.*)$"
)
_LEGACY_IPV4 = re.compile(r"^(0x[0-9a-f]+|[0-9]+)(\.(0x[0-9a-f]+|[0-9]+)){0,3}$", re.IGNORECASE)
_HELPER = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*::")
_SECURE = {"https", "ssh", "git+ssh", "ssh+git"}
_INSECURE = {"http", "git"}

_NO_CREDENTIALS = "credentials do not belong in the URL; put them in the GitProvider's Secret"

Resolver = Callable[[str], Iterable[str]]


@dataclass(frozen=True)
class NetworkPolicy:
    """Operator-wide: `deny_private` also refuses addresses that are not globally routable."""

    deny_private: bool = False


class _Process:
    policy = NetworkPolicy()


def set_network_policy(policy: NetworkPolicy) -> None:
    """Set the process-wide policy (`kubescribe run` does, once, before anything connects)."""
    _Process.policy = policy


def network_policy() -> NetworkPolicy:
    return _Process.policy


def resolve_host(host: str) -> list[str]:
    """The addresses `host` resolves to; none when it does not resolve (the connection
    attempt then reports that)."""
    try:
        return sorted({str(info[4][0]) for info in socket.getaddrinfo(host, None)})
    except (OSError, UnicodeError):
        return []


def check_transfer(url: str, resolve: Resolver = resolve_host) -> None:
    """Before a fetch or push: the URL's host, as it resolves now, is still allowed. The
    scheme was checked when the URL was accepted; this is about addresses."""
    check_url(url, allow_file=True, allow_insecure=True, resolve=resolve)


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
    policy = network_policy()
    _check_host(host, policy)
    if resolve is not None:
        for address in resolve(host):
            _check_host(address, policy, resolved_from=host)


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


def _check_host(host: str, policy: NetworkPolicy, resolved_from: str | None = None) -> None:
    name = host.lower().rstrip(".")
    shown = f"{resolved_from} ({host})" if resolved_from else host
    if name in METADATA_HOSTS:
        raise UrlRefused(UrlRefusal.ADDRESS_NOT_ALLOWED, f"{shown} is a cloud metadata endpoint")
    address = _literal_address(name)
    if address is None:
        if policy.deny_private and (
            name == "localhost" or "." not in name or name.endswith(_LOCAL_SUFFIXES)
        ):
            raise UrlRefused(
                UrlRefusal.ADDRESS_NOT_ALLOWED,
                f"{shown} is a cluster or local network name (--deny-private-networks)",
            )
        return
    for candidate in (address, _embedded_ipv4(address)):
        if candidate is None:
            continue
        if candidate in METADATA_ADDRESSES:
            raise UrlRefused(
                UrlRefusal.ADDRESS_NOT_ALLOWED, f"{shown} is a cloud metadata endpoint"
            )
        if any(candidate in network for network in _LINK_LOCAL):
            raise UrlRefused(UrlRefusal.ADDRESS_NOT_ALLOWED, f"{shown} is a link-local address")
        if policy.deny_private and (not candidate.is_global or candidate.is_multicast):
            raise UrlRefused(
                UrlRefusal.ADDRESS_NOT_ALLOWED,
                f"{shown} is a private, loopback or reserved address (--deny-private-networks)",
            )


def _embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    value = int(address)
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and value > 1):
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address in _NAT64_LOCAL:  # RFC 6052 /48: bits 48-63 and 72-87, around the u octet
        return ipaddress.IPv4Address(((value >> 64) & 0xFFFF) << 16 | (value >> 40) & 0xFFFF)
    return None


def _literal_address(name: str) -> Address | None:
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
