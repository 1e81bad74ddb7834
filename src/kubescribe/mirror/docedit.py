"""Editing files people keep: documents inside multi-document files, and minimal diffs.

Git never decides what an object contains, but a file a person wrote keeps its comments, key
order, quoting and indentation where the values did not change: a document is edited in place
with a YAML round-trip (ruamel.yaml), only where the value differs. Files the operator wrote
itself (the canonical rendering) take the fast path: they are simply rendered again.
"""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.scalarstring import (
    DoubleQuotedScalarString,
    LiteralScalarString,
    SingleQuotedScalarString,
)

from kubescribe.mirror import boundedyaml
from kubescribe.mirror.identity import Identity, identity_of
from kubescribe.mirror.yamlfmt import dump_yaml, load_yaml_all, needs_quotes, order_document

# A document start marker at the start of a line (a block scalar's lines are indented, so at
# the top level this is always a marker).
_START = re.compile(rb"^---(?=[ \t\r\n]|\Z)", re.MULTILINE)
# A list item's dash, and the key line above it, to learn the file's list indentation.
_KEY_LINE = re.compile(r"^( *)[^\s#-][^:\n]*:[ \t]*$")
_DASH_LINE = re.compile(r"^( *)- ")
_OTHER_BREAKS = frozenset("\r\x85\u2028\u2029")


@dataclass(frozen=True)
class Part:
    """One document of a file: its bytes (with the `---` line that starts it, if any) and the
    identity of the object it holds (None: no Kubernetes object, kept as it is)."""

    text: bytes
    identity: Identity | None

    @property
    def head(self) -> bytes:
        """The `---` line the part starts with (b'' for the first part of a file)."""
        if not self.text.startswith(b"---"):
            return b""
        end = self.text.find(b"\n")
        return self.text if end < 0 else self.text[: end + 1]

    @property
    def body(self) -> bytes:
        return self.text[len(self.head) :]


def split(data: bytes) -> list[Part]:
    """The documents of a YAML stream, each with the identity it holds."""
    starts = [m.start() for m in _START.finditer(data) if m.start() > 0]
    bounds = [0, *starts, len(data)]
    parts: list[Part] = []
    for a, b in itertools.pairwise(bounds):
        text = data[a:b]
        try:
            boundedyaml.check(text)
            docs = load_yaml_all(text)
        except Exception:  # one unreadable or unbounded document: kept, never rewritten
            docs = []
        identity = identity_of(docs[0]) if len(docs) == 1 and isinstance(docs[0], dict) else None
        parts.append(Part(text, identity))
    return parts


def is_multi(data: bytes) -> bool:
    """Whether the file holds more than one document."""
    return sum(1 for p in split(data) if p.body.strip() and not _only_comments(p.body)) > 1


def _only_comments(body: bytes) -> bool:
    return all(not line.strip() or line.lstrip().startswith(b"#") for line in body.splitlines())


def replace(data: bytes, identity: Identity, body: bytes) -> bytes:
    """`data` with the document of `identity` replaced by `body` (its `---` line kept); the
    other documents stay byte-identical."""
    parts = split(data)
    out: list[bytes] = []
    for part in parts:
        if part.identity == identity:
            head = part.head
            if head and head.strip() != b"---":  # `--- {…}` or a tag on the marker line
                head = b"---\n"
            out.append(head + _terminated(body))
            identity = Identity("", "", "", "")  # only the first one
        else:
            out.append(part.text)
    return b"".join(out)


def remove(data: bytes, identity: Identity) -> bytes | None:
    """`data` without the document of `identity`; None when nothing but comments and blank
    lines would be left (the file goes)."""
    parts = split(data)
    kept = [p for p in parts if p.identity != identity]
    if len(kept) == len(parts):
        return data
    if not any(p.body.strip() and not _only_comments(p.body) for p in kept):
        return None
    text = b"".join(p.text for p in kept)
    return text


def body_of(data: bytes, identity: Identity) -> bytes | None:
    """The document of `identity` in `data` (without its `---` line)."""
    for part in split(data):
        if part.identity == identity:
            return part.body
    return None


def _terminated(body: bytes) -> bytes:
    return body if body.endswith(b"\n") or not body else body + b"\n"


def adopt(previous: bytes, document: Mapping[str, Any], canonical: bytes) -> bytes:
    """What a document's text becomes: `previous` itself when its content already matches
    `document` (formatting is not a change), `canonical` for text the operator wrote (or text
    that cannot be edited), otherwise `previous` edited in place where values differ.

    `previous` is whatever a repository writer pushed: one with an alias, or past the bounds
    of `boundedyaml`, is never parsed and gets `canonical`."""
    if previous == canonical:
        return previous
    try:
        boundedyaml.check(previous, aliases=False)
        (old,) = load_yaml_all(previous)
    except Exception:
        return canonical
    if old == document:
        return previous
    if not isinstance(old, dict) or dump_yaml(order_document(old)).encode() == previous:
        return canonical  # the operator's own rendering: render afresh (fast path)
    try:
        return edit(previous, document)
    except Exception:
        return canonical


def edit(previous: bytes, document: Mapping[str, Any]) -> bytes:
    """`previous` (one document) with its values made equal to `document`; comments, key
    order, quoting and indentation kept wherever a value did not change."""
    text = previous.decode()
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 1 << 30
    mapping, sequence, offset = _indentation(text)
    yaml.indent(mapping=mapping, sequence=sequence, offset=offset)
    tree = yaml.load(text)
    if not isinstance(tree, CommentedMap):
        raise ValueError("not a mapping")
    _merge_map(tree, document)
    out = io.StringIO()
    yaml.dump(tree, out)
    return out.getvalue().encode()


def _indentation(text: str) -> tuple[int, int, int]:
    """(mapping, sequence, offset) as ruamel names them, learned from the text."""
    mapping, sequence, offset = 2, 2, 0
    lines = text.splitlines()
    found_map = found_seq = False
    for above, line in itertools.pairwise(lines):
        key = _KEY_LINE.match(above)
        if key is None:
            continue
        indent = len(line) - len(line.lstrip(" "))
        dash = _DASH_LINE.match(line)
        if dash is not None and not found_seq:
            offset = len(dash.group(1)) - len(key.group(1))
            if offset < 0:
                continue
            sequence, found_seq = offset + 2, True
        elif dash is None and not found_map and line.strip() and indent > len(key.group(1)):
            mapping, found_map = indent - len(key.group(1)), True
        if found_map and found_seq:
            break
    return mapping, max(sequence, offset + 2), offset


def _merge_map(target: CommentedMap, new: Mapping[str, Any]) -> None:
    for key in [k for k in target if k not in new]:
        del target[key]
    for key in sorted(k for k in new if k not in target):  # new keys: sorted, at the end
        target[_key(key)] = _node(new[key])
    for key, value in new.items():
        if key not in target:
            continue
        current = target[key]
        if isinstance(current, CommentedMap) and isinstance(value, Mapping):
            _merge_map(current, value)
        elif isinstance(current, CommentedSeq) and isinstance(value, list):
            _merge_seq(target, key, current, value)
        elif not _same(current, value):
            target[key] = _node(value, current)


def _merge_seq(parent: Any, key: Any, current: CommentedSeq, new: list[Any]) -> None:
    if len(current) != len(new):
        parent[key] = _node(new)
        return
    for i, value in enumerate(new):
        item = current[i]
        if isinstance(item, CommentedMap) and isinstance(value, Mapping):
            _merge_map(item, value)
        elif isinstance(item, CommentedSeq) and isinstance(value, list):
            _merge_seq(current, i, item, value)
        elif not _same(item, value):
            current[i] = _node(value, item)


def _same(current: Any, value: Any) -> bool:
    if isinstance(current, bool) or isinstance(value, bool):
        return type(current) is type(value) and current == value
    if isinstance(current, str) != isinstance(value, str):
        return False
    return bool(current == value)


def _key(key: Any) -> Any:
    return SingleQuotedScalarString(key) if isinstance(key, str) and needs_quotes(key) else key


def _node(value: Any, was: Any = None) -> Any:
    """A new value as ruamel nodes, written the way the canonical emitter would (a string
    that replaces a quoted one keeps its quotes)."""
    if isinstance(value, Mapping):
        out = CommentedMap()
        for k in sorted(value):
            out[_key(k)] = _node(value[k])
        return out
    if isinstance(value, list):
        return CommentedSeq([_node(v) for v in value])
    if isinstance(value, str):
        if not _OTHER_BREAKS.isdisjoint(value):
            return DoubleQuotedScalarString(value)
        if "\n" in value:
            return LiteralScalarString(value)
        if isinstance(was, DoubleQuotedScalarString):
            return DoubleQuotedScalarString(value)
        if isinstance(was, SingleQuotedScalarString):
            return SingleQuotedScalarString(value)
        if needs_quotes(value):
            return SingleQuotedScalarString(value)
    return value
