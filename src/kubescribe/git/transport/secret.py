"""Credentials read from a GitProvider's Secret: an SSH key, a username and password or token,
known_hosts and CA certificates. Nothing is written to disk.

`cryptography` is imported when a Secret holds a key or a CA bundle to read, not at start-up.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kubescribe.git.transport.errors import InvalidCredentials, text_value
from kubescribe.git.transport.known_hosts import (
    KnownHost,
    fingerprint,
    key_type,
    parse_known_hosts,
)

if TYPE_CHECKING:
    from cryptography import x509

SSH_KEY_NAMES = ("ssh-privatekey", "identity", "sshPrivateKey")
PASSPHRASE_NAMES = ("passphrase", "ssh-passphrase")
TOKEN_USERNAME = "x-access-token"

_OPENSSH_MAGIC = b"openssh-key-v1\0"
_CLIENT_KEY_TYPES = frozenset(
    {"ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ecdsa-sha2-nistp521"}
)


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
            return (text_value(name, value).rstrip("\r\n") or None) if value else None

        username, password = line("username"), line("password")
        keys = {
            name: text_value(name, data[name]).strip() for name in SSH_KEY_NAMES if data.get(name)
        }
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


def _load_ssh_key(name: str, text: str, passphrase: str | None) -> SshKey:
    from cryptography.exceptions import UnsupportedAlgorithm  # noqa: PLC0415
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa  # noqa: PLC0415

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
        type_ = key_type(blob)
    except (ValueError, struct.error, binascii.Error):
        raise InvalidCredentials(f"{name!r} is not a supported SSH private key") from None
    if count != 1 or type_ not in _CLIENT_KEY_TYPES:
        raise InvalidCredentials(f"the SSH key in {name!r} is not ed25519, ECDSA or RSA")
    public = f"{type_} {base64.b64encode(blob).decode()}"
    return SshKey(text, public, fingerprint(blob), passphrase)


def _private_key(data: bytes, password: bytes | None) -> Any:
    """An OpenSSH or PEM private key; TypeError if it needs a password it did not get."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    try:
        return serialization.load_ssh_private_key(data, password)
    except ValueError:
        if b"OPENSSH PRIVATE KEY" in data:
            raise
        return serialization.load_pem_private_key(data, password)


def _load_ca(name: str, pem: bytes) -> tuple[x509.Certificate, ...]:
    from cryptography import x509  # noqa: PLC0415

    try:
        certs = x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise InvalidCredentials(f"Secret key {name!r} is not a PEM certificate bundle") from None
    return tuple(certs)
