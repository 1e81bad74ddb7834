"""What the Slack and Alertmanager renderings share: reading one change of an Alert message (the
webhook's JSON, `mirror/alerts.py`) generically, so keys added to a change later flow through to
every receiver. Pure.

A change is `{"who": {...}, "what": {...}, "commit": ..., "target": ..., "observedAt": ...}`;
any other key is an extra, shown as it is. A commit link is a key of the change (or of its
`commit` object) whose name ends in `url` or `link` and whose value is an `http(s)://` URL.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

KNOWN = frozenset({"who", "what", "commit", "target", "observedAt"})
WHO_KNOWN = frozenset({"author", "username", "fieldManager"})
WHAT_KNOWN = frozenset({"apiVersion", "kind", "namespace", "name", "operation", "fieldPaths"})
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")  # C0, DEL, C1 (NEL is a line break)
_LINK = re.compile(r"^https?://[^\s<>|\"'`\\]+$")


def plain(value: Any, limit: int = 200) -> str:
    """`value` as one line of at most `limit` characters: control characters (a forged line
    break) become spaces; a non-string is compact JSON."""
    if value is None:
        text = ""
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    text = _CONTROL.sub(" ", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def timestamp(seconds: float) -> str:
    """RFC 3339 in UTC with milliseconds (`2026-12-03T18:30:00.123Z`)."""
    at = datetime.fromtimestamp(seconds, UTC)
    return at.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _number(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    return float(value) if 0 <= value < 253402300800 else default  # before year 10000


def _link(mapping: Mapping[str, Any]) -> tuple[str, str] | None:
    """The first `(key, value)` of `mapping` that is a link."""
    for key, value in mapping.items():
        low = str(key).lower()
        if low.endswith(("url", "link")) and isinstance(value, str) and _LINK.match(value):
            return str(key), value
    return None


@dataclass(frozen=True)
class Told:
    """One change of a message, read defensively (a missing or odd value is '' or None)."""

    who: str  # the username, else the author, else ''
    author: str
    field_manager: str
    kind: str
    namespace: str
    name: str
    operation: str
    paths: tuple[str, ...] | None
    commit: str
    link: str | None
    target: str
    at: float
    extras: tuple[tuple[str, Any], ...]  # other keys of the change, who and what, in order

    @property
    def object(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


def _text(mapping: Mapping[str, Any], key: str) -> str:
    value = mapping.get(key)
    return value if isinstance(value, str) else ""


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def told(change: Mapping[str, Any], default_at: float) -> Told:
    """Read one change of a message."""
    who, what = _mapping(change.get("who")), _mapping(change.get("what"))
    commit = change.get("commit")
    own = _link(change)
    if isinstance(commit, Mapping):
        sha = next((commit[k] for k in ("sha", "id") if isinstance(commit.get(k), str)), "")
        found = _link(commit) or own
    else:
        sha, found = (commit if isinstance(commit, str) else ""), own
    link_key = own[0] if own is not None and found == own else None
    raw_paths = what.get("fieldPaths")
    paths = (
        tuple(p for p in raw_paths if isinstance(p, str))
        if isinstance(raw_paths, Sequence) and not isinstance(raw_paths, str)
        else None
    )
    extras = [(k, v) for k, v in change.items() if k not in KNOWN and k != link_key]
    extras += [(k, v) for k, v in who.items() if k not in WHO_KNOWN]
    extras += [(k, v) for k, v in what.items() if k not in WHAT_KNOWN]
    return Told(
        who=_text(who, "username") or _text(who, "author"),
        author=_text(who, "author"),
        field_manager=_text(who, "fieldManager"),
        kind=_text(what, "kind"),
        namespace=_text(what, "namespace"),
        name=_text(what, "name"),
        operation=_text(what, "operation"),
        paths=paths,
        commit=sha,
        link=found[1] if found is not None else None,
        target=_text(change, "target"),
        at=_number(change.get("observedAt"), default_at),
        extras=tuple((str(k), v) for k, v in extras if v not in (None, "", [], {})),
    )


def changes_of(message: Mapping[str, Any]) -> tuple[list[Told], float]:
    """The changes of a message, and when it was sent (seconds)."""
    sent_at = _number(message.get("sentAt"), 0.0)
    raw = message.get("changes")
    items = raw if isinstance(raw, Sequence) and not isinstance(raw, str) else []
    return [told(c, sent_at) for c in items if isinstance(c, Mapping)], sent_at


def summary(change: Told) -> str:
    """`alice UPDATE Deployment web/web: spec.replicas` (raw text, not escaped)."""
    who = change.who or "an unknown author"
    paths = "unknown fields" if change.paths is None else ", ".join(change.paths[:10])
    more = len(change.paths) - 10 if change.paths is not None and len(change.paths) > 10 else 0
    tail = f" (+{more} more)" if more else ""
    return f"{who} {change.operation} {change.kind} {change.object}: {paths}{tail}"
