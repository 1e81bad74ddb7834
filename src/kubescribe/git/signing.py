"""SSH commit signatures (OpenSSH SSHSIG, ed25519), made in-process with `cryptography`.

A commit signed here verifies with `git verify-commit` (`gpg.format=ssh` and an allowed
signers file listing `public_key_line`) and with `ssh-keygen -Y verify -n git`. The format
is OpenSSH's PROTOCOL.sshsig: the signature covers a SHA-512 of the commit text, bound to the
namespace `git`. `cryptography` is imported when a key is loaded or generated, not at start-up.
"""

from __future__ import annotations

import base64
import hashlib
import struct
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING

import pygit2

from kubescribe.git.transport.known_hosts import fingerprint

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric import ed25519

NAMESPACE = "git"
DEFAULT_COMMENT = "kubescribe"
_MAGIC = b"SSHSIG"
_HASH = "sha512"
_KEY_TYPE = "ssh-ed25519"


def _string(data: bytes | str) -> bytes:
    raw = data.encode() if isinstance(data, str) else data
    return struct.pack(">I", len(raw)) + raw


class SigningKey:
    """An ed25519 key that signs commits."""

    def __init__(self, key: ed25519.Ed25519PrivateKey, comment: str = DEFAULT_COMMENT) -> None:
        self._key = key
        self.comment = comment

    @classmethod
    def generate(cls, comment: str = DEFAULT_COMMENT) -> SigningKey:
        from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: PLC0415

        return cls(ed25519.Ed25519PrivateKey.generate(), comment)

    @classmethod
    def from_openssh(
        cls,
        private_key_text: str | bytes,
        passphrase: str | bytes | None = None,
        comment: str = DEFAULT_COMMENT,
    ) -> SigningKey:
        """Load an OpenSSH private key (`ssh-keygen -t ed25519`); other key types are refused."""
        from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
        from cryptography.hazmat.primitives.asymmetric import ed25519  # noqa: PLC0415

        data = private_key_text.encode() if isinstance(private_key_text, str) else private_key_text
        password = passphrase.encode() if isinstance(passphrase, str) else passphrase
        key = serialization.load_ssh_private_key(data.strip() + b"\n", password)
        if not isinstance(key, ed25519.Ed25519PrivateKey):
            raise ValueError("commit signing needs an ed25519 key")
        return cls(key, comment)

    @property
    def public_blob(self) -> bytes:
        from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

        raw = self._key.public_key().public_bytes(
            serialization.Encoding.Raw, serialization.PublicFormat.Raw
        )
        return _string(_KEY_TYPE) + _string(raw)

    @property
    def public_key_line(self) -> str:
        """`ssh-ed25519 AAAA... comment`, as published in status and allowed signers files."""
        line = f"{_KEY_TYPE} {base64.b64encode(self.public_blob).decode()}"
        return f"{line} {self.comment}" if self.comment else line

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_blob)

    def allowed_signers_line(self, principal: str) -> str:
        """A line for git's `gpg.ssh.allowedSignersFile` trusting this key for `principal`."""
        return f'{principal} namespaces="{NAMESPACE}" {self.public_key_line}'

    def private_openssh(self) -> str:
        """The private key as unencrypted OpenSSH text (to store in a Secret)."""
        from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

        return self._key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ).decode()

    def sign(self, data: bytes, namespace: str = NAMESPACE) -> str:
        """An armored SSHSIG signature of `data` (what `ssh-keygen -Y sign` prints)."""
        digest = hashlib.new(_HASH, data).digest()
        signed = _MAGIC + _string(namespace) + _string(b"") + _string(_HASH) + _string(digest)
        signature = _string(_KEY_TYPE) + _string(self._key.sign(signed))
        blob = (
            _MAGIC
            + struct.pack(">I", 1)
            + _string(self.public_blob)
            + _string(namespace)
            + _string(b"")
            + _string(_HASH)
            + _string(signature)
        )
        body = "\n".join(textwrap.wrap(base64.b64encode(blob).decode(), 70))
        return f"-----BEGIN SSH SIGNATURE-----\n{body}\n-----END SSH SIGNATURE-----\n"

    def sign_commit(
        self,
        repo: pygit2.Repository,
        author: pygit2.Signature,
        committer: pygit2.Signature,
        message: str,
        tree: pygit2.Oid,
        parents: Sequence[pygit2.Oid],
    ) -> pygit2.Oid:
        """Write a signed commit object and return its id; no reference is moved."""
        # pygit2's stub types the result as Oid; it is the commit text.
        content: str = repo.create_commit_string(  # type: ignore[assignment]
            author, committer, message, tree, list(parents)
        )
        # Without the final newline libgit2 lays out the `gpgsig` header as git does.
        signature = self.sign(content.encode()).removesuffix("\n")
        oid: pygit2.Oid = repo.create_commit_with_signature(content, signature)
        return oid
