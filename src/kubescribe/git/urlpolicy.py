"""Which repository URLs the operator may connect to, so it cannot be used as a network probe.

Allowed: `https://`, `ssh://` (also `git+ssh://`, `ssh+git://`) and scp-like `user@host:path`.
`http://` and `git://` only with `allow_insecure`, `file://` and local paths only with
`allow_file` (an operator flag, never a per-object setting). Always refused: credentials in
the URL (an SSH user name is an address, not a secret, and stays allowed; any user info in an
HTTP URL is refused because tokens are often put there), hosts the address policy refuses
(`kubescribe.net.addresses`: link-local, cloud metadata, and with `--deny-private-networks`
private ones), and hosts or paths that could be read as command-line options. URLs are read
with the one grammar of `kubescribe.net.urls`.

A `resolve` hook extends the check to the addresses a name resolves to: the probe and every
fetch and push resolve again (`check_transfer`), so a name re-pointed after the probe (DNS
rebinding) is refused at the next transfer. libgit2 resolves once more when it connects; that
last instant is left to network policy.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterable
from enum import StrEnum

from kubescribe.net.addresses import network_policy, refusal
from kubescribe.net.urls import Form, RemoteUrl, UrlSyntaxError, parse


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


_SECURE = {"https", "ssh", "git+ssh", "ssh+git"}
_INSECURE = {"http", "git"}

_NO_CREDENTIALS = "credentials do not belong in the URL; put them in the GitProvider's Secret"

Resolver = Callable[[str], Iterable[str]]


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
    try:
        remote = parse(url)
    except UrlSyntaxError as exc:
        raise UrlRefused(UrlRefusal.MALFORMED, str(exc)) from None
    if remote.form is Form.HELPER:
        raise UrlRefused(UrlRefusal.SCHEME_NOT_ALLOWED, "remote helpers (`name::`) are not allowed")
    if remote.form is Form.LOCAL or remote.scheme == "file":
        if not allow_file:
            raise UrlRefused(
                UrlRefusal.SCHEME_NOT_ALLOWED, "local repositories are disabled on this operator"
            )
        return
    host = _checked_remote(remote, allow_insecure)
    policy = network_policy()
    _check_host(host, refusal(host, policy))
    if resolve is not None:
        for address in resolve(host):
            _check_host(f"{host} ({address})", refusal(address, policy))


def check_receiver_url(url: str, resolve: Resolver | None = None) -> None:
    """Raise `UrlRefused` unless the operator may POST to `url` (an Alert's webhook): `https://`
    or `http://`, no credentials, and a host (and, with `resolve`, its addresses) the address
    policy allows, as for Git remotes."""
    if not url or url != url.strip() or any(c.isspace() or ord(c) < 0x20 for c in url):
        raise UrlRefused(UrlRefusal.MALFORMED, "the URL is empty or contains whitespace")
    try:
        remote = parse(url)
    except UrlSyntaxError as exc:
        raise UrlRefused(UrlRefusal.MALFORMED, str(exc)) from None
    if remote.form is not Form.URL or remote.scheme not in {"https", "http"}:
        raise UrlRefused(UrlRefusal.SCHEME_NOT_ALLOWED, "a receiver URL is https:// or http://")
    if remote.user is not None or remote.password:
        raise UrlRefused(
            UrlRefusal.CREDENTIALS_IN_URL, "credentials do not belong in the URL; use a Secret"
        )
    if not remote.host or remote.port == 0:
        raise UrlRefused(UrlRefusal.MALFORMED, "the URL has no host (or port 0)")
    policy = network_policy()
    _check_host(remote.host, refusal(remote.host, policy))
    if resolve is not None:
        for address in resolve(remote.host):
            _check_host(f"{remote.host} ({address})", refusal(address, policy))


def _checked_remote(remote: RemoteUrl, allow_insecure: bool) -> str:
    """The host of a network remote whose user, port, scheme and path may be used."""
    scheme = remote.scheme
    ssh_user = remote.user is not None and scheme in _SECURE - {"https"}
    if remote.password or (remote.user is not None and not ssh_user):
        raise UrlRefused(UrlRefusal.CREDENTIALS_IN_URL, _NO_CREDENTIALS)
    if remote.port == 0:
        raise UrlRefused(UrlRefusal.MALFORMED, "port 0 is not a port")
    if remote.form is Form.SCP and not remote.path:
        raise UrlRefused(UrlRefusal.MALFORMED, "the URL has no repository path")
    if scheme in _INSECURE and not allow_insecure:
        raise UrlRefused(
            UrlRefusal.SCHEME_NOT_ALLOWED,
            f"{scheme}:// is unencrypted; use https:// or ssh://",
        )
    if scheme not in _SECURE | _INSECURE:
        raise UrlRefused(UrlRefusal.SCHEME_NOT_ALLOWED, f"the scheme {scheme!r} is not allowed")
    host, path = remote.host, remote.path.lstrip("/")
    if not host:
        raise UrlRefused(UrlRefusal.MALFORMED, "the URL has no host")
    if host.startswith("-") or path.startswith("-"):
        raise UrlRefused(UrlRefusal.MALFORMED, "the host or path looks like a command option")
    return host


def _check_host(shown: str, why: str | None) -> None:
    if why is not None:
        raise UrlRefused(UrlRefusal.ADDRESS_NOT_ALLOWED, f"{shown} {why}")
