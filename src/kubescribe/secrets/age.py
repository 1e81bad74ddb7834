"""age X25519 keys: generation, parsing, and wrapping of sops data keys.

Error messages never contain key material; they name a position at most.
"""

import base64
import hashlib
import hmac
from collections.abc import Sequence

import pyrage
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
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


# --- stanzas made again from their key ------------------------------------------------------

_BECH32 = "qpzry9x8gf2tvdw0s3jn54khce6mua7l"
_SEEDED_INFO = b"kubescribe age stanza v1\x00"
_CHUNK = 64 * 1024  # age's payload chunk: what fits one chunk needs no counter past zero


def wrap_seeded(key: bytes, recipient: str) -> str:
    """``key`` encrypted to one recipient like `wrap` (an age v1 file, ASCII-armored), with
    every input age draws at random (file key, ephemeral key, payload nonce) derived from
    ``key`` itself and the recipient: the same inputs give the same bytes, so whoever holds
    the key can check any recipient's stanza by making it again. The payload is the seed, so
    one derived nonce never encrypts two plaintexts."""
    their = _public_key(check_recipient(recipient))
    if not 0 < len(key) <= _CHUNK:
        raise ValueError("a seeded stanza holds one payload chunk")
    derived = _hkdf(key, b"", _SEEDED_INFO + their, 64)
    file_key, ephemeral, nonce = derived[:16], derived[16:48], derived[48:]
    secret = X25519PrivateKey.from_private_bytes(ephemeral)
    share = secret.public_key().public_bytes_raw()
    shared = secret.exchange(X25519PublicKey.from_public_bytes(their))
    wrap_key = _hkdf(shared, share + their, b"age-encryption.org/v1/X25519", 32)
    body = ChaCha20Poly1305(wrap_key).encrypt(bytes(12), file_key, None)
    header = f"age-encryption.org/v1\n-> X25519 {_raw64(share)}\n{_raw64(body)}\n---".encode()
    mac = hmac.new(_hkdf(file_key, b"", b"header", 32), header, hashlib.sha256).digest()
    payload_key = _hkdf(file_key, nonce, b"payload", 32)
    payload = ChaCha20Poly1305(payload_key).encrypt(bytes(11) + b"\x01", key, None)
    binary = header + f" {_raw64(mac)}\n".encode() + nonce + payload
    text = base64.b64encode(binary).decode("ascii")
    lines = "\n".join(text[i : i + 64] for i in range(0, len(text), 64))
    return f"-----BEGIN AGE ENCRYPTED FILE-----\n{lines}\n-----END AGE ENCRYPTED FILE-----\n"


def _public_key(recipient: str) -> bytes:
    """The X25519 public key of a checked ``age1...`` recipient (bech32, checksum dropped)."""
    acc = bits = 0
    out = bytearray()
    for char in recipient.lower().rpartition("1")[2][:-6]:
        acc, bits = (acc << 5 | _BECH32.index(char)) & 0xFFF, bits + 5
        if bits >= 8:
            bits -= 8
            out.append(acc >> bits & 0xFF)
    if len(out) != 32:
        raise ValueError("invalid age X25519 recipient")
    return bytes(out)


def _hkdf(ikm: bytes, salt: bytes, info: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(ikm)


def _raw64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii").rstrip("=")
