"""Field paths of a document (the grammar `kubescribe history` and alerts share). Pure.

A path is dotted (`spec.replicas`); a list item with a `name` is addressed by it
(`spec.template.spec.containers[web].image`), other items by position (`args[0]`); a key that
is not a plain word is bracketed (`metadata.labels["app.kubernetes.io/name"]`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

IGNORED = frozenset({"sops"})
"""Top-level keys that are not part of the object (the SOPS metadata block)."""

_WORD = re.compile(r"\A[A-Za-z0-9_-]+\Z")


def _key(key: str) -> str:
    return key if _WORD.match(key) else json.dumps(key)


def _join(prefix: str, key: str) -> str:
    segment = _key(key)
    if not prefix:
        return segment if _WORD.match(key) else f"[{segment}]"
    return f"{prefix}.{segment}" if _WORD.match(key) else f"{prefix}[{segment}]"


def _item_key(items: Sequence[Any]) -> Callable[[int, Any], str]:
    names = [i.get("name") if isinstance(i, Mapping) else None for i in items]
    if all(isinstance(n, str) and n for n in names) and len(set(names)) == len(names):
        return lambda _, item: str(item["name"])
    return lambda index, _: str(index)


def flatten(doc: Any, prefix: str = "") -> dict[str, Any]:
    """Every leaf of `doc` by its path (empty maps and lists are leaves)."""
    out: dict[str, Any] = {}
    if isinstance(doc, Mapping) and doc:
        for key, value in doc.items():
            if not prefix and key in IGNORED:
                continue
            out.update(flatten(value, _join(prefix, str(key))))
    elif isinstance(doc, list) and doc:
        key_of = _item_key(doc)
        for index, value in enumerate(doc):
            out.update(flatten(value, f"{prefix}[{key_of(index, value)}]"))
    else:
        out[prefix] = doc
    return out
