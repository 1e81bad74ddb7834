"""sops value encryption: ``ENC[AES256_GCM,...]`` strings and Go-typed plaintext bytes.

A leaf is handled as a *typed value* ``(type, bytes)``: the sops type name and the exact
plaintext bytes sops encrypts and feeds into the MAC (Go's `ToBytes`).
"""

import base64
import binascii
import math
import os
import re
from decimal import Decimal
from typing import NamedTuple

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from kubescribe.secrets import _goyaml

IV_SIZE = 32  # sops uses 256-bit GCM nonces
TAG_SIZE = 16
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

_ENC = re.compile(r"ENC\[AES256_GCM,data:(.+),iv:(.+),tag:(.+),type:(.+)\]")
_GO_INT = re.compile(r"[-+]?[0-9]+")
_BOOLS = {
    **dict.fromkeys(("1", "t", "T", "TRUE", "true", "True"), True),
    **dict.fromkeys(("0", "f", "F", "FALSE", "false", "False"), False),
}


class Typed(NamedTuple):
    """A leaf as sops sees it: type name and canonical plaintext bytes."""

    type: str
    plain: bytes


class EncValue(NamedTuple):
    data: bytes
    iv: bytes
    tag: bytes
    type: str


class ValueTypeError(TypeError):
    """A leaf that sops cannot represent (the message names no value)."""


def go_float(value: float) -> str:
    """Go's ``strconv.FormatFloat(v, 'f', -1, 64)``: shortest digits, no exponent."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return format(Decimal(repr(value)).normalize(), "f")


def typed_leaf(value: object) -> Typed:
    """The typed view of a str/int/float/bool leaf."""
    if isinstance(value, bool):
        return Typed("bool", b"True" if value else b"False")
    if isinstance(value, int):
        if not INT64_MIN <= value <= INT64_MAX:
            raise ValueTypeError("integer outside the int64 range")
        return Typed("int", str(value).encode())
    if isinstance(value, float):
        return Typed("float", go_float(value).encode())
    if isinstance(value, str):
        try:
            return Typed("str", value.encode("utf-8"))
        except UnicodeEncodeError:
            raise ValueTypeError("string is not valid Unicode text") from None
    raise ValueTypeError(f"unsupported value type {type(value).__name__}")


_MIN_IV, _MAX_IV = 8, 128  # what AES-GCM here accepts; sops writes 32 bytes


def encrypt(key: bytes, ad: str, typed: Typed, iv: bytes | None = None) -> str:
    """Encrypt one typed value with AD ``ad`` into sops' ``ENC[...]`` form."""
    iv = os.urandom(IV_SIZE) if iv is None else iv
    sealed = AESGCM(key).encrypt(iv, typed.plain, ad.encode("utf-8"))
    b64 = [base64.b64encode(part).decode() for part in (sealed[:-TAG_SIZE], iv, sealed[-TAG_SIZE:])]
    return f"ENC[AES256_GCM,data:{b64[0]},iv:{b64[1]},tag:{b64[2]},type:{typed.type}]"


def parse(text: str) -> EncValue | None:
    """Split an ``ENC[...]`` string (as sops' regex does); None if it is not one."""
    m = _ENC.match(text)
    if m is None:
        return None
    try:
        data, iv, tag = (base64.b64decode(m.group(g), validate=True) for g in (1, 2, 3))
    except (binascii.Error, ValueError):
        return None
    if not _MIN_IV <= len(iv) <= _MAX_IV or len(tag) != TAG_SIZE:
        return None
    return EncValue(data, iv, tag, m.group(4))


def decrypt(key: bytes, value: EncValue, ad: str) -> bytes:
    """Raw plaintext bytes; raises `cryptography.exceptions.InvalidTag` on tampering."""
    return AESGCM(key).decrypt(value.iv, value.data + value.tag, ad.encode("utf-8"))


def _decoded(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueTypeError("decrypted text is not UTF-8") from None


def to_python(type_name: str, raw: bytes) -> tuple[object, Typed]:
    """Go value (as Python) and its MAC bytes for decrypted ``raw`` of sops type ``type_name``.

    Mirrors sops' decrypt: parse with Go's strconv rules, then `ToBytes` the parsed value.
    """
    text = _decoded(raw)
    if type_name in ("str", "bytes"):
        return text, Typed("str", raw)
    if type_name in ("int", "int64") and _GO_INT.fullmatch(text):
        number = int(text)
        if INT64_MIN <= number <= INT64_MAX:
            return number, typed_leaf(number)
    if type_name == "float":
        real = _goyaml.parse_go_float(text)
        if real is not None:
            return real, typed_leaf(real)
    if type_name == "bool" and text in _BOOLS:
        return _BOOLS[text], typed_leaf(_BOOLS[text])
    if type_name == "time":
        stamp = _goyaml.canonical_rfc3339(text, nanos=True)
        if stamp is not None:
            return stamp, Typed("time", stamp.encode())
    raise ValueTypeError(f"cannot read a value of sops type {type_name!r}")
