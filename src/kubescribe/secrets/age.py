"""age X25519 keys: generation, parsing, and wrapping of sops data keys.

Error messages never contain key material; they name a position at most.
"""

from collections.abc import Sequence

import pyrage
from pyrage import x25519

_IDENTITY_PREFIX = "AGE-SECRET-KEY-1"


def generate_identity() -> tuple[str, str]:
    """A new ``(identity, recipient)`` pair: ``AGE-SECRET-KEY-1...`` and ``age1...``."""
    identity = x25519.Identity.generate()
    return str(identity), str(identity.to_public())


def _identity(text: str, where: str) -> x25519.Identity:
    if not text.upper().startswith(_IDENTITY_PREFIX):
        raise ValueError(f"{where}: not an age X25519 identity")
    try:
        return x25519.Identity.from_str(text)
    except pyrage.IdentityError:
        raise ValueError(f"{where}: invalid age X25519 identity") from None


def recipient_of(identity: str) -> str:
    """The ``age1...`` recipient of an ``AGE-SECRET-KEY-1...`` identity."""
    return str(_identity(identity.strip(), "identity").to_public())


def parse_identities(text: str) -> list[str]:
    """Identities from an age key file (``age-keygen`` output; comments and blanks skipped)."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            _identity(stripped, f"line {number}")
            found.append(stripped)
    return found


def load_identities(identities: Sequence[str]) -> list[x25519.Identity]:
    """Parsed identities; raises ValueError naming only the position of a bad one."""
    return [_identity(text.strip(), f"identity #{n}") for n, text in enumerate(identities, 1)]


def check_recipient(recipient: str) -> str:
    """The recipient, validated as an age X25519 ``age1...`` string."""
    try:
        x25519.Recipient.from_str(recipient)
    except pyrage.RecipientError:
        raise ValueError("invalid age X25519 recipient") from None
    return recipient


def wrap(data: bytes, recipient: str) -> str:
    """``data`` encrypted to one recipient, ASCII-armored (as sops stores ``enc``)."""
    armored = pyrage.encrypt(data, [x25519.Recipient.from_str(recipient)], armored=True)
    return armored.decode("ascii")


def unwrap(armored: str, identities: Sequence[x25519.Identity]) -> bytes | None:
    """Decrypt an armored (or binary) age file; None if no identity opens it."""
    if not identities:
        return None
    try:
        return pyrage.decrypt(armored.encode("utf-8"), list(identities))
    except pyrage.DecryptError:
        return None
