"""The body of a POST to Alertmanager's `/api/v2/alerts` for one Alert message. Pure.

One alert per changed object, operation and author (its labels): Alertmanager routes, groups,
inhibits and silences on labels, so a silence of `namespace="staging"` or `author="deploy-bot"`
can take one change out of a burst, and its own `group_by` turns a burst into one notification.
Changes of one message with the same labels are one alert (Alertmanager would merge them
anyway): their field paths and commits are joined, it starts at the first and shows the last.
`endsAt` lets each alert resolve by itself; a change told again later extends it.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from kubescribe.mirror.receivers import Told, changes_of, plain, summary, timestamp

ALERTNAME = "KubescribeChange"
LABEL_LIMIT = 256  # characters of a label value
ANNOTATION_LIMIT = 4096  # characters of an annotation value
_NOT_NAME = re.compile(r"[^A-Za-z0-9_]")


def endpoint(base: str) -> str:
    """`<base>/api/v2/alerts`, after any path prefix of `base` (a `--web.route-prefix`)."""
    parts = urlsplit(base)
    path = parts.path.rstrip("/") + "/api/v2/alerts"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _labels(alert: str, change: Told) -> dict[str, str]:
    labels = {
        "alertname": ALERTNAME,
        "alert": alert,
        "kind": change.kind,
        "namespace": change.namespace,  # none for a cluster-scoped object
        "name": change.name,
        "operation": change.operation,
        "author": change.who or "unknown",
    }
    return {key: plain(value, LABEL_LIMIT) for key, value in labels.items() if value}


def _annotation_name(key: str) -> str:
    name = _NOT_NAME.sub("_", key) or "_"
    return f"_{name}" if name[0].isdigit() else name


def _alert(labels: dict[str, str], group: list[Told], ends: float) -> dict[str, Any]:
    last = group[-1]
    known = [c.paths for c in group if c.paths is not None]
    paths = tuple(sorted({p for ps in known for p in ps})) if known else None
    commits = list(dict.fromkeys(c.commit for c in group if c.commit))
    annotations = {
        "summary": summary(dataclasses.replace(last, paths=paths)),
        "fieldPaths": "unknown" if paths is None else ", ".join(paths),
        "commit": last.commit,
        "commits": ", ".join(commits) if len(commits) > 1 else "",
        "changes": str(len(group)) if len(group) > 1 else "",
        "author": last.author,
        "fieldManager": last.field_manager,
        "target": last.target,
    }
    for key, value in last.extras:
        annotations.setdefault(_annotation_name(key), value)
    found: dict[str, Any] = {
        "labels": labels,
        "annotations": {
            key: plain(value, ANNOTATION_LIMIT) for key, value in annotations.items() if value
        },
        "startsAt": timestamp(min(c.at for c in group)),
        "endsAt": timestamp(ends),
    }
    if last.link is not None:
        found["generatorURL"] = last.link
    return found


def alertmanager_body(message: Mapping[str, Any], resolve_after: float) -> bytes:
    """The alerts for `message` (the webhook's message, parsed); each ends `resolve_after`
    seconds after the message was sent."""
    changes, sent_at = changes_of(message)
    alert = plain(message.get("alert"), LABEL_LIMIT)
    groups: dict[tuple[tuple[str, str], ...], list[Told]] = {}
    for change in changes:
        labels = _labels(alert, change)
        groups.setdefault(tuple(sorted(labels.items())), []).append(change)
    ends = max([sent_at, *(c.at for c in changes)]) + resolve_after
    alerts = [_alert(dict(key), group, ends) for key, group in groups.items()]
    return json.dumps(alerts, sort_keys=True, separators=(",", ":")).encode()
