"""SSH host keys: known_hosts entries, the check of a presented key, and the handshake hint."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import struct
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import re2

from kubescribe.git.transport.errors import (
    GitFailure,
    InvalidCredentials,
    TransportRefused,
    text_value,
)


@dataclass(frozen=True)
class KnownHost:
    """One known_hosts line."""

    hosts: str
    key: bytes = field(repr=False)
    marker: str | None = None

    @property
    def key_type(self) -> str:
        return key_type(self.key)

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


def parse_known_hosts(text: str | bytes) -> tuple[KnownHost, ...]:
    """Parse known_hosts lines; a line that does not parse is an error, not skipped."""
    if isinstance(text, bytes):
        text = text_value("known_hosts", text)
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
            hosts, type_, blob = fields[0], fields[1], base64.b64decode(fields[2], validate=True)
            if key_type(blob) != type_:
                raise ValueError(type_)
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


def key_type(blob: bytes) -> str:
    """The type name an SSH public key blob starts with (`ssh-ed25519`, ...)."""
    (length,) = struct.unpack(">I", blob[:4])
    if not 0 < length <= 64 or len(blob) < 4 + length:
        raise ValueError("not an SSH public key blob")
    return blob[4 : 4 + length].decode("ascii")


def check_host_key(known: tuple[KnownHost, ...], host: str, port: int, presented: bytes) -> None:
    """Accept `presented` for `host:port` or raise `TransportRefused` (unknown or mismatch)."""
    name = host if port == 22 else f"[{host}]:{port}"
    offered = f"{key_type(presented)} {fingerprint(presented)}"
    entries = [e for e in known if e.marker != "cert-authority" and e.matches(name)]
    if any(e.marker == "revoked" and e.key == presented for e in entries):
        raise TransportRefused(
            GitFailure.HOST_KEY_MISMATCH, f"the host key of {name} ({offered}) is revoked"
        )
    trusted = [e for e in entries if e.marker is None]
    if any(e.key == presented for e in trusted):
        return
    same_type = [e for e in trusted if e.key_type == key_type(presented)]
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
