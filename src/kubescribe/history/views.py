"""Answers of the history commands as text and JSON: which object the user meant, the version
at a point, and the lines of `history`, `blame`, `timeline` and `diff`. No Git or cluster
access of its own: it asks a `History`."""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kubescribe.history import fields
from kubescribe.history.index import Entry, History, HistoryError
from kubescribe.history.refs import ObjectRef
from kubescribe.history.times import duration, looks_like_commit, parse_time, utc
from kubescribe.mirror.identity import Identity
from kubescribe.mirror.yamlfmt import dump_yaml


def find(history: History, ref: ObjectRef, namespace: str | None) -> Identity:
    """The one object `ref` (in `namespace`, when given) names in the history."""
    types = [t for t in history.types() if ref.matches_type(*t)]
    found = history.named(ref.name, types)
    if namespace is not None:
        found = [i for i in found if i.namespace in (namespace, "")]
    if not found:
        where = f" in namespace {namespace}" if namespace else ""
        raise HistoryError(f"no {ref.type}/{ref.name}{where} in this history")
    if len(found) > 1:
        names = ", ".join(f"{i.kind}.{i.group or 'core'} {i.ref}" for i in found)
        raise HistoryError(
            f"{ref.type}/{ref.name} is ambiguous ({names}): give -n NAMESPACE or TYPE.GROUP"
        )
    return found[0]


@dataclass(frozen=True)
class Point:
    """A point in the history: up to a commit (`seq`) or a time, whichever was given."""

    text: str
    seq: int | None = None
    time: dt.datetime | None = None

    def includes(self, entry: Entry) -> bool:
        if self.seq is not None:
            return entry.commit.seq <= self.seq
        assert self.time is not None
        return entry.commit.time <= self.time


def point(history: History, text: str, now: dt.datetime) -> Point:
    """`--at`/`--from`/`--to`: a duration ago, a commit of the branch (any revision Git reads:
    `9c1f3e2`, `main~3`), else a time."""
    if duration(text) is None:
        seq = history.commit_seq(text)
        if seq is not None:
            return Point(text, seq=seq)
    try:
        return Point(text, time=parse_time(text, now))
    except ValueError:
        if looks_like_commit(text):
            raise HistoryError(f"no commit {text} on the mirror's branch") from None
        raise


def at(entries: Sequence[Entry], where: Point) -> Entry | None:
    """The last change at or before `where` (None: the object did not exist yet)."""
    found = None
    for entry in entries:
        if where.includes(entry):
            found = entry
    return found


def author(entry: Entry) -> str:
    return f"{entry.commit.author} ({entry.commit.source or 'configured'})"


def summarize(history: History, entry: Entry) -> str:
    if entry.operation in ("CREATE", "DELETE", "MOVE"):
        return fields.summary(entry.operation, [], False)
    old = history.read(entry.old_blob, entry.identity)
    new = history.content(entry)
    secret = fields.is_secret(old) or fields.is_secret(new)
    return fields.summary(entry.operation, fields.diff(old, new), secret)


def table(rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell; the last one is not padded."""
    if not rows:
        return ""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(r, widths, strict=False)), r[-1]]).rstrip()
        for r in rows
    )


def entry_json(history: History, entry: Entry) -> dict[str, Any]:
    return {
        "time": entry.commit.time.isoformat(),
        "author": entry.commit.author,
        "email": entry.commit.email,
        "source": entry.commit.source,
        "operation": entry.operation,
        "commit": entry.commit.sha,
        "kind": entry.identity.kind,
        "group": entry.identity.group,
        "namespace": entry.identity.namespace,
        "name": entry.identity.name,
        "path": entry.path,
        "summary": summarize(history, entry),
    }


def history_rows(history: History, entries: Sequence[Entry]) -> list[list[str]]:
    rows = [["TIME", "AUTHOR (SOURCE)", "OPERATION", "COMMIT", "CHANGES"]]
    for entry in reversed(entries):
        rows.append(
            [
                utc(entry.commit.time),
                author(entry),
                entry.operation,
                entry.commit.sha[:10],
                summarize(history, entry),
            ]
        )
    return rows


def timeline_rows(history: History, entries: Sequence[Entry]) -> list[list[str]]:
    rows = [["TIME", "AUTHOR (SOURCE)", "OPERATION", "OBJECT", "COMMIT", "CHANGES"]]
    for entry in reversed(entries):
        who = entry.identity
        name = f"{who.kind}/{who.name}" + (f" -n {who.namespace}" if who.namespace else "")
        rows.append(
            [
                utc(entry.commit.time),
                author(entry),
                entry.operation,
                name,
                entry.commit.sha[:10],
                summarize(history, entry),
            ]
        )
    return rows


def blame_rows(history: History, entries: Sequence[Entry]) -> list[list[str]]:
    """Per leaf of the newest version that existed: its value and who last set it."""
    versions = [(e, history.content(e)) for e in entries]
    secret = any(fields.is_secret(doc) for _, doc in versions)
    rows = [["FIELD", "VALUE", "AUTHOR (SOURCE)", "TIME", "COMMIT"]]
    for blamed in fields.blame(versions):
        value = "(hidden)" if secret and _secret_value(blamed.path) else fields.shown(blamed.value)
        rows.append(
            [
                blamed.path,
                value if value is not None else "…",
                author(blamed.change),
                utc(blamed.change.commit.time),
                blamed.change.commit.sha[:10],
            ]
        )
    return rows


def _secret_value(path: str) -> bool:
    return path.startswith(("data", "stringData")) or "ENC[" in path


def filtered(
    entries: Sequence[Entry],
    *,
    namespace: str | None = None,
    author_text: str | None = None,
    kind: Callable[[str, str], bool] | None = None,
    until: dt.datetime | None = None,
    since: dt.datetime | None = None,
) -> list[Entry]:
    """Entries matching every filter given (`author_text`: part of the name or email)."""
    needle = author_text.lower() if author_text else None
    return [
        e
        for e in entries
        if (namespace is None or e.identity.namespace == namespace)
        and (
            needle is None or needle in e.commit.author.lower() or needle in e.commit.email.lower()
        )
        and (kind is None or kind(e.identity.group, e.identity.kind))
        and (since is None or e.commit.time >= since)
        and (until is None or e.commit.time <= until)
    ]


def field_lines(old: Any, new: Any, secret: bool) -> list[str]:
    """`~ spec.replicas: 2 → 3`, `+ path: value`, `- path` (no value of a Secret)."""
    lines = []
    for change in fields.diff(old, new):
        mark = {"added": "+", "removed": "-", "changed": "~"}[change.kind]
        if secret:
            lines.append(f"{mark} {change.path}")
            continue
        old_text = fields.shown(change.old) if change.old is not fields.MISSING else None
        new_text = fields.shown(change.new) if change.new is not fields.MISSING else None
        if change.kind == "changed":
            lines.append(f"~ {change.path}: {old_text or '…'} → {new_text or '…'}")
        else:
            value = new_text if change.kind == "added" else old_text
            lines.append(f"{mark} {change.path}: {value or '…'}")
    return lines


def unified(old: Any, new: Any, old_label: str, new_label: str) -> str:
    """A unified diff of both versions as the mirror's YAML (a missing one is empty)."""
    before = dump_yaml(old).splitlines(keepends=True) if old is not None else []
    after = dump_yaml(new).splitlines(keepends=True) if new is not None else []
    return "".join(difflib.unified_diff(before, after, old_label, new_label))
