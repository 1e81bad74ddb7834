"""The body of a Slack-compatible incoming webhook for one Alert message: `text` (the
notification's fallback) and `blocks`, one mrkdwn section per change: who, what (kind,
namespace/name, operation, field paths, never a value), when, the commit and any further key the
message carries. Pure.

Every value from the cluster (names, usernames, paths) is escaped (`&`, `<`, `>`) so a hostile
name cannot mention `<!channel>`, forge a link or break out of its line.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kubescribe.mirror.receivers import Told, changes_of, plain, summary, timestamp

MAX_LISTED = 20  # changes shown as sections (Slack takes at most 50 blocks a message)
MAX_PATHS_SHOWN = 20  # per change
PATHS_LIMIT = 600  # characters of a change's field paths line (with the first, within a section)
SECTION_LIMIT = 3000  # characters of a section's text (Slack's limit)
TEXT_LIMIT = 4000


def escape(text: str) -> str:
    """Slack's mrkdwn escaping of the three control characters."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _s(value: Any, limit: int = 200) -> str:
    return escape(plain(value, limit))


def _capped(lines: list[str], limit: int) -> str:
    """Whole lines while they fit in `limit` characters (an escape is never cut)."""
    kept: list[str] = []
    size = 0
    for line in lines:
        if size + len(line) + 2 > limit:
            kept.append("…")
            break
        kept.append(line)
        size += len(line) + 1
    return "\n".join(kept)


def _commit(change: Told) -> str:
    sha = _s(change.commit, 64) or "none"
    # A link is an http(s) URL without spaces, `<`, `>` or `|` (mirror/receivers.py).
    link = change.link
    return f"<{escape(link)}|{sha}>" if link is not None and len(link) <= 1000 else sha


def _paths(paths: tuple[str, ...] | None) -> str:
    if paths is None:
        return "unknown (no earlier version seen)"
    shown: list[str] = []
    for path in paths[:MAX_PATHS_SHOWN]:
        text = _s(path)
        if sum(len(p) + 2 for p in shown) + len(text) > PATHS_LIMIT:
            break
        shown.append(text)
    more = len(paths) - len(shown)
    return ", ".join(shown) + (f" (+{more} more)" if more else "")


def _section(change: Told) -> str:
    """The lines of one change; the first ones always fit, hostile lengths cut the last."""
    who = _s(change.who, 64) or "an unknown author"
    manager = f" ({_s(change.field_manager, 64)})" if change.field_manager else ""
    target = f" (target {_s(change.target)})" if change.target else ""
    lines = [
        f"*{_s(change.operation, 16)}* {_s(change.kind, 63)} *{_s(change.object, 256)}*"
        f" by *{who}*{manager}",
        f"Fields: {_paths(change.paths)}",
        f"When: {timestamp(change.at)}",
        f"Commit: {_commit(change)}{target}",
    ]
    lines += [f"{_s(key, 64)}: {_s(value, 400)}" for key, value in change.extras]
    return _capped(lines, SECTION_LIMIT)


def _mrkdwn(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def slack_body(message: Mapping[str, Any]) -> bytes:
    """Slack's incoming-webhook JSON for `message` (the webhook's message, parsed)."""
    changes, _ = changes_of(message)
    count = message.get("count")
    total = count if isinstance(count, int) and count >= len(changes) else len(changes)
    listed = changes[:MAX_LISTED]
    rest = total - len(listed)
    plural = "" if total == 1 else "s"
    head = f"*{_s(message.get('alert'), 320)}*: {total} change{plural} in the cluster"
    blocks = [_mrkdwn(head), *(_mrkdwn(_section(c)) for c in listed)]
    lines = [head, *(f"• {_s(summary(c), 300)} in commit {_s(c.commit, 64)}" for c in listed)]
    if rest:
        more = f"{rest} more change{'' if rest == 1 else 's'} not listed"
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": more}]})
        lines.append(more)
    body = {"text": _capped(lines, TEXT_LIMIT), "blocks": blocks}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()
