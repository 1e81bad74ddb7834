"""Git transport credentials from a Secret, and the pygit2 callbacks that use them.

`Credentials.from_secret_data` accepts the key names people already have (Kubernetes
`kubernetes.io/ssh-auth` and `basic-auth`, Flux and Argo CD repository Secrets).
`remote_callbacks(creds, url)` answers libgit2's credential requests and checks the server:

* SSH host keys fail closed: the key the server presents must be listed for `host` (port 22)
  or `[host]:port` in the known_hosts text (plain, wildcard or hashed `|1|` entries;
  `@revoked` honoured, `@cert-authority` ignored). libgit2's own `~/.ssh/known_hosts`
  verdict is not used.
* TLS: without a CA in the Secret, libgit2's verdict against the system CAs stands; with one,
  the server certificate must chain to that CA and name the host (the system CAs then no
  longer count, as with git's `http.sslCAInfo`).
* A rejected credential is never offered twice (libgit2 would ask again forever).

pygit2 1.21 hands `certificate_check` only `(None, valid, host)`; the `git_cert` libgit2
passes is read from pygit2's dispatching frame, and the SSH host key from libgit2 1.9's
`git_cert_hostkey` (the raw key is cross-checked against its SHA-256 there). Anything
unexpected refuses the connection.

`classify_git_error` turns any transport failure into a stable `GitFailure` reason and a
message that holds no credentials.
"""

from __future__ import annotations

import base64
import binascii
import ctypes
import hashlib
import hmac
import ipaddress
import os
import re
import struct
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntFlag, StrEnum
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pygit2
import re2
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509 import verification
from pygit2.enums import CredentialType
from pygit2.ffi import ffi

from kubescribe.api import conditions as c

SSH_KEY_NAMES = ("ssh-privatekey", "identity", "sshPrivateKey")
PASSPHRASE_NAMES = ("passphrase", "ssh-passphrase")
TOKEN_USERNAME = "x-access-token"
DEFAULT_SSH_USER = "git"

_OPENSSH_MAGIC = b"openssh-key-v1\0"
_CLIENT_KEY_TYPES = frozenset(
    {"ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521"}
)
_GIT_CERT_X509 = 1
_GIT_CERT_HOSTKEY_LIBSSH2 = 2
_MAX_HOST_KEY = 16384


class GitFailure(StrEnum):
    """Why a fetch or push failed; values are stable condition reasons."""

    AUTHENTICATION_FAILED = c.AUTHENTICATION_FAILED
    HOST_KEY_UNKNOWN = c.HOST_KEY_UNKNOWN
    HOST_KEY_MISMATCH = c.HOST_KEY_MISMATCH
    CERTIFICATE_UNTRUSTED = c.CERTIFICATE_UNTRUSTED
    REMOTE_UNREACHABLE = c.REMOTE_UNREACHABLE
    REPOSITORY_NOT_FOUND = c.REPOSITORY_NOT_FOUND
    PERMISSION_DENIED = c.PERMISSION_DENIED
    REDIRECT_REFUSED = c.REDIRECT_REFUSED
    TRANSFER_FAILED = c.TRANSFER_FAILED


class TransportRefused(pygit2.GitError):
    """Raised by a callback to stop a transfer; the message is safe to show."""

    def __init__(self, reason: GitFailure, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class InvalidCredentials(ValueError):
    """The Secret's data cannot be used; the message names keys, never values."""


@dataclass(frozen=True)
class SshKey:
    """A client key as handed to libssh2 (in memory, never written to disk).

    Keys that `cryptography` can open are normalised to unencrypted OpenSSH text. Encrypted
    OpenSSH-format keys need the `bcrypt` module to open in Python; without it they go to
    libssh2 as they are, with their passphrase, and a wrong passphrase shows at connect time.
    """

    private_key: str = field(repr=False)
    public_line: str
    fingerprint: str
    passphrase: str = field(default="", repr=False)


@dataclass(frozen=True)
class KnownHost:
    """One known_hosts line."""

    hosts: str
    key: bytes = field(repr=False)
    marker: str | None = None

    @property
    def key_type(self) -> str:
        return _key_type(self.key)

    def matches(self, name: str) -> bool:
        """Whether this line applies to `name` (`host` or `[host]:port`), as OpenSSH decides."""
        if self.hosts.startswith("|1|"):
            _, _, salt, digest = self.hosts.split("|", 3)
            mac = hmac.new(base64.b64decode(salt), name.encode(), hashlib.sha1).digest()
            return hmac.compare_digest(mac, base64.b64decode(digest))
        matched = False
        for pattern in self.hosts.split(","):
            negated = pattern.startswith("!")
            if _glob(pattern.removeprefix("!"), name):
                if negated:
                    return False
                matched = True
        return matched


@dataclass(frozen=True)
class Credentials:
    """What a GitProvider authenticates with and which servers it trusts."""

    ssh_key: SshKey | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    bearer_token: str | None = field(default=None, repr=False)
    known_hosts: tuple[KnownHost, ...] = ()
    ca_certs: tuple[x509.Certificate, ...] = ()

    @classmethod
    def from_secret_data(
        cls, data: Mapping[str, bytes], *, known_hosts: str | bytes | None = None
    ) -> Credentials:
        """Read decoded Secret data; other keys in the Secret are ignored.

        One-line values lose a trailing newline (`kubectl create secret --from-file`).
        `known_hosts` (from a referenced ConfigMap or Secret) replaces the Secret's own
        `known_hosts` key when given.
        """

        def line(name: str) -> str | None:
            value = data.get(name)
            return (_text(name, value).rstrip("\r\n") or None) if value else None

        username, password = line("username"), line("password")
        keys = {name: _text(name, data[name]).strip() for name in SSH_KEY_NAMES if data.get(name)}
        if len(set(keys.values())) > 1:
            raise InvalidCredentials(f"the Secret holds different SSH keys in {sorted(keys)}")
        ssh_key = None
        if keys:
            passphrase = next(filter(None, map(line, PASSPHRASE_NAMES)), None)
            # Flux keeps the passphrase of an encrypted `identity` in `password`.
            if passphrase is None and password is not None and username is None:
                passphrase, password = password, None
            name, key_text = next(iter(keys.items()))
            ssh_key = _load_ssh_key(name, key_text, passphrase)
        token = line("token")
        if token is not None:
            if password is not None:
                raise InvalidCredentials("the Secret holds both `password` and `token`")
            password, username = token, username or TOKEN_USERNAME
        if password is not None and username is None:
            raise InvalidCredentials("the Secret has `password` but no `username`")
        hosts = known_hosts if known_hosts is not None else data.get("known_hosts")
        ca_key = next((name for name in ("ca.crt", "caFile") if data.get(name)), None)
        return cls(
            ssh_key=ssh_key,
            username=username,
            password=password,
            bearer_token=line("bearerToken"),
            known_hosts=parse_known_hosts(hosts) if hosts else (),
            ca_certs=_load_ca(ca_key, data[ca_key]) if ca_key else (),
        )

    def secret_values(self) -> tuple[str, ...]:
        """Every value that must never appear in a message or log."""
        values = [self.password, self.bearer_token]
        if self.ssh_key is not None:
            values.extend((self.ssh_key.private_key, self.ssh_key.passphrase))
        return tuple(v for v in values if v)


def parse_known_hosts(text: str | bytes) -> tuple[KnownHost, ...]:
    """Parse known_hosts lines; a line that does not parse is an error, not skipped."""
    if isinstance(text, bytes):
        text = _text("known_hosts", text)
    entries = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        marker = None
        if fields[0].startswith("@"):
            marker = fields.pop(0)[1:]
            if marker not in ("revoked", "cert-authority"):
                raise InvalidCredentials(f"known_hosts line {number}: unknown marker @{marker}")
        try:
            hosts, key_type, blob = fields[0], fields[1], base64.b64decode(fields[2], validate=True)
            if _key_type(blob) != key_type:
                raise ValueError(key_type)
            if hosts.startswith("|1|"):
                _, _, salt, digest = hosts.split("|", 3)
                base64.b64decode(salt, validate=True)
                base64.b64decode(digest, validate=True)
        except (IndexError, ValueError, binascii.Error, struct.error):
            raise InvalidCredentials(f"known_hosts line {number} is not a valid entry") from None
        entries.append(KnownHost(hosts, blob, marker))
    return tuple(entries)


def fingerprint(key_blob: bytes) -> str:
    """OpenSSH's `SHA256:...` fingerprint of a public key blob."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key_blob).digest()).decode().rstrip("=")


def check_host_key(known: tuple[KnownHost, ...], host: str, port: int, presented: bytes) -> None:
    """Accept `presented` for `host:port` or raise `TransportRefused` (unknown or mismatch)."""
    name = host if port == 22 else f"[{host}]:{port}"
    offered = f"{_key_type(presented)} {fingerprint(presented)}"
    entries = [e for e in known if e.marker != "cert-authority" and e.matches(name)]
    if any(e.marker == "revoked" and e.key == presented for e in entries):
        raise TransportRefused(
            GitFailure.HOST_KEY_MISMATCH, f"the host key of {name} ({offered}) is revoked"
        )
    trusted = [e for e in entries if e.marker is None]
    if any(e.key == presented for e in trusted):
        return
    same_type = [e for e in trusted if e.key_type == _key_type(presented)]
    if same_type:
        listed = ", ".join(fingerprint(e.key) for e in same_type)
        raise TransportRefused(
            GitFailure.HOST_KEY_MISMATCH,
            f"host key mismatch for {name}: the server offered {offered}, "
            f"known_hosts lists {listed}",
        )
    if trusted:
        listed = ", ".join(sorted({e.key_type for e in trusted}))
        raise TransportRefused(
            GitFailure.HOST_KEY_UNKNOWN,
            f"the server {name} offered {offered} but known_hosts lists only {listed} "
            "keys for it; add the server's key of that type",
        )
    raise TransportRefused(
        GitFailure.HOST_KEY_UNKNOWN,
        f"no known_hosts entry for {name} (the server offered {offered})",
    )


def write_host_key_preferences(home: Path, known_hosts: Iterable[KnownHost]) -> None:
    """Steer libgit2 to ask each server for a host key type that its known_hosts lists.

    libgit2 takes the host key algorithms it offers in the SSH handshake from
    `<libgit2 homedir>/.ssh/known_hosts` alone; without a hint libssh2 prefers ECDSA, so a
    server that also has an ed25519 key (GitHub, GitLab) fails as `HostKeyUnknown` when only
    its ed25519 key is listed. Set `pygit2.settings.homedir` to `home` once per process and
    call this with the entries of every provider: the file only orders the handshake, trust
    is still decided per provider by `GitCallbacks.certificate_check`.
    """
    lines = sorted(
        {
            f"{entry.hosts} {entry.key_type} {base64.b64encode(entry.key).decode()}\n"
            for entry in known_hosts
            if entry.marker is None
        }
    )
    directory = home / ".ssh"
    directory.mkdir(parents=True, exist_ok=True)
    scratch = directory / f".known_hosts.{os.getpid()}.{threading.get_ident()}"
    scratch.write_text("".join(lines))
    scratch.replace(directory / "known_hosts")


class GitCallbacks(pygit2.RemoteCallbacks):
    """Credentials and server checks for one fetch or push to `url`; make one per transfer."""

    def __init__(self, creds: Credentials, url: str) -> None:
        super().__init__()
        self._creds = creds
        self._scheme, self._user, self._host, self._port = _endpoint(url)
        self._offered: set[str] = set()

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
        cert_type, address = _libgit2_cert(sys._getframe(1))
        hostname = host.decode("utf-8", "replace")
        if cert_type == _GIT_CERT_HOSTKEY_LIBSSH2:
            if self._scheme != "ssh" or hostname.lower() != self._host.lower():
                raise TransportRefused(
                    GitFailure.HOST_KEY_UNKNOWN, f"unexpected SSH host {hostname!r}"
                )
            check_host_key(self._creds.known_hosts, self._host, self._port, _host_key(address))
            return True
        if self._creds.ca_certs:
            if cert_type != _GIT_CERT_X509:
                raise TransportRefused(
                    GitFailure.CERTIFICATE_UNTRUSTED, "the server sent no X.509 certificate"
                )
            _verify_tls(self._creds.ca_certs, _x509_der(address), hostname)
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


# Matched in order against the lower-cased messages of an exception and its causes.
_PATTERNS: tuple[tuple[GitFailure, re.Pattern[str]], ...] = tuple(
    (reason, re.compile(pattern))
    for reason, pattern in (
        (GitFailure.REDIRECT_REFUSED, r"cannot redirect from"),
        (GitFailure.HOST_KEY_UNKNOWN, r"unknown remote ssh hostkey|host key verification"),
        (
            GitFailure.CERTIFICATE_UNTRUSTED,
            r"certificate|ssl error|tls error|self[- ]signed|unable to get local issuer",
        ),
        (
            GitFailure.PERMISSION_DENIED,
            r"\b403\b|read[- ]only|not allowed to (push|write)|permission to .* denied"
            r"|write access|denied to|tf401027|insufficient permission|push denied"
            r"|user permission denied|hook declined|protected branch",
        ),
        (
            GitFailure.AUTHENTICATION_FAILED,
            r"\b401\b|authenticat|credentials|permission denied \(publickey|userauth"
            r"|too many redirects or authentication replays",
        ),
        (
            GitFailure.REPOSITORY_NOT_FOUND,
            r"\b404\b|not found|does not appear to be a git repository|no such repository"
            r"|does not exist|could not find repository",
        ),
        (
            GitFailure.REMOTE_UNREACHABLE,
            r"failed to connect|connection refused|could not resolve|failed to resolve"
            r"|name or service not known|timed out|unreachable|no route to host"
            r"|connection reset|failed to start ssh session|failed to send request"
            r"|unexpected disconnect|early eof",
        ),
    )
)
_URL_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")
_AUTH_HEADER = re.compile(r"(?i)\b(bearer|basic)\s+[a-z0-9._~+/=-]{20,}")
_KNOWN_TOKENS = re.compile(r"\b(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_\w{20,}|glpat-[\w-]{20,})")
_MAX_MESSAGE = 500


def classify_git_error(
    exc: BaseException, creds: Credentials | None = None
) -> tuple[GitFailure, str]:
    """The reason a transfer failed and a message safe for status and logs."""
    chain = list(_chain(exc))
    message = redact(str(exc) or type(exc).__name__, creds)
    for link in chain:
        if isinstance(link, TransportRefused):
            detail = redact(str(link), creds)
            return link.reason, message if detail in message else f"{message}: {detail}"
    text = "\n".join(str(link) for link in chain).lower()
    for reason, pattern in _PATTERNS:
        if pattern.search(text):
            return reason, message
    return GitFailure.TRANSFER_FAILED, message


def redact(message: str, creds: Credentials | None = None) -> str:
    """`message` without URL credentials, auth headers, known token shapes or secret values."""
    if creds is not None:
        for value in creds.secret_values():
            message = message.replace(value, "***")
    message = _URL_USERINFO.sub(r"\1", message)
    message = _AUTH_HEADER.sub(r"\1 ***", message)
    message = _KNOWN_TOKENS.sub("***", message)
    return message if len(message) <= _MAX_MESSAGE else message[: _MAX_MESSAGE - 1] + "…"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        link = todo.pop(0)
        if id(link) in seen:
            continue
        seen.add(id(link))
        yield link
        todo.extend(e for e in (link.__cause__, link.__context__) if e is not None)


def _text(name: str, value: bytes) -> str:
    try:
        return value.decode()
    except UnicodeDecodeError:
        raise InvalidCredentials(f"Secret key {name!r} is not UTF-8 text") from None


def _load_ssh_key(name: str, text: str, passphrase: str | None) -> SshKey:
    data = text.encode() + b"\n"
    try:
        key = _private_key(data, None)
    except TypeError:
        if passphrase is None:
            raise InvalidCredentials(f"the SSH key in {name!r} needs a passphrase") from None
        try:
            key = _private_key(data, passphrase.encode())
        except UnsupportedAlgorithm:
            return _encrypted_openssh_key(name, data.decode(), passphrase)
        except ValueError:
            raise InvalidCredentials(
                f"the SSH key in {name!r} does not open with the passphrase"
            ) from None
    except ValueError:
        raise InvalidCredentials(f"{name!r} is not a supported SSH private key") from None
    if not isinstance(
        key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    ):
        raise InvalidCredentials(f"the SSH key in {name!r} is not ed25519, ECDSA or RSA")
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    blob = base64.b64decode(public.split()[1])
    return SshKey(private.decode(), public.decode(), fingerprint(blob))


def _encrypted_openssh_key(name: str, text: str, passphrase: str) -> SshKey:
    """An encrypted `openssh-key-v1` key, its public half read from the clear header."""
    try:
        body = "".join(line for line in text.splitlines() if not line.startswith("-----"))
        data = base64.b64decode(body)
        if not data.startswith(_OPENSSH_MAGIC):
            raise ValueError("not openssh-key-v1")
        offset = len(_OPENSSH_MAGIC)
        for _ in range(3):  # cipher name, KDF name, KDF options
            offset += 4 + struct.unpack_from(">I", data, offset)[0]
        (count,) = struct.unpack_from(">I", data, offset)
        (length,) = struct.unpack_from(">I", data, offset + 4)
        blob = data[offset + 8 : offset + 8 + length]
        key_type = _key_type(blob)
    except (ValueError, struct.error, binascii.Error):
        raise InvalidCredentials(f"{name!r} is not a supported SSH private key") from None
    if count != 1 or key_type not in _CLIENT_KEY_TYPES:
        raise InvalidCredentials(f"the SSH key in {name!r} is not ed25519, ECDSA or RSA")
    public = f"{key_type} {base64.b64encode(blob).decode()}"
    return SshKey(text, public, fingerprint(blob), passphrase)


def _private_key(data: bytes, password: bytes | None) -> Any:
    """An OpenSSH or PEM private key; TypeError if it needs a password it did not get."""
    try:
        return serialization.load_ssh_private_key(data, password)
    except ValueError:
        if b"OPENSSH PRIVATE KEY" in data:
            raise
        return serialization.load_pem_private_key(data, password)


def _load_ca(name: str, pem: bytes) -> tuple[x509.Certificate, ...]:
    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise InvalidCredentials(f"Secret key {name!r} is not a PEM certificate bundle") from None
    return tuple(certs)


def _key_type(blob: bytes) -> str:
    (length,) = struct.unpack(">I", blob[:4])
    if not 0 < length <= 64 or len(blob) < 4 + length:
        raise ValueError("not an SSH public key blob")
    return blob[4 : 4 + length].decode("ascii")


def _glob(pattern: str, name: str) -> bool:
    """OpenSSH host pattern match (`*`, `?`), by RE2: linear time, whatever the pattern (a
    backtracking engine takes minutes on `*a*a*a*a*a*b`, and patterns come from a Secret)."""
    regex = "".join(
        ".*" if c == "*" else "." if c == "?" else re2.escape(c) for c in pattern.lower()
    )
    try:
        return re2.fullmatch(regex, name.lower(), _GLOB_OPTIONS) is not None
    except re2.error:  # too large a pattern for RE2's memory bound: no match
        return False


_GLOB_OPTIONS = re2.Options()
_GLOB_OPTIONS.log_errors = False


def _endpoint(url: str) -> tuple[str, str | None, str, int]:
    """(scheme, user, host, port) of an URL or an scp-like `user@host:path`."""
    if "://" in url:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme in ("ssh+git", "git+ssh"):
            scheme = "ssh"
        default = {"ssh": 22, "https": 443, "http": 80}.get(scheme, 0)
        return scheme, parts.username, parts.hostname or "", parts.port or default
    user, _, rest = url.rpartition("@")
    host = rest.split(":", 1)[0].strip("[]")
    return "ssh", user or None, host, 22


class _HostKeyCert(ctypes.Structure):
    """libgit2 1.9's `git_cert_hostkey` (pygit2 declares only its first fields)."""

    _fields_ = (
        ("cert_type", ctypes.c_int),
        ("type", ctypes.c_int),
        ("hash_md5", ctypes.c_ubyte * 16),
        ("hash_sha1", ctypes.c_ubyte * 20),
        ("hash_sha256", ctypes.c_ubyte * 32),
        ("raw_type", ctypes.c_int),
        ("hostkey", ctypes.c_void_p),
        ("hostkey_len", ctypes.c_size_t),
    )


class _SshCertType(IntFlag):
    SHA256 = 1 << 2
    RAW = 1 << 3


class _X509Cert(ctypes.Structure):
    _fields_ = (("cert_type", ctypes.c_int), ("data", ctypes.c_void_p), ("len", ctypes.c_size_t))


def _libgit2_cert(frame: Any) -> tuple[int, int]:
    """(type, address) of the `git_cert` in pygit2's `_certificate_check_cb` frame."""
    cert = frame.f_locals.get("cert_i") if frame.f_code.co_name == "_certificate_check_cb" else None
    if cert is None or cert == ffi.NULL:
        raise TransportRefused(
            GitFailure.TRANSFER_FAILED, "cannot read the server's certificate from libgit2"
        )
    return int(cert.cert_type), int(ffi.cast("uintptr_t", cert))


def _host_key(address: int) -> bytes:
    cert = _HostKeyCert.from_address(address)
    needed = _SshCertType.RAW | _SshCertType.SHA256
    if cert.type & needed != needed or not 0 < cert.hostkey_len <= _MAX_HOST_KEY:
        raise TransportRefused(GitFailure.TRANSFER_FAILED, "libgit2 gave no raw SSH host key")
    raw = ctypes.string_at(cert.hostkey, cert.hostkey_len)
    if hashlib.sha256(raw).digest() != bytes(cert.hash_sha256):
        raise TransportRefused(GitFailure.TRANSFER_FAILED, "cannot read the SSH host key")
    return raw


def _x509_der(address: int) -> bytes:
    cert = _X509Cert.from_address(address)
    if not cert.data or not 0 < cert.len <= 1 << 20:
        raise TransportRefused(GitFailure.CERTIFICATE_UNTRUSTED, "empty server certificate")
    return ctypes.string_at(cert.data, cert.len)


# Web PKI rules, except that private CAs often issue leaves without an authority key id.
_CA_POLICY = verification.ExtensionPolicy.webpki_defaults_ca()
_LEAF_POLICY = verification.ExtensionPolicy.webpki_defaults_ee().may_be_present(
    x509.AuthorityKeyIdentifier, verification.Criticality.AGNOSTIC, None
)


def _verify_tls(cas: tuple[x509.Certificate, ...], der: bytes, host: str) -> None:
    try:
        subject: x509.DNSName | x509.IPAddress = x509.IPAddress(
            ipaddress.ip_address(host.strip("[]"))
        )
    except ValueError:
        subject = x509.DNSName(host)
    try:
        leaf = x509.load_der_x509_certificate(der)
        verifier = (
            verification.PolicyBuilder()
            .store(verification.Store(list(cas)))
            .extension_policies(ca_policy=_CA_POLICY, ee_policy=_LEAF_POLICY)
            .build_server_verifier(subject)
        )
        verifier.verify(leaf, [])
    except (ValueError, verification.VerificationError) as exc:
        raise TransportRefused(
            GitFailure.CERTIFICATE_UNTRUSTED,
            f"the TLS certificate of {host} does not verify against the Secret's CA: {exc}",
        ) from None
