"""Read YAML the way sops sees it: go-yaml v3 scalar resolution, as a Python tree.

PyYAML resolves plain scalars by YAML 1.1 rules (``yes`` is a bool, ``1e3`` a string),
go-yaml v3 by its own mix of 1.2 and 1.1 rules. The sops MAC covers the typed view, so a
file must be read with go-yaml's rules. Timestamps come back as their canonical RFC 3339
text, which is also the byte form sops feeds into the MAC.
"""

import base64
import math
import re
from typing import Any

import yaml

from kubescribe.mirror import boundedyaml

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_UINT64_MAX = (1 << 64) - 1

_PLAIN_TAG = "tag:kubescribe,2026:go-plain"

_CONSTANTS: dict[str, object] = {
    **dict.fromkeys(("true", "True", "TRUE"), True),
    **dict.fromkeys(("false", "False", "FALSE"), False),
    **dict.fromkeys(("", "~", "null", "Null", "NULL"), None),
    **dict.fromkeys((".nan", ".NaN", ".NAN"), math.nan),
    **dict.fromkeys((".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF"), math.inf),
    **dict.fromkeys(("-.inf", "-.Inf", "-.INF"), -math.inf),
}

# First characters for which go-yaml tries timestamps and numbers.
_HINT_NUMBER = frozenset("+-0123456789")

_YAML_STYLE_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_GO_FLOAT = re.compile(
    r"[-+]?(inf|infinity|nan|([0-9]+\.?[0-9]*|\.[0-9]+)(e[-+]?[0-9]+)?)", re.IGNORECASE
)
_RADIX = {"0x": 16, "0X": 16, "0b": 2, "0B": 2, "0o": 8, "0O": 8}
_DIGITS = {16: "0123456789abcdefABCDEF", 10: "0123456789", 8: "01234567", 2: "01"}

# go-yaml's timestamp layouts: "2006-1-2T15:4:5.999999999Z07:00" (also with "t"),
# "2006-1-2 15:4:5.999999999" (UTC) and "2006-1-2". A layout space matches 1+ spaces.
_TIMESTAMP = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{1,2})-(?P<d>[0-9]{1,2})"
    r"(?:(?:[Tt]|(?P<sp> +))(?P<h>[0-9]{1,2}):(?P<mi>[0-9]{1,2}):(?P<s>[0-9]{1,2})"
    r"(?:[.,](?P<f>[0-9]+))?(?P<z>Z|[-+][0-9]{2}:[0-9]{2})?)?"
)
# Go's time.RFC3339 layout, as sops parses lastmodified and "time" values.
_RFC3339 = re.compile(
    r"(?P<y>[0-9]{4})-(?P<mo>[0-9]{2})-(?P<d>[0-9]{2})T(?P<h>[0-9]{2}):(?P<mi>[0-9]{2})"
    r":(?P<s>[0-9]{2})(?:[.,](?P<f>[0-9]+))?(?P<z>Z|[-+][0-9]{2}:[0-9]{2})"
)


class GoYamlError(ValueError):
    """The text is not YAML sops could read (the message names no values)."""


# --- numbers -----------------------------------------------------------------------------


def parse_go_int(text: str, *, base0: bool) -> int | None:
    """`strconv.ParseInt`/`ParseUint` range: base 0 (prefixes) or 10; None if invalid."""
    sign, body = (text[0], text[1:]) if text[:1] in ("+", "-") else ("", text)
    base = 10
    if base0:
        if body[:2] in _RADIX:
            base, body = _RADIX[body[:2]], body[2:]
        elif len(body) > 1 and body[0] == "0":
            base, body = 8, body[1:]
    if not body or any(c not in _DIGITS[base] for c in body):
        return None
    value = int(body, base)
    value = -value if sign == "-" else value
    if _INT64_MIN <= value <= _INT64_MAX or (sign == "" and value <= _UINT64_MAX):
        return value
    return None


def parse_go_float(text: str) -> float | None:
    """`strconv.ParseFloat` for decimal input; None on syntax or range error."""
    if not _GO_FLOAT.fullmatch(text):
        return None
    value = float(text)
    if math.isinf(value) and "inf" not in text.lower():
        return None  # Go reports ErrRange instead of overflowing to infinity
    return value


def _resolve_number(text: str) -> object:
    plain = text.replace("_", "")
    as_int = parse_go_int(plain, base0=True)
    if as_int is not None:
        return as_int
    if _YAML_STYLE_FLOAT.fullmatch(plain):
        as_float = parse_go_float(plain)
        if as_float is not None:
            return as_float
    return text


# --- timestamps --------------------------------------------------------------------------


def _days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _format_time(m: re.Match[str], *, nanos: bool) -> str | None:
    year, month, day = int(m["y"]), int(m["mo"]), int(m["d"])
    hour, minute, second = (int(m[g]) if m[g] else 0 for g in ("h", "mi", "s"))
    if not (1 <= month <= 12 and hour < 24 and minute < 60 and second < 60):
        return None
    if not 1 <= day <= _days_in_month(year, month):
        return None
    zone = m["z"] or "Z"
    if zone != "Z":
        if int(zone[1:3]) > 24 or int(zone[4:6]) > 60:
            return None
        if int(zone[1:3]) == 0 and int(zone[4:6]) == 0:
            zone = "Z"
    frac = (m["f"] or "")[:9].ljust(9, "0").rstrip("0") if nanos else ""
    frac = "." + frac if frac else ""
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}{frac}{zone}"


def resolve_timestamp(text: str) -> str | None:
    """go-yaml's plain-scalar timestamp, as Go's RFC 3339 (nano) text; None if not one."""
    m = _TIMESTAMP.fullmatch(text)
    if m is None or (m["sp"] is None and m["h"] is not None and m["z"] is None):
        return None
    if m["sp"] is not None and m["z"] is not None:
        return None
    return _format_time(m, nanos=True)


def canonical_rfc3339(text: str, *, nanos: bool) -> str | None:
    """Parse with Go's RFC 3339 layout and re-format (``nanos`` keeps the fraction)."""
    m = _RFC3339.fullmatch(text)
    return None if m is None else _format_time(m, nanos=nanos)


# --- scalar resolution -------------------------------------------------------------------


def resolve_plain(text: str) -> object:
    """The Go value go-yaml v3 gives an untagged plain scalar (timestamps as text)."""
    if text in _CONSTANTS:
        return _CONSTANTS[text]
    first = text[0]
    if first == ".":
        as_float = parse_go_float(text)
        return text if as_float is None else as_float
    if first in _HINT_NUMBER:
        stamp = resolve_timestamp(text)
        return stamp if stamp is not None else _resolve_number(text)
    return text  # map hints (y, n, t, f, o, ~) were settled by the constant table


class _Loader(yaml.CSafeLoader):
    """CSafeLoader with go-yaml v3 resolution of plain scalars."""

    def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
        if kind is yaml.ScalarNode and implicit[0]:
            return _PLAIN_TAG
        return super().resolve(kind, value, implicit)  # type: ignore[no-untyped-call]


def _construct_plain(loader: _Loader, node: yaml.ScalarNode) -> object:
    value = resolve_plain(loader.construct_scalar(node))
    if isinstance(value, int) and not isinstance(value, bool) and value > _INT64_MAX:
        raise GoYamlError("an integer above the int64 range cannot be read by sops")
    return value


def _construct_binary(loader: _Loader, node: yaml.ScalarNode) -> str:
    raw = base64.b64decode("".join(str(loader.construct_scalar(node)).split()))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise GoYamlError("binary scalar is not UTF-8") from err


def _construct_timestamp(loader: _Loader, node: yaml.ScalarNode) -> str:
    text = str(loader.construct_scalar(node))
    stamp = resolve_timestamp(text)
    if stamp is None:
        raise GoYamlError("explicit timestamp tag on a non-timestamp")
    return stamp


def _construct_unknown(loader: _Loader, suffix: str, node: yaml.Node) -> object:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    raise GoYamlError("unsupported YAML node")


_Loader.add_constructor(_PLAIN_TAG, _construct_plain)
_Loader.add_constructor("tag:yaml.org,2002:binary", _construct_binary)
_Loader.add_constructor("tag:yaml.org,2002:timestamp", _construct_timestamp)
_Loader.add_multi_constructor("", _construct_unknown)


def load(data: bytes | str) -> Any:
    """Parse one YAML document with go-yaml v3's typing; raises `GoYamlError`.

    The text comes from Git: no alias (a "billion laughs" tree is small to store but endless
    to walk), no nesting past `boundedyaml.MAX_DEPTH` (the tree walks that follow recurse) and
    at most `boundedyaml.MAX_NODES` nodes, checked before anything is composed. The caller
    caps the size."""
    try:
        boundedyaml.check(data, max_bytes=None, aliases=False)
        docs = list(yaml.load_all(data, Loader=_Loader))
    except boundedyaml.RefusedYaml as refused:
        raise GoYamlError(str(refused)) from None
    except (yaml.YAMLError, ValueError, UnicodeDecodeError, RecursionError) as err:
        if isinstance(err, GoYamlError):
            raise
        raise GoYamlError(f"invalid YAML ({type(err).__name__})") from None
    if len(docs) != 1:
        raise GoYamlError("expected exactly one YAML document")
    return docs[0]
