"""Keep what people wrote: the fields some manager owns in `metadata.managedFields`.

Server-side field ownership (FieldsV1) names, for each manager, the fields it set: `f:<name>`
a map field, `k:{...}` a list item by its merge key, `v:<json>` a set member, `i:<n>` a list
item by position, `.` the parent itself; an empty entry (`{}`) owns the whole value below it.
Defaulted and allocated fields are owned by nobody, except that an `Update` (kubectl create,
most clients) owns the defaults of the object it wrote, and an atomic value is owned whole;
there, values equal to the server's default are left out as well (`defaults.DEFAULTS`).
Client-side `kubectl apply` is an Update whose manifest is in its last-applied annotation: its
ownership is narrowed to that manifest.

Anything this cannot read with certainty falls back to the whole object (`Kept.fallback`):
a document is never narrower than what was written. Objects are JSON as decoded (dicts and
lists: `dict` checks, not `Mapping`, keep the walk cheap; it runs for every event).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import Any

from kubescribe.mirror.defaults import DEFAULTS, Defaults

# Who owns a node: a person's (or tool's) Apply, a person's Update, a controller.
_APPLY, _UPDATE, _CONTROLLER = 1, 2, 4
_PEOPLE = _APPLY | _UPDATE
_DROP: Any = object()
_NO_DEFAULTS: Defaults = {}


@dataclass(frozen=True)
class KeepField:
    """A field kept whoever set it (a server default included): a dotted `path` (`*`: every
    list item or map key) on objects whose API group and kind match the globs."""

    path: tuple[str, ...]
    group: str = "*"
    kind: str = "*"


@dataclass(frozen=True)
class Content:
    """What a target's documents hold: `Full` (the object as served, sanitized) or `Owned`.

    `controllers`: managers whose fields are left out unless another manager owns them too
    (sorted: the repr is part of resume cursors' fingerprints).
    """

    mode: str = "Full"
    controllers: tuple[str, ...] = ()
    keep: tuple[KeepField, ...] = ()

    @property
    def owned(self) -> bool:
        return self.mode == "Owned"


FULL = Content()


@dataclass(frozen=True)
class Kept:
    """The owned part of an object, or None with the reason to write it whole."""

    document: dict[str, Any] | None
    fallback: str = ""


class _Unusable(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Node:
    __slots__ = ("any", "children", "dot", "whole")

    def __init__(self) -> None:
        self.whole = 0  # owners of everything below (an empty entry)
        self.dot = 0  # owners of the node itself (`.`)
        self.any = 0  # owners of anything at or below it
        self.children: dict[str, _Node] = {}


def _merge(node: _Node, fields: Mapping[str, Any], owner: int) -> None:
    node.any |= owner
    if not fields:
        node.whole |= owner
        return
    for key, sub in fields.items():
        if not isinstance(key, str) or not isinstance(sub, dict):
            raise _Unusable("malformed")
        if key == ".":
            node.dot |= owner
            continue
        if key[:2] not in ("f:", "k:", "v:", "i:"):
            raise _Unusable("malformed")
        child = node.children.get(key)
        if child is None:
            child = node.children[key] = _Node()
        _merge(child, sub, owner)


def _ownership(obj: Mapping[str, Any], controllers: tuple[str, ...]) -> _Node:
    metadata = obj.get("metadata")
    entries = metadata.get("managedFields") if isinstance(metadata, dict) else None
    if not entries:
        raise _Unusable("missing")
    if not isinstance(entries, list):
        raise _Unusable("malformed")
    root = _Node()
    secret = obj.get("kind") == "Secret" and obj.get("apiVersion") == "v1"
    for entry in entries:
        if not isinstance(entry, dict):
            raise _Unusable("malformed")
        if entry.get("subresource") == "status":
            continue  # status is never mirrored
        if entry.get("fieldsType") != "FieldsV1":
            raise _Unusable("unsupported-format")
        if entry.get("apiVersion") != obj.get("apiVersion"):
            raise _Unusable("version-mismatch")  # paths of another version may differ
        fields = entry.get("fieldsV1")
        if not isinstance(fields, dict):
            raise _Unusable("malformed")
        if entry.get("manager") in controllers:
            owner = _CONTROLLER
        elif entry.get("operation") == "Apply":
            owner = _APPLY
        elif (
            entry.get("manager") == CLIENT_SIDE_APPLY
            and (manifest := _last_applied(metadata)) is not None
        ):
            # What it owns beyond its last manifest are the defaults of its create.
            fields, owner = _written(fields, _as_stored(manifest)), _APPLY
        else:
            owner = _UPDATE
        _merge(root, _string_data_as_data(fields) if secret else fields, owner)
    return root


def _as_stored(manifest: Mapping[str, Any]) -> Mapping[str, Any]:
    """A manifest as the API server stores it: a Secret's `stringData` is merged into `data`
    (write-only: it is never stored, so it would own nothing)."""
    string_data = manifest.get("stringData")
    if manifest.get("kind") != "Secret" or not isinstance(string_data, dict):
        return manifest
    data = manifest.get("data")
    return {**manifest, "data": {**(data if isinstance(data, dict) else {}), **string_data}}


def _string_data_as_data(fields: dict[str, Any]) -> dict[str, Any]:
    """A Secret's ownership with `f:stringData` counted as `f:data` (server-side apply of
    `stringData` owns the keys the server moves into `data`)."""
    string_data = fields.get("f:stringData")
    if not isinstance(string_data, dict):
        return fields
    data = fields.get("f:data")
    merged = {**(data if isinstance(data, dict) else {}), **string_data}
    return {**fields, "f:data": merged}


CLIENT_SIDE_APPLY = "kubectl-client-side-apply"
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_MISSING: Any = object()


def _last_applied(metadata: Any) -> Mapping[str, Any] | None:
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    text = annotations.get(LAST_APPLIED) if isinstance(annotations, dict) else None
    try:
        manifest = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return manifest if isinstance(manifest, dict) else None


def _written(fields: Mapping[str, Any], written: Any) -> dict[str, Any]:
    """The part of a FieldsV1 set that `written` (the manifest last applied) holds."""
    out: dict[str, Any] = {}
    for key, sub in fields.items():
        if not isinstance(key, str) or not isinstance(sub, dict):
            raise _Unusable("malformed")
        if key == ".":
            out[key] = sub
            continue
        if key.startswith("f:"):
            found = written.get(key[2:], _MISSING) if isinstance(written, dict) else _MISSING
        else:
            found = _written_item(key, written) if isinstance(written, list) else _MISSING
        if found is _MISSING:
            continue
        if not sub:
            out[key] = sub
        elif kept := _written(sub, found):
            out[key] = kept
    return out


def _written_item(key: str, written: list[Any]) -> Any:
    """The item of a written list that an item key names; a key field the manifest left out
    (a defaulted `protocol`) matches any value."""
    kind, text = key[:2], key[2:]
    try:
        if kind == "k:":
            fields = json.loads(text)
            if not isinstance(fields, dict) or not fields:
                raise _Unusable("malformed")
            for item in written:
                if (
                    isinstance(item, dict)
                    and any(k in item for k in fields)
                    and all(item[k] == v for k, v in fields.items() if k in item)
                ):
                    return item
        elif kind == "v:":
            value = json.loads(text)
            return value if value in written else _MISSING
        elif kind == "i:":
            index = int(text)
            return written[index] if 0 <= index < len(written) else _MISSING
        else:
            raise _Unusable("malformed")
    except ValueError as exc:
        raise _Unusable("malformed") from exc
    return _MISSING


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _sub(defaults: Any, key: str) -> Any:
    if isinstance(defaults, dict):
        return defaults.get(key, defaults.get("*", _NO_DEFAULTS))
    return _NO_DEFAULTS


def _is_default(defaults: Any, value: Any, parent: Mapping[str, Any]) -> bool:
    return callable(defaults) and bool(defaults(value, parent))


def _without_defaults(value: Any, defaults: Any) -> Any:
    """A copy of a value written whole, less what equals the server's defaults inside it."""
    if not isinstance(defaults, dict) or not defaults:
        return _copy(value)
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            sub = _sub(defaults, key)
            if _is_default(sub, item, value):
                continue
            kept = _without_defaults(item, sub)
            if kept != {} or item == {}:
                out[key] = kept
        return out
    if isinstance(value, list):
        return [_without_defaults(item, _sub(defaults, "*")) for item in value]
    return value


class _Walk:
    """Walks a value and its ownership node together (stateless; methods for readability)."""

    def value(
        self, value: Any, node: _Node | None, defaults: Any, keep: Any, parent: Mapping[str, Any]
    ) -> Any:
        if keep is True:
            return _copy(value)
        # What no Apply wrote may be a default recorded as owned by an Update.
        applied = node is not None and node.any & _APPLY
        if not applied and _is_default(defaults, value, parent):
            return _DROP
        whole = node.whole & _PEOPLE if node is not None else 0
        if whole:
            if not applied and value == {} and isinstance(defaults, dict) and defaults:
                return _DROP  # an empty struct the server fills in (`resources: {}`)
            kept = _without_defaults(value, defaults)
            return _DROP if kept == {} and value != {} else kept
        if node is None and not isinstance(keep, dict):
            return _DROP
        if isinstance(value, dict):
            return self.map(value, node, defaults, keep)
        if isinstance(value, list):
            return self.list(value, node, defaults, keep)
        return value if node is not None and node.dot & _PEOPLE else _DROP

    def _empty(self, value: Any, node: _Node | None, empty: Any) -> Any:
        # Nothing inside is kept: keep the empty value only when written (or applied) empty.
        if node is not None and node.dot & _PEOPLE and (not value or node.dot & _APPLY):
            return empty
        return _DROP

    def map(self, value: Mapping[str, Any], node: _Node | None, defaults: Any, keep: Any) -> Any:
        children = node.children if node is not None else {}
        out: dict[str, Any] = {}
        for key, item in value.items():
            child = children.get(f"f:{key}")
            sub_keep = keep.get(key, keep.get("*")) if isinstance(keep, dict) else None
            if child is None and sub_keep is None:
                continue
            kept = self.value(item, child, _sub(defaults, key), sub_keep, value)
            if kept is not _DROP:
                out[key] = kept
        return out if out else self._empty(value, node, {})

    def list(self, value: list[Any], node: _Node | None, defaults: Any, keep: Any) -> Any:
        items = _items(node) if node is not None else _Items()
        item_defaults = _sub(defaults, "*")
        item_keep = keep.get("*") if isinstance(keep, dict) else None
        out = []
        for index, item in enumerate(value):
            child = items.find(index, item)
            if child is None:
                continue
            if not isinstance(item, dict):
                if (child.whole | child.dot) & _PEOPLE:
                    out.append(_copy(item))
                continue
            kept = self.value(item, child, item_defaults, item_keep, {})
            if kept is not _DROP and kept != {}:
                out.append(kept)
        return out if out else self._empty(value, node, [])


class _Items:
    """The list items a node names: by merge key, by value, by position."""

    def __init__(self) -> None:
        self.keyed: dict[str, _Node] = {}
        self.key_names: list[tuple[str, ...]] = []
        self.values: dict[str, _Node] = {}
        self.positions: dict[int, _Node] = {}

    def find(self, index: int, item: Any) -> _Node | None:
        if index in self.positions:
            return self.positions[index]
        if self.values:
            found = self.values.get(_canonical(item))
            if found is not None:
                return found
        if self.keyed and isinstance(item, dict):
            for names in self.key_names:
                found = self.keyed.get(_canonical([[n, item.get(n)] for n in names]))
                if found is not None:
                    return found
        return None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _items(node: _Node) -> _Items:
    items = _Items()
    for key, child in node.children.items():
        kind, text = key[:2], key[2:]
        try:
            if kind == "k:":
                fields = json.loads(text)
                if not isinstance(fields, dict) or not fields:
                    raise _Unusable("malformed")
                names = tuple(sorted(fields))
                if names not in items.key_names:
                    items.key_names.append(names)
                items.keyed[_canonical([[n, fields[n]] for n in names])] = child
            elif kind == "v:":
                items.values[_canonical(json.loads(text))] = child
            elif kind == "i:":
                items.positions[int(text)] = child
        except ValueError as exc:
            raise _Unusable("malformed") from exc
    return items


@lru_cache(maxsize=256)
def _keep_trie(keep: tuple[KeepField, ...], group: str, kind: str) -> Any:
    trie: dict[str, Any] = {}
    for entry in keep:
        if not (fnmatchcase(group, entry.group) and fnmatchcase(kind, entry.kind)):
            continue
        node = trie
        for part in entry.path[:-1]:
            nxt = node.get(part)
            if nxt is True:
                break
            node = node.setdefault(part, {})
        else:
            node[entry.path[-1]] = True
    return trie or None


def _group(obj: Mapping[str, Any]) -> str:
    api_version = obj.get("apiVersion")
    return api_version.rpartition("/")[0] if isinstance(api_version, str) else ""


def keep_owned(obj: Mapping[str, Any], content: Content) -> Kept:
    """The fields of `obj` some manager other than `content.controllers` owns, less server
    defaults where ownership is coarse, plus identity and `content.keep`; or a fallback."""
    try:
        root = _ownership(obj, content.controllers)
        group, kind = _group(obj), str(obj.get("kind") or "")
        defaults = DEFAULTS.get((group, kind), _NO_DEFAULTS)
        keep = _keep_trie(content.keep, group, kind) if content.keep else None
        walk = _Walk()
        body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "status")}
        kept = walk.map(body, root, defaults, keep)
    except _Unusable as unusable:
        return Kept(None, unusable.reason)
    except RecursionError:
        return Kept(None, "malformed")
    document: dict[str, Any] = {k: obj[k] for k in ("apiVersion", "kind") if k in obj}
    document.update(kept if kept is not _DROP else {})
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        identity = {k: metadata[k] for k in ("name", "namespace") if k in metadata}
        document["metadata"] = {**identity, **(document.get("metadata") or {})}
    return Kept(document)


def owns(
    obj: Mapping[str, Any], path: tuple[str, ...], item: Any = None, name: str = ""
) -> bool | None:
    """Whether some manager owns the field at `path` (with `item` and `name`: field `name` of
    that item of the list at `path`); None when managedFields cannot tell. Reads only the
    entries' branches along the path: it runs in Full mode too."""
    metadata = obj.get("metadata")
    entries = metadata.get("managedFields") if isinstance(metadata, dict) else None
    if not isinstance(entries, list) or not entries:
        return None
    try:
        for entry in entries:
            if not isinstance(entry, dict):
                raise _Unusable("malformed")
            if entry.get("subresource") == "status":
                continue
            if entry.get("fieldsType") != "FieldsV1" or entry.get("apiVersion") != obj.get(
                "apiVersion"
            ):
                raise _Unusable("unsupported")
            if _owns_in(entry.get("fieldsV1"), path, item, name):
                return True
    except (_Unusable, RecursionError):
        return None
    return False


def _owns_in(fields: Any, path: tuple[str, ...], item: Any, name: str) -> bool:
    for key in path:
        if not isinstance(fields, dict):
            raise _Unusable("malformed")
        if not fields:
            return True  # owns the whole value
        fields = fields.get(f"f:{key}")
        if fields is None:
            return False
    if not name:
        return True
    if not isinstance(fields, dict):
        raise _Unusable("malformed")
    if not fields:
        return True
    node = _Node()
    _merge(node, {k: v for k, v in fields.items() if k != "."}, _UPDATE)
    child = _items(node).find(-1, item)
    if child is None:
        return False
    return bool(child.whole) or f"f:{name}" in child.children
