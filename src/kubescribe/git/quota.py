"""A namespace's share of the object cache: sizes and budget arithmetic, no I/O.

Every tenant's clones live in one volume (an emptyDir in the chart); a repository larger than
the volume would get the Pod evicted, for every tenant. A quota caps what one namespace's
clones may hold on disk; 0 means no quota.
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"^(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_UNITS = {
    "": 1,
    "k": 1000,
    "M": 1000**2,
    "G": 1000**3,
    "T": 1000**4,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
}
_BINARY = (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10))


def parse_size(text: str) -> int:
    """Bytes of a size written as Kubernetes quantities are (`268435456`, `256Mi`, `1G`);
    raises ValueError for anything else (fractions and negative sizes included)."""
    match = _SIZE.match(text.strip())
    if match is None:
        raise ValueError(f"not a size: {text!r} (use bytes or a suffix like 256Mi or 1G)")
    return int(match[1]) * _UNITS[match[2] or ""]


def format_size(size: int) -> str:
    """`size` bytes in the largest binary unit that writes it whole (`256Mi`, `1536Ki`)."""
    for suffix, unit in _BINARY:
        if size and size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def allowance(quota: int, used: int) -> int | None:
    """How many more bytes a namespace that holds `used` may add (never below 0); None
    without a quota."""
    if quota <= 0:
        return None
    return max(0, quota - used)


def exceeds(quota: int, used: int) -> bool:
    """`used` bytes are more than the quota allows."""
    return quota > 0 and used > quota


def refusal_message(quota: int) -> str:
    """The fixed status message of a refused target (no figure a remote chose)."""
    return (
        f"The namespace's Git clones would exceed the cache quota of {format_size(quota)} "
        "per namespace; the clone was removed and nothing was written. Use a smaller "
        "repository or ask for a larger quota (--cache-quota-per-namespace)"
    )
