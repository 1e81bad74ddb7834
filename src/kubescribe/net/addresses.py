"""Which hosts the operator may connect to for a tenant (Git remotes, remote API servers).

Always refused: cloud metadata endpoints (by name or address) and link-local addresses. With
`NetworkPolicy(deny_private=True)` (`kubescribe run --deny-private-networks`) every address that
is not globally routable is refused too (RFC 1918, loopback, CGNAT, ULA, unspecified,
multicast), and so are names that only resolve inside a cluster or a LAN (`*.cluster.local`,
`*.svc`, `*.local`, `localhost`, single-label names).

A literal host is read the way resolvers read it: the legacy IPv4 spellings (`2852039166`,
`0xa9.0xfe.0xa9.0xfe`, `169.254.43518`) and IPv4 addresses embedded in IPv6 (IPv4-mapped,
IPv4-compatible, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4, Teredo) are checked as the
IPv4 address they reach. Resolving names is the caller's business: it checks each address a
name resolves to with `refusal` as well.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

Address = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "instance-data",
        "instance-data.ec2.internal",
    }
)
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")
)
_LINK_LOCAL = (ipaddress.ip_network("169.254.0.0/16"), ipaddress.ip_network("fe80::/10"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_LOCAL_SUFFIXES = (".cluster.local", ".svc", ".local", ".localhost", ".internal")
_LEGACY_PART = re.compile(r"^(0x[0-9a-f]+|0[0-7]*|[1-9][0-9]*)$", re.IGNORECASE)

DENY_PRIVATE_FLAG = "--deny-private-networks"


@dataclass(frozen=True)
class NetworkPolicy:
    """Operator-wide: `deny_private` also refuses addresses that are not globally routable."""

    deny_private: bool = False


class _Process:
    policy = NetworkPolicy()


def set_network_policy(policy: NetworkPolicy) -> None:
    """Set the process-wide policy (`kubescribe run` does, once, before anything connects)."""
    _Process.policy = policy


def network_policy() -> NetworkPolicy:
    return _Process.policy


def refusal(host: str, policy: NetworkPolicy) -> str | None:
    """Why the operator may not connect to `host` (a name or a literal address, brackets
    allowed), as the end of a sentence ("is a link-local address"); None when it may."""
    name = host.strip("[]").lower().rstrip(".")
    if name in METADATA_HOSTS:
        return "is a cloud metadata endpoint"
    address = literal_address(name)
    if address is None:
        if policy.deny_private and (
            name == "localhost" or "." not in name or name.endswith(_LOCAL_SUFFIXES)
        ):
            return f"is a cluster or local network name ({DENY_PRIVATE_FLAG})"
        return None
    for candidate in (address, embedded_ipv4(address)):
        if candidate is None:
            continue
        if candidate in METADATA_ADDRESSES:
            return "is a cloud metadata endpoint"
        if any(candidate in network for network in _LINK_LOCAL):
            return "is a link-local address"
        if policy.deny_private and (not candidate.is_global or candidate.is_multicast):
            return f"is a private, loopback or reserved address ({DENY_PRIVATE_FLAG})"
    return None


def literal_address(name: str) -> Address | None:
    """The address `name` spells (an IPv6 zone is ignored), including legacy IPv4 forms;
    None for a name."""
    try:
        return ipaddress.ip_address(name.split("%", 1)[0])
    except ValueError:
        return _legacy_ipv4(name)


def embedded_ipv4(address: Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, NAT64, 6to4, Teredo)."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    value = int(address)
    if address in _NAT64 or (address in _IPV4_COMPATIBLE and value > 1):
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address in _NAT64_LOCAL:  # RFC 6052 /48: bits 48-63 and 72-87, around the u octet
        return ipaddress.IPv4Address(((value >> 64) & 0xFFFF) << 16 | (value >> 40) & 0xFFFF)
    return None


def _legacy_ipv4(name: str) -> ipaddress.IPv4Address | None:
    """inet_aton's reading: one to four parts (decimal, 0-octal, 0x-hex), the last filling the
    remaining bytes (`10.1` is 10.0.0.1, `2852039166` is 169.254.169.254)."""
    parts = name.split(".")
    if not 1 <= len(parts) <= 4 or not all(_LEGACY_PART.match(p) for p in parts):
        return None
    values = [
        int(p, 16) if p[:2].lower() == "0x" else int(p, 8 if p[0] == "0" else 10) for p in parts
    ]
    *head, last = values
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (5 - len(values))):
        return None
    value = 0
    for v in head:
        value = value << 8 | v
    return ipaddress.IPv4Address(value << (8 * (5 - len(values))) | last)
