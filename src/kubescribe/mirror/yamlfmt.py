"""Deterministic YAML for mirrored documents.

The output must read back as the same tree in every YAML reader a user may point at the
repository: YAML 1.1 readers (PyYAML, go-yaml v2 behind kubectl) and YAML 1.2 core-schema
readers alike. So any string that some reader would resolve to a non-string is quoted.
"""

import re
from collections.abc import Mapping
from typing import Any

import yaml

# A plain scalar matching any of these is read as a non-string by at least one reader.
# The table is the union of the YAML 1.1 types, the YAML 1.2 core schema and what
# go-yaml v2 accepts (upper-case radix prefixes); quoting too much is harmless.
_NON_STRING_SCALARS = re.compile(
    r"""
      # bool (YAML 1.1 spelling, a superset of 1.2)
      y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF
      # null, including the empty scalar
    | ~|null|Null|NULL|
      # int: binary, octal (1.1 "014" and 1.2 "0o14"), hex, decimal, sexagesimal "1:20"
    | [-+]?0[bB][01_]+
    | [-+]?0[oO]?[0-7_]+
    | [-+]?0[xX][0-9a-fA-F_]+
    | [-+]?[0-9_]+
    | [-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+
      # float: "1.", "1.5e3", "1e3", ".5", sexagesimal, infinities, not-a-number
    | [-+]?[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
    | [-+]?[0-9][0-9_]*[eE][-+]?[0-9]+
    | [-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?
    | [-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+\.[0-9_]*
    | [-+]?\.(?:inf|Inf|INF|nan|NaN|NAN)
      # timestamp: a date, or a date and a time
    | [0-9]{4}-[0-9]{1,2}-[0-9]{1,2}
      (?:(?:[Tt]|[\ \t]+)[0-9]{1,2}:[0-9]{2}:[0-9]{2}(?:\.[0-9]*)?
         (?:[\ \t]*(?:Z|[-+][0-9]{1,2}(?::[0-9]{2})?))?)?
      # merge key and YAML 1.1 value key
    | <<|=
    """,
    re.VERBOSE,
)

# Line breaks other than LF: a block scalar would not carry them through a reader
# unchanged, so such strings are written double-quoted with escapes.
_OTHER_BREAKS = frozenset("\r\x85\u2028\u2029")

# libyaml treats a negative width as "never wrap".
_NO_WRAP = -1


def _resolves_to_non_string(s: str) -> bool:
    if s != s.strip() or _NON_STRING_SCALARS.fullmatch(s) is not None:
        return True
    # go-yaml v3 (behind sops) removes every underscore before it tries a number: "0_X0" is 0.
    return "_" in s and _NON_STRING_SCALARS.fullmatch(s.replace("_", "")) is not None


def _represent_str(dumper: "_Dumper", data: str) -> yaml.ScalarNode:
    # Styles are requests: libyaml falls back to single quotes when plain is unsafe, and
    # from single quotes or a literal block to double quotes when those cannot hold the text.
    style: str | None = None
    if not _OTHER_BREAKS.isdisjoint(data):
        style = '"'
    elif "\n" in data:
        style = "|"
    elif _resolves_to_non_string(data):
        style = "'"
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


class _Dumper(yaml.CSafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        # Anchors would depend on object identity, not on content.
        return True


_Dumper.add_representer(str, _represent_str)


def dump_yaml(obj: Any) -> str:
    """Render a JSON-like tree; dict order is kept (see `order_document`)."""
    return yaml.dump(
        obj,
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        allow_unicode=True,
        width=_NO_WRAP,
        indent=2,
        line_break="\n",
    )


def needs_quotes(s: str) -> bool:
    """Whether `s` cannot be written as a plain (unquoted) scalar.

    True for strings a YAML 1.1 or 1.2 reader would take as another type, and for those the
    emitter will not write plain (indicators, multiple lines, special characters).
    """
    return _resolves_to_non_string(s) or dump_yaml(s)[0] in "'\"|"


def load_yaml(text: str | bytes) -> Any:
    return yaml.load(text, Loader=yaml.CSafeLoader)


def load_yaml_all(text: str | bytes) -> list[Any]:
    return [d for d in yaml.load_all(text, Loader=yaml.CSafeLoader) if d is not None]


_TOP_FIRST = ("apiVersion", "kind", "metadata")
_METADATA_FIRST = ("name", "namespace", "labels", "annotations")


def _ordered_keys(obj: Mapping[str, Any], first: tuple[str, ...]) -> list[str]:
    return [k for k in first if k in obj] + sorted(k for k in obj if k not in first)


def _sorted_tree(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _sorted_tree(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted_tree(v) for v in value]
    return value


def order_document(obj: Mapping[str, Any]) -> dict[str, Any]:
    """Canonical key order: apiVersion, kind, metadata (name, namespace, labels,
    annotations, then sorted), then the rest; all deeper maps sorted, lists untouched."""
    out: dict[str, Any] = {}
    for key in _ordered_keys(obj, _TOP_FIRST):
        value = obj[key]
        if key == "metadata" and isinstance(value, Mapping):
            out[key] = {k: _sorted_tree(value[k]) for k in _ordered_keys(value, _METADATA_FIRST)}
        else:
            out[key] = _sorted_tree(value)
    return out
