"""The rules of an `Alert` (docs/alerts.md): which landed change it tells of, what a change's
field paths were, how a burst becomes one message and how many messages an hour may go, and the
message's bytes and signature. Pure: no I/O, clocks are arguments.

A message names who, what and when, the commit and its web page, and the Flux or Argo CD
object that manages what changed; it carries field paths, never a value (a Secret's paths name
its keys, not their contents).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections import OrderedDict, deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubescribe.mirror.authors import Author
from kubescribe.mirror.changes import Change, TargetKey
from kubescribe.mirror.fieldpaths import flatten
from kubescribe.mirror.gitops_owner import GitOpsOwner
from kubescribe.mirror.identity import Identity
from kubescribe.mirror.ignore import IgnoreRule

SIGNATURE_HEADER = "X-Kubescribe-Signature"
SCHEMA = "kubescribe.io/alert/v1"
MAX_CHANGES_LISTED = 100  # in one message; the rest are counted
MAX_PATHS_LISTED = 50  # per change
_MAX_REMEMBERED = 20_000  # documents whose field digests are kept (LRU)


@dataclass(frozen=True)
class AlertEvent:
    """One landed change, as an Alert tells it. `paths` None: unknown (no earlier version
    seen since the operator started); `at` wall-clock seconds."""

    kind: str
    api_version: str
    namespace: str
    name: str
    operation: str
    author: str  # `Name <email>`, '' when the committer wrote it (configured-author)
    username: str  # the Kubernetes username ('' when unknown)
    field_manager: str
    commit: str
    target: str
    paths: tuple[str, ...] | None
    at: float
    commit_url: str | None = None
    owner: GitOpsOwner | None = None  # the Flux or Argo CD object that applies it

    def as_json(self) -> dict[str, Any]:
        paths = None if self.paths is None else list(self.paths[:MAX_PATHS_LISTED])
        return {
            "who": {
                "author": self.author,
                "username": self.username,
                "fieldManager": self.field_manager,
            },
            "what": {
                "apiVersion": self.api_version,
                "kind": self.kind,
                "namespace": self.namespace,
                "name": self.name,
                "operation": self.operation,
                "fieldPaths": paths,
            },
            "commit": self.commit,
            "commitUrl": self.commit_url,
            "managedBy": self.owner.as_json() if self.owner is not None else None,
            "drift": self.owner.line if self.owner is not None else None,
            "target": self.target,
            "observedAt": self.at,
        }


@dataclass(frozen=True)
class AlertRule:
    """An Alert's selector; empty lists match everything."""

    kinds: frozenset[str] = frozenset()
    namespaces: frozenset[str] = frozenset()
    operations: frozenset[str] = frozenset()
    authors: frozenset[str] = frozenset()
    exclude: IgnoreRule = field(default_factory=IgnoreRule)
    field_paths: tuple[str, ...] = ()

    def matches(self, event: AlertEvent) -> bool:
        if self.kinds and event.kind not in self.kinds:
            return False
        if self.namespaces and event.namespace not in self.namespaces:
            return False
        if self.operations and event.operation not in self.operations:
            return False
        if self.authors and event.username not in self.authors:
            return False
        if self.exclude.ignores(event.field_manager, event.username) is not None:
            return False
        return not self.field_paths or _under_any(event.paths or (), self.field_paths)


def _under_any(paths: Iterable[str], prefixes: Sequence[str]) -> bool:
    return any(
        path == prefix or path.startswith((f"{prefix}.", f"{prefix}["))
        for path in paths
        for prefix in prefixes
    )


def event_of(
    change: Change,
    commit: str,
    author: Author | None,
    paths: tuple[str, ...] | None,
    at: float,
    commit_url: str | None = None,
) -> AlertEvent:
    identity = change.identity
    return AlertEvent(
        kind=identity.kind,
        api_version=change.rtype.api_version,
        namespace=identity.namespace,
        name=identity.name,
        operation=str(change.operation),
        author=f"{author.name} <{author.email}>" if author is not None else "",
        username=author.user if author is not None else "",
        field_manager=change.field_manager,
        commit=commit,
        target=str(change.target),
        paths=paths,
        at=at,
        commit_url=commit_url,
        owner=change.owner,
    )


def _digests(document: Mapping[str, Any]) -> dict[str, str]:
    """Each leaf's path with a digest of its value (values themselves are not kept)."""
    return {
        path: hashlib.blake2b(
            json.dumps(value, sort_keys=True, default=str).encode(), digest_size=8
        ).hexdigest()
        for path, value in flatten(document).items()
    }


class FieldMemory:
    """The leaf digests of the last version of each document seen, to tell which field paths
    a change changed. Bounded (least recently seen forgotten first)."""

    def __init__(self, limit: int = _MAX_REMEMBERED) -> None:
        self._limit = limit
        self._seen: OrderedDict[tuple[TargetKey, Identity], dict[str, str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def changed(self, change: Change) -> tuple[str, ...] | None:
        """The field paths `change` changed (all of them for a create; None: unknown)."""
        key = (change.target, change.identity)
        before = self._seen.pop(key, None)
        if change.document is None:
            return tuple(sorted(before)) if before is not None else None
        after = _digests(change.document)
        self._seen[key] = after
        while len(self._seen) > self._limit:
            self._seen.popitem(last=False)
        if str(change.operation) == "CREATE":
            return tuple(sorted(after))
        if before is None:
            return None
        return tuple(
            sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p))
        )


@dataclass
class Burst:
    """Events of one Alert collected in its grouping window (opened by the first)."""

    opened: float
    events: list[AlertEvent] = field(default_factory=list)

    def due(self, window: float, now: float) -> bool:
        return now - self.opened >= window


class RateLimit:
    """At most `per_hour` messages in any hour (a sliding window over send times)."""

    def __init__(self, per_hour: int) -> None:
        self.per_hour = per_hour
        self._sent: deque[float] = deque()

    def allow(self, now: float) -> bool:
        while self._sent and now - self._sent[0] >= 3600:
            self._sent.popleft()
        if len(self._sent) >= self.per_hour:
            return False
        self._sent.append(now)
        return True


def message_body(alert: str, events: Sequence[AlertEvent], sent_at: float) -> bytes:
    """The JSON a receiver gets for one burst (`alert` is `namespace/name`)."""
    listed = events[:MAX_CHANGES_LISTED]
    commits = list(dict.fromkeys(e.commit for e in events))
    body = {
        "schema": SCHEMA,
        "alert": alert,
        "sentAt": sent_at,
        "count": len(events),
        "omitted": len(events) - len(listed),
        "commits": commits,
        "commitUrl": events[-1].commit_url if events else None,  # the last commit's page
        "changes": [e.as_json() for e in listed],
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def signature(key: bytes, body: bytes) -> str:
    """The `X-Kubescribe-Signature` header value: `sha256=<hex HMAC-SHA256 of the body>`."""
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()
