"""Which HTTP proxy a Git transfer goes through: `HTTPS_PROXY`, `HTTP_PROXY` and `NO_PROXY`.

libgit2 uses a proxy only when told to (pygit2's default is no proxy, and its automatic mode
does not read CIDRs in `NO_PROXY`), so the operator decides per remote URL and hands libgit2
the proxy's URL, or none:

* `https://` remotes go through `https_proxy` / `HTTPS_PROXY`, `http://` remotes through
  `http_proxy` / `HTTP_PROXY` (the lowercase name wins when both are set, as in curl and git).
  SSH remotes never do: libgit2's SSH transport has no proxy support. `ALL_PROXY` is not read.
* `no_proxy` / `NO_PROXY` (comma- or space-separated) lists what is reached directly: `*`
  (everything), host names (`example.com` also covers `git.example.com`; a leading `.` or
  `*.` is the same), IP addresses and CIDR blocks (`10.0.0.0/8`, `fd00::/8`), each optionally
  with `:port`. CIDR blocks match remotes given by address only: names are not resolved.

A proxy URL may hold `user:password@` for the proxy; it is never shown (`display`,
`redact`). The Secret's credentials are answered only to the Git server: through an https
proxy they travel inside the TLS tunnel (the proxy sees `CONNECT host:port` and nothing else),
and they are never sent in clear text through a proxy to an http:// remote (`callbacks`).
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from kubescribe.git.transport.errors import GitFailure
from kubescribe.net.urls import Form, UrlSyntaxError, parse

_DEFAULT_PORTS = {"http": 80, "https": 443}
_Network = ipaddress.IPv4Network | ipaddress.IPv6Network
_Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_PORT_SUFFIX = re.compile(r"^(?P<host>.*?):(?P<port>\d{1,5})$")
_LABELS = re.compile(r"^[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*$")
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")
# What libgit2 says when the proxy answered with an error (1.9's wording).
_PROXY_STATUS = re.compile(r"proxy returned unexpected status: (\d{3})")
_PROXY_AUTH = re.compile(r"proxy authentication required")


class ProxyConfigError(ValueError):
    """A proxy variable cannot be used; the message names the variable, never a password."""


@dataclass(frozen=True)
class NoProxyEntry:
    """One `NO_PROXY` entry: a domain, an address or a network, maybe only on one port."""

    domain: str | None = None
    network: _Network | None = None
    port: int | None = None

    def matches(self, host: str, address: _Address | None, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.network is not None:
            return address is not None and address in self.network
        assert self.domain is not None
        return host == self.domain or host.endswith("." + self.domain)


@dataclass(frozen=True)
class ProxySettings:
    """The proxies of the process (from its environment) and the hosts that bypass them."""

    https: str | None = None
    http: str | None = None
    no_proxy: tuple[NoProxyEntry, ...] = ()
    no_proxy_all: bool = False

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ProxySettings:
        """Read `https_proxy`, `http_proxy` and `no_proxy` (lowercase first, then uppercase);
        `ProxyConfigError` for a value that cannot be used."""

        def read(name: str) -> str | None:
            for variant in (name.lower(), name.upper()):
                value = environ.get(variant, "").strip()
                if value:
                    return value
            return None

        https = read("https_proxy")
        http = read("http_proxy")
        no_proxy = read("no_proxy")
        entries, everything = parse_no_proxy(no_proxy or "")
        return cls(
            https=_proxy_url("HTTPS_PROXY", https) if https else None,
            http=_proxy_url("HTTP_PROXY", http) if http else None,
            no_proxy=entries,
            no_proxy_all=everything,
        )

    def proxy_for(self, url: str) -> str | None:
        """The proxy URL a transfer to `url` goes through, or None (direct)."""
        try:
            remote = parse(url)
        except UrlSyntaxError:
            return None
        if remote.form is not Form.URL or remote.scheme not in _DEFAULT_PORTS:
            return None  # SSH, local paths, git://: libgit2 has no proxy for them
        proxy = self.https if remote.scheme == "https" else self.http
        if proxy is None or self.bypassed(
            remote.host, remote.port or _DEFAULT_PORTS[remote.scheme]
        ):
            return None
        return proxy

    def bypassed(self, host: str, port: int) -> bool:
        """`host`:`port` is listed in `NO_PROXY`."""
        if self.no_proxy_all:
            return True
        name = host.lower().strip("[]").rstrip(".")
        address = _address(name)
        return any(entry.matches(name, address, port) for entry in self.no_proxy)

    def describe(self) -> dict[str, str]:
        """The settings for a log line (no proxy credentials)."""
        shown = {
            "https_proxy": display(self.https) if self.https else "",
            "http_proxy": display(self.http) if self.http else "",
        }
        if self.no_proxy_all:
            shown["no_proxy"] = "*"
        elif self.no_proxy:
            shown["no_proxy"] = f"{len(self.no_proxy)} entries"
        return {k: v for k, v in shown.items() if v}


def parse_no_proxy(text: str) -> tuple[tuple[NoProxyEntry, ...], bool]:
    """The entries of a `NO_PROXY` value and whether it lists `*`; `ProxyConfigError`
    naming an entry that is none of a host name, an address, or a CIDR block."""
    entries: list[NoProxyEntry] = []
    everything = False
    for raw in re.split(r"[,\s]+", text.strip()):
        item = raw.lower().rstrip(".")
        if not item:
            continue
        if item == "*":
            everything = True
            continue
        entries.append(_no_proxy_entry(item, raw))
    return tuple(entries), everything


def _no_proxy_entry(item: str, raw: str) -> NoProxyEntry:
    bad = ProxyConfigError(
        f"NO_PROXY entry {raw[:80]!r} is not a host name, an IP address or a CIDR block"
    )
    port: int | None = None
    if item.startswith("["):  # [v6] or [v6]:port
        close = item.find("]")
        rest = item[close + 1 :]
        if close < 0 or (rest and not re.fullmatch(r":\d{1,5}", rest)):
            raise bad
        port = int(rest[1:]) if rest else None
        item = item[1:close]
    elif item.count(":") == 1 and (found := _PORT_SUFFIX.match(item)):
        item, port = found["host"], int(found["port"])
    if port is not None and not 0 < port < 65536:
        raise bad
    if "/" in item:
        try:
            return NoProxyEntry(network=ipaddress.ip_network(item, strict=False), port=port)
        except ValueError:
            raise bad from None
    address = _address(item)
    if address is not None:
        return NoProxyEntry(network=ipaddress.ip_network(address), port=port)
    domain = item.removeprefix("*.").lstrip(".")
    if not _LABELS.match(domain):
        raise bad
    return NoProxyEntry(domain=domain, port=port)


def _address(text: str) -> _Address | None:
    try:
        return ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None


def _proxy_url(variable: str, value: str) -> str:
    """`value` as an `http://` or `https://` URL with a host (`host:port` means http://)."""
    if any(c.isspace() or ord(c) < 0x20 for c in value):
        raise ProxyConfigError(f"{variable} contains whitespace or control characters")
    url = value if "://" in value else f"http://{value}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises for a bad port)
    except ValueError:
        raise ProxyConfigError(f"{variable} ({display(url)}) does not parse as a URL") from None
    if parts.scheme.lower() not in _DEFAULT_PORTS:
        raise ProxyConfigError(
            f"{variable} ({display(url)}): only http:// and https:// proxies are supported "
            f"for Git, not {parts.scheme}://"
        )
    if not parts.hostname:
        raise ProxyConfigError(f"{variable} ({display(url)}) names no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ProxyConfigError(f"{variable} ({display(url)}): a proxy URL has no path")
    return url


def process_settings() -> ProxySettings:
    """The settings of this process's environment (read again each time: cheap)."""
    return ProxySettings.from_environ(os.environ)


def display(proxy: str) -> str:
    """The proxy URL without its user info (what status and logs show)."""
    return _USERINFO.sub(r"\1", proxy)


def redact(message: str, proxy: str | None) -> str:
    """`message` without the proxy's credentials."""
    if proxy is None:
        return message
    try:
        password = urlsplit(proxy).password
    except ValueError:
        password = None
    if password:
        message = message.replace(password, "***")
    return _USERINFO.sub(r"\1", message)


def proxy_endpoint(proxy: str) -> tuple[str, int]:
    """(host, port) libgit2 connects to for `proxy` (port 80/443 when the URL has none)."""
    parts = urlsplit(proxy)
    return parts.hostname or "", parts.port or _DEFAULT_PORTS.get(parts.scheme.lower(), 80)


def answers(host: str, port: int, timeout: float = 5.0) -> bool:
    """A TCP connection to `host`:`port` opens."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def proxy_failure(
    reason: GitFailure,
    message: str,
    proxy: str | None,
    *,
    reachable: Callable[[str, int], bool] = answers,
) -> tuple[GitFailure, str]:
    """The reason and message of a failed transfer that went through `proxy`: the proxy
    refused (`ProxyRefused`: an error status, proxy authentication), the proxy did not
    answer (`ProxyUnreachable`), or the proxy could not reach the remote (5xx:
    `RemoteUnreachable`). Anything else is left as classified. `reachable` is asked only
    for a failure classified `RemoteUnreachable`."""
    if proxy is None:
        return reason, message
    shown = display(proxy)
    message = redact(message, proxy)
    text = message.lower()
    status = _PROXY_STATUS.search(text)
    if _PROXY_AUTH.search(text) or (status is not None and status[1] == "407"):
        return GitFailure.PROXY_REFUSED, (
            f"the proxy {shown} wants credentials, and the proxy URL has none or they were "
            f"refused (they go in its user info: http://user:password@host:port): {message}"
        )
    if status is not None and status[1].startswith("5"):
        return GitFailure.REMOTE_UNREACHABLE, (
            f"the proxy {shown} could not reach the remote (HTTP {status[1]}): {message}"
        )
    if status is not None:
        return GitFailure.PROXY_REFUSED, (
            f"the proxy {shown} refused the connection (HTTP {status[1]}): {message}"
        )
    if reason == GitFailure.REMOTE_UNREACHABLE and not reachable(*proxy_endpoint(proxy)):
        return GitFailure.PROXY_UNREACHABLE, f"the proxy {shown} does not answer: {message}"
    return reason, message
