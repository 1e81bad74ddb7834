"""Combine Shamir shares as sops splits data keys across key groups.

sops uses HashiCorp Vault's scheme: one polynomial per secret byte over GF(2^8) with the
AES reduction polynomial; each share is the y bytes followed by its x coordinate.
"""

from collections.abc import Sequence


def _mul(a: int, b: int) -> int:
    out = 0
    while b:
        if b & 1:
            out ^= a
        a = (a << 1) ^ (0x11B if a & 0x80 else 0)
        b >>= 1
    return out


def _inv(a: int) -> int:
    out, power = 1, a
    for bit in range(8):  # a**254 == a**-1 in GF(2^8)
        if 254 >> bit & 1:
            out = _mul(out, power)
        power = _mul(power, power)
    return out


def combine(parts: Sequence[bytes]) -> bytes:
    """Interpolate the shares at x = 0; raises ValueError for unusable shares."""
    if len(parts) < 2 or len({len(p) for p in parts}) != 1 or len(parts[0]) < 2:
        raise ValueError("need at least two shares of equal length")
    xs = [p[-1] for p in parts]
    if len(set(xs)) != len(xs) or 0 in xs:
        raise ValueError("duplicate or invalid share coordinates")
    bases = []
    for i, xi in enumerate(xs):
        basis = 1
        for j, xj in enumerate(xs):
            if i != j:
                basis = _mul(basis, _mul(xj, _inv(xi ^ xj)))
        bases.append(basis)
    secret = bytearray()
    for idx in range(len(parts[0]) - 1):
        value = 0
        for part, basis in zip(parts, bases, strict=True):
            value ^= _mul(part[idx], basis)
        secret.append(value)
    return bytes(secret)
