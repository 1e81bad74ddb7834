"""The pygit2 callbacks of one fetch or push: credentials offered once, servers checked."""

from __future__ import annotations

import sys

import pygit2
from pygit2.enums import CredentialType

from kubescribe.git.transport.errors import GitFailure, TransportRefused
from kubescribe.git.transport.known_hosts import check_host_key
from kubescribe.git.transport.libgit2_certs import (
    GIT_CERT_HOSTKEY_LIBSSH2,
    GIT_CERT_X509,
    host_key,
    libgit2_cert,
    x509_der,
)
from kubescribe.git.transport.secret import SSH_KEY_NAMES, Credentials
from kubescribe.git.transport.tls import verify_tls
from kubescribe.net.urls import Form, parse

DEFAULT_SSH_USER = "git"
_SSH = ("ssh+git", "git+ssh")


class GitCallbacks(pygit2.RemoteCallbacks):
    """Credentials and server checks for one fetch or push to `url`; make one per transfer."""

    def __init__(self, creds: Credentials, url: str) -> None:
        super().__init__()
        self._creds = creds
        self._scheme, self._user, self._host, self._port = _endpoint(url)
        self._offered: set[str] = set()
        # The transfer goes through an HTTP proxy (`transport.proxy`): over http:// the
        # Secret's username and password would cross it in clear text, and are refused.
        self.proxied = False

    def credentials(
        self, url: str, username_from_url: str | None, allowed_types: CredentialType
    ) -> pygit2.Username | pygit2.UserPass | pygit2.Keypair:
        creds = self._creds
        ssh_user = username_from_url or self._user or creds.username or DEFAULT_SSH_USER
        if allowed_types & (CredentialType.SSH_MEMORY | CredentialType.SSH_KEY):
            key = creds.ssh_key
            if key is None:
                raise TransportRefused(
                    GitFailure.AUTHENTICATION_FAILED,
                    "the server asks for an SSH key and the Secret has none "
                    f"({', '.join(SSH_KEY_NAMES)})",
                )
            unchecked = " (or its passphrase is wrong)" if key.passphrase else ""
            # The user is named only when the URL gives it: a Secret's username is never echoed.
            url_user = username_from_url or self._user
            user = f" for user {url_user!r}" if url_user else ""
            self._offer_once(f"SSH key {key.fingerprint}{user}", unchecked)
            return pygit2.KeypairFromMemory(
                ssh_user, key.public_line, key.private_key, key.passphrase
            )
        if allowed_types & CredentialType.USERPASS_PLAINTEXT:
            if self.proxied and self._scheme == "http":
                raise TransportRefused(
                    GitFailure.AUTHENTICATION_FAILED,
                    "the server asks for credentials over http:// through a proxy: they are "
                    "not sent in clear text through it (use https://, or list the host in "
                    "NO_PROXY)",
                )
            if creds.username is None or creds.password is None:
                what = "bearer token" if creds.bearer_token else "request"
                raise TransportRefused(
                    GitFailure.AUTHENTICATION_FAILED,
                    f"the server refused the {what} and the Secret has no username/password "
                    "or token",
                )
            self._offer_once("the username and password of the Secret")
            return pygit2.UserPass(creds.username, creds.password)
        if allowed_types & CredentialType.USERNAME:
            return pygit2.Username(ssh_user)
        raise TransportRefused(
            GitFailure.AUTHENTICATION_FAILED,
            f"the server asks for credentials of a kind not supported ({allowed_types!r})",
        )

    def certificate_check(self, certificate: None, valid: bool, host: bytes) -> bool:
        cert_type, address = libgit2_cert(sys._getframe(1))
        hostname = host.decode("utf-8", "replace")
        if cert_type == GIT_CERT_HOSTKEY_LIBSSH2:
            if self._scheme != "ssh" or hostname.lower() != self._host.lower():
                raise TransportRefused(
                    GitFailure.HOST_KEY_UNKNOWN, f"unexpected SSH host {hostname!r}"
                )
            check_host_key(self._creds.known_hosts, self._host, self._port, host_key(address))
            return True
        if self._creds.ca_certs:
            if cert_type != GIT_CERT_X509:
                raise TransportRefused(
                    GitFailure.CERTIFICATE_UNTRUSTED, "the server sent no X.509 certificate"
                )
            verify_tls(self._creds.ca_certs, x509_der(address), hostname)
            return True
        if not valid:
            raise TransportRefused(
                GitFailure.CERTIFICATE_UNTRUSTED,
                f"the TLS certificate of {hostname} is not trusted by the system CAs "
                "(a private CA goes in the Secret's ca.crt)",
            )
        return True

    @property
    def creds(self) -> Credentials:
        """The credentials in use (to redact their values from error messages)."""
        return self._creds

    def custom_headers(self) -> list[str] | None:
        if self._creds.bearer_token and self._scheme == "https":
            return [f"Authorization: Bearer {self._creds.bearer_token}"]
        return None

    def _offer_once(self, what: str, hint: str = "") -> None:
        if what in self._offered:
            raise TransportRefused(
                GitFailure.AUTHENTICATION_FAILED,
                f"authentication failed: {what} was refused{hint}",
            )
        self._offered.add(what)


def refuse_offsite_redirects(repo: pygit2.Repository) -> None:
    """libgit2 follows a first-request HTTP redirect to another host (`http.followRedirects`
    defaults to `initial`) and sends the bearer header and basic credentials there too. Turn
    that off for transfers through `repo`: a redirect to another host name, or from https to
    http, fails (`RedirectRefused`). Redirects within the host name are still followed."""
    repo.config["http.followRedirects"] = "false"


def remote_callbacks(creds: Credentials, url: str) -> GitCallbacks:
    """Fresh callbacks for one transfer (a `GitRepository` callbacks factory calls this)."""
    return GitCallbacks(creds, url)


def _endpoint(url: str) -> tuple[str, str | None, str, int]:
    """(scheme, user, host, port) of an URL or an scp-like `user@host:path`."""
    remote = parse(url)
    scheme = "ssh" if remote.form is Form.SCP or remote.scheme in _SSH else remote.scheme
    default = {"ssh": 22, "https": 443, "http": 80}.get(scheme, 0)
    return scheme, remote.user, remote.host, remote.port or default
