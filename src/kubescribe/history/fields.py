"""Field paths of a document: what changed between two versions, a one-line summary of it, and
blame (the change that last set each field). Pure: no I/O. The path grammar (`flatten`) is
`kubescribe.mirror.fieldpaths`, shared with alerts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from kubescribe.mirror.fieldpaths import flatten

_T = TypeVar("_T")
MISSING: Any = type("Missing", (), {"__repr__": lambda self: "MISSING"})()
"""The value of a path a version does not have."""

_MAX_SHOWN = 40
_MAX_LISTED = 3


@dataclass(frozen=True)
class FieldChange:
    """One leaf that differs: `old` or `new` is MISSING when the path was added or removed."""

    path: str
    old: Any
    new: Any

    @property
    def kind(self) -> str:
        if self.old is MISSING:
            return "added"
        return "removed" if self.new is MISSING else "changed"


def diff(old: Any, new: Any) -> list[FieldChange]:
    """The leaves that differ between two versions (None: the object did not exist)."""
    before = flatten(old) if old is not None else {}
    after = flatten(new) if new is not None else {}
    return [
        FieldChange(path, before.get(path, MISSING), after.get(path, MISSING))
        for path in sorted(before.keys() | after.keys())
        if before.get(path, MISSING) != after.get(path, MISSING)
    ]


def is_secret(doc: Any) -> bool:
    """Values of this document are never shown: a Secret, or anything SOPS encrypted."""
    if not isinstance(doc, Mapping):
        return False
    return "sops" in doc or (doc.get("kind") == "Secret" and doc.get("apiVersion") == "v1")


def shown(value: Any) -> str | None:
    """A short one-line rendering of a scalar, or None when it is not worth a line."""
    if isinstance(value, (Mapping, list)):
        return "{}" if isinstance(value, Mapping) else "[]"
    text = value if isinstance(value, str) else json.dumps(value)
    if "\n" in text or len(text) > _MAX_SHOWN or "ENC[" in text:
        return None
    return text


def describe(change: FieldChange, secret: bool) -> str:
    """`spec.replicas 2→3`, `data.LOG_LEVEL changed`, `metadata.labels.tier added (web)`."""
    if secret:
        return f"{change.path} {change.kind}"
    if change.kind == "changed":
        old, new = shown(change.old), shown(change.new)
        if old is not None and new is not None:
            return f"{change.path} {old}→{new}"
        return f"{change.path} changed"
    value = shown(change.new if change.kind == "added" else change.old)
    return f"{change.path} {change.kind}" + (f" ({value})" if value is not None else "")


def summary(operation: str, changes: Sequence[FieldChange], secret: bool) -> str:
    """One line for a change of one object (never a value of a Secret)."""
    if operation in ("CREATE", "DELETE"):
        return "created" if operation == "CREATE" else "deleted"
    if not changes:
        return "moved" if operation == "MOVE" else "no field changed"
    listed = [describe(c, secret) for c in changes[:_MAX_LISTED]]
    more = len(changes) - _MAX_LISTED
    return ", ".join(listed) + (f" and {more} more" if more > 0 else "")


def redacted(doc: Any) -> Any:
    """`doc` with the values of `data` and `stringData` hidden (a Secret shown or diffed)."""
    if not isinstance(doc, Mapping):
        return doc
    out = {k: v for k, v in doc.items() if k != "sops"}
    for key in ("data", "stringData"):
        values = out.get(key)
        if isinstance(values, Mapping):
            out[key] = {name: "(hidden)" for name in values}
    return out


def redacted_pair(old: Any, new: Any) -> tuple[Any, Any]:
    """Both versions redacted, a value that differs between them marked on the new side (so
    a diff shows which keys changed, never a value)."""
    out_old, out_new = redacted(old), redacted(new)
    for key in ("data", "stringData"):
        before = old.get(key) if isinstance(old, Mapping) else None
        after = new.get(key) if isinstance(new, Mapping) else None
        if isinstance(before, Mapping) and isinstance(after, Mapping):
            for name in after:
                if name in before and before[name] != after[name]:
                    out_new[key][name] = "(hidden, changed)"
    return out_old, out_new


@dataclass(frozen=True)
class Blamed(Generic[_T]):
    """A leaf of the newest version, its value and the change that last set it."""

    path: str
    value: Any
    change: _T


def blame(versions: Iterable[tuple[_T, Any]]) -> list[Blamed[_T]]:
    """For each leaf of the last version that existed, the change that last set it.
    `versions` are (change, document or None when deleted), oldest first; a deletion ends a
    life and what came before it is not blamed for the next one."""
    setter: dict[str, _T] = {}
    last: dict[str, Any] = {}
    previous: Any = None
    for change, doc in versions:
        if doc is None:
            previous = None
            continue
        if previous is None:
            setter = {}
        for field in diff(previous, doc):
            if field.new is not MISSING:
                setter[field.path] = change
        previous = doc
        last = flatten(doc)
    return [Blamed(path, value, setter[path]) for path, value in sorted(last.items())]
