"""Decode kube-apiserver audit `EventList`s into small attribution facts.

Pure functions (no I/O). Only the top-level shape can make a whole batch fail, with
`AuditDecodeError`; a single odd event is skipped and counted, never fatal.

Which events become facts (everything else is skipped with a reason, see `SKIP_*`):

- stage `ResponseComplete`, a 2xx `responseStatus.code`, not a dry run;
- verb `create`, `update`, `patch` (also on subresources, e.g. `/scale`: the Scale response
  carries the parent object's uid and new resourceVersion), `delete`, `deletecollection`;
- with an `objectRef` (resource) and, for create/update/patch, a `responseObject` with
  `metadata.uid` and `metadata.resourceVersion` (audit level `RequestResponse`); a write
  without any `responseObject` (a request the aggregator proxied to an extension API server,
  whose objects kube-apiserver never decodes, or audit level `Metadata`) becomes a `named` fact:
  who wrote to `group/resource` in `namespace` (and `name`, except for a create), when.

Who: `impersonatedUser` wins over `user`. The author identity (`author_from_user`):

- name: a display name from `extra` when present, else the username (a ServiceAccount keeps
  its full username `system:serviceaccount:<ns>:<name>`, which is unambiguous in `git log`);
- email: an email from `extra` when present; else the username when it is an email (also
  with an OIDC prefix such as `oidc:alice@example.org`); else
  `<name>@<ns>.serviceaccount.kubescribe.invalid` for a ServiceAccount; else
  `<username, made address-safe>@users.kubescribe.invalid`.
- `extra` keys are matched case-insensitively on their last path segment, so both
  `example.org/email` (structured OIDC claim mappings must be prefixed) and plain `email` work:
  display name from `name`, `display-name`, `displayname`, `display_name`, `full-name`,
  `fullname`, `full_name` (in that order of preference); email from `email`, `mail`,
  `e-mail`. Among several keys with the same segment the alphabetically first wins.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kubescribe.mirror.authors import Author

FACT_WRITE = "write"
FACT_DELETE = "delete"
FACT_COLLECTION = "collection"
FACT_NAMED = "named"

SKIP_STAGE = "skipped_stage"
SKIP_VERB = "skipped_verb"
SKIP_FAILED = "skipped_failed"
SKIP_DRY_RUN = "skipped_dry_run"
SKIP_NO_OBJECT = "skipped_no_object"
SKIP_NO_USER = "skipped_no_user"
SKIP_INVALID = "skipped_invalid"
SKIP_OVERSIZED = "skipped_oversized"

WRITE_VERBS = frozenset({"create", "update", "patch"})
DELETE_VERBS = frozenset({"delete", "deletecollection"})

DISPLAY_NAME_SEGMENTS = (
    "name",
    "display-name",
    "displayname",
    "display_name",
    "full-name",
    "fullname",
    "full_name",
)
EMAIL_SEGMENTS = ("email", "mail", "e-mail")
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
USER_EMAIL_DOMAIN = "users.kubescribe.invalid"
SERVICE_ACCOUNT_EMAIL_DOMAIN = "serviceaccount.kubescribe.invalid"
MAX_FIELD = 256
# Longest accepted value of each stored fact field (Kubernetes names are at most 253
# characters; a ServiceAccount username is at most 22 + 63 + 1 + 253).
FIELD_CAPS = {
    "username": 512,
    "group": 253,
    "resource": 253,
    "subresource": 253,
    "namespace": 253,
    "name": 253,
    "uid": 128,
    "resource_version": 64,
    "audit_id": 128,
}

_EMAIL = re.compile(r"[A-Za-z0-9._%+\-']+@[A-Za-z0-9\-]+(\.[A-Za-z0-9\-]+)+")
_UNSAFE_LOCAL = re.compile(r"[^A-Za-z0-9._+\-]+")
_UNSAFE_NAME = re.compile(r"[<>\x00-\x1f\x7f]+")


class AuditDecodeError(ValueError):
    """The body is not a JSON audit `EventList` (the only error the decoder raises)."""


class AuditTooLarge(AuditDecodeError):
    """The EventList holds more events than the caller accepts."""


# What `json.loads` can allocate for each structural byte (a value, key, container or slot
# starts at one), measured with tracemalloc (bench/audit_decode_memory.py): `{` an empty dict,
# `[` an empty list, `,` a float or int and its slot, `:` a dict entry (with the transient
# table of a growing dict), `"` half a short string. Text costs at most twice the body in
# characters (the decoded body and the parsed strings), at 1, 2 or 4 bytes a character: the
# widest character, raw or `\u`-escaped, decides.
_WEIGHTS = {b"{": 72, b"[": 64, b",": 40, b":": 72, b'"': 32}
_UCS4 = re.compile(rb"[\xf0-\xff]|\\u[dD][89abAB]")
_UCS2 = re.compile(rb"[\xc4-\xef]|\\u(?!00)")
_BASE = 64 * 1024


def json_memory_bound(body: bytes) -> int:
    """An upper bound, in bytes, of what `json.loads(body)` allocates (C-speed scans only)."""
    width = 4 if _UCS4.search(body) else 2 if _UCS2.search(body) else 1
    structural = sum(weight * body.count(char) for char, weight in _WEIGHTS.items())
    return _BASE + 2 * width * len(body) + structural


@dataclass(frozen=True)
class Fact:
    """Who did what to which object, as far as attribution needs it.

    `kind` is `write` (an object version: create/update/patch, joined by uid +
    resourceVersion), `delete` (a delete request for `uid`, joined by uid: the final DELETED
    watch event of a finalizer-held object has another resourceVersion), or `collection` (a
    deletecollection over `group/resource` in `namespace`, '' = all namespaces or cluster
    scope, joined by time window), or `named` (a write whose response was not recorded:
    joined by object name, or for a create by group/resource/namespace, and time window).
    Times are seconds since the epoch (apiserver clock).
    """

    kind: str
    verb: str
    author: Author
    username: str
    group: str
    resource: str
    namespace: str
    name: str = ""
    subresource: str = ""
    uid: str = ""
    resource_version: str = ""
    received: float = 0.0
    completed: float = 0.0
    audit_id: str = ""


@dataclass
class Decoded:
    """The facts of one EventList, and how many events were skipped by reason."""

    facts: list[Fact] = field(default_factory=list)
    events: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    latest: float = 0.0  # the latest completed request any event tells of (its stageTimestamp)

    @property
    def accepted(self) -> int:
        return self.events - sum(self.skipped.values())


def decode_event_list(body: bytes | str, max_events: int | None = None) -> Decoded:
    """Parse and decode one webhook body; `AuditDecodeError` if it is not an EventList
    (`AuditTooLarge` if it holds more than `max_events` events)."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise AuditDecodeError(f"body is not JSON: {str(exc)[:200]}") from None
    return decode_events(doc, max_events)


def decode_events(doc: object, max_events: int | None = None) -> Decoded:
    """Decode a parsed EventList; `AuditDecodeError` if `doc` is not one."""
    if not isinstance(doc, Mapping):
        raise AuditDecodeError("body is not a JSON object")
    if doc.get("kind") != "EventList":
        raise AuditDecodeError(f"kind is {_short(doc.get('kind'))}, want EventList")
    api_version = doc.get("apiVersion")
    if api_version is not None and not (
        isinstance(api_version, str) and api_version.startswith("audit.k8s.io/")
    ):
        raise AuditDecodeError(f"apiVersion is {_short(api_version)}, want audit.k8s.io/*")
    items = doc.get("items")
    if items is None:
        items = []
    if not isinstance(items, list):
        raise AuditDecodeError("items is not a list")
    if max_events is not None and len(items) > max_events:
        raise AuditTooLarge(f"{len(items)} events, more than {max_events}")
    out = Decoded(events=len(items))
    for item in items:
        if isinstance(item, Mapping) and item.get("stage") == "ResponseComplete":
            out.latest = max(out.latest, _timestamp(item.get("stageTimestamp")))
        reason = _decode_event(item, out.facts)
        if reason is not None:
            out.skipped[reason] += 1
    return out


def _decode_event(event: object, facts: list[Fact]) -> str | None:
    """Append the facts of one event; return a skip reason instead when it has none."""
    if not isinstance(event, Mapping):
        return SKIP_INVALID
    verb = _str(event.get("verb"))
    base = _skip_reason(event, verb) or _base_fact(event, verb)
    if isinstance(base, str):
        return base
    response = event.get("responseObject")
    response = response if isinstance(response, Mapping) else {}
    meta = response.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    if verb in WRITE_VERBS:
        if event.get("responseObject") is None:  # proxied, or audit level Metadata
            return _append(facts, [_replace(base, kind=FACT_NAMED)])
        uid, rv = _str(meta.get("uid")), _str(meta.get("resourceVersion"))
        if not uid or not rv or response.get("kind") == "Status":
            return SKIP_NO_OBJECT
        return _append(facts, [_replace(base, uid=uid, resource_version=rv)])
    if verb == "delete":
        return _append_delete(facts, base, response, meta)
    # deletecollection: one window fact, plus one delete fact per object the response lists.
    return _append(
        facts, [_replace(base, kind=FACT_COLLECTION, name="", uid=""), *_listed(base, response)]
    )


def _skip_reason(event: Mapping[str, Any], verb: str) -> str | None:
    """Why a whole event says nothing about a write that happened (None: it may)."""
    if event.get("stage") != "ResponseComplete":
        return SKIP_STAGE
    if verb not in WRITE_VERBS and verb not in DELETE_VERBS:
        return SKIP_VERB
    status = event.get("responseStatus")
    code = status.get("code") if isinstance(status, Mapping) else None
    if isinstance(code, int) and not isinstance(code, bool) and not 200 <= code < 300:
        return SKIP_FAILED
    uri = event.get("requestURI")
    if isinstance(uri, str) and "dryRun=" in uri:
        return SKIP_DRY_RUN
    return None


def _base_fact(event: Mapping[str, Any], verb: str) -> Fact | str:
    """What every fact of the event shares (who, what, when), or a skip reason."""
    ref = event.get("objectRef")
    if not isinstance(ref, Mapping) or not _str(ref.get("resource")):
        return SKIP_NO_OBJECT
    user = _effective_user(event)
    if user is None:
        return SKIP_NO_USER
    username, extra = user
    base = Fact(
        kind=FACT_WRITE,
        verb=verb,
        author=author_from_user(username, extra),
        username=username,
        group=_str(ref.get("apiGroup")),
        resource=_str(ref.get("resource")),
        namespace=_str(ref.get("namespace")),
        name=_str(ref.get("name")),
        subresource=_str(ref.get("subresource")),
        uid=_str(ref.get("uid")),
        received=_timestamp(event.get("requestReceivedTimestamp")),
        completed=_timestamp(event.get("stageTimestamp")),
        audit_id=_str(event.get("auditID")),
    )
    if not base.completed:
        return SKIP_INVALID
    return base if base.received else _replace(base, received=base.completed)


def _append_delete(
    facts: list[Fact], base: Fact, response: Mapping[str, Any], meta: Mapping[str, Any]
) -> str | None:
    uid, rv = base.uid, ""
    if response.get("kind") == "Status":  # immediate delete: details carry the uid
        details = response.get("details")
        if isinstance(details, Mapping):
            uid = _str(details.get("uid")) or uid
    else:  # the object, still present (finalizers) or as deleted
        uid = _str(meta.get("uid")) or uid
        rv = _str(meta.get("resourceVersion"))
    if not uid and not base.name:
        return SKIP_NO_OBJECT
    return _append(facts, [_replace(base, kind=FACT_DELETE, uid=uid, resource_version=rv)])


def _listed(base: Fact, response: Mapping[str, Any]) -> list[Fact]:
    """A delete fact per object a deletecollection response lists."""
    found = []
    items = response.get("items")
    for item in items if isinstance(items, list) else []:
        item_meta = item.get("metadata") if isinstance(item, Mapping) else None
        if not isinstance(item_meta, Mapping) or not _str(item_meta.get("uid")):
            continue
        found.append(
            _replace(
                base,
                kind=FACT_DELETE,
                name=_str(item_meta.get("name")),
                namespace=_str(item_meta.get("namespace")) or base.namespace,
                uid=_str(item_meta.get("uid")),
            )
        )
    return found


def _append(facts: list[Fact], found: list[Fact]) -> str | None:
    """Append the facts of one event, or none of them when a field is over its cap."""
    for fact in found:
        if any(len(getattr(fact, name)) > cap for name, cap in FIELD_CAPS.items()):
            return SKIP_OVERSIZED
    facts.extend(found)
    return None


def _effective_user(event: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    for key in ("impersonatedUser", "user"):
        info = event.get(key)
        if isinstance(info, Mapping):
            username = _str(info.get("username"))
            if username:
                extra = info.get("extra")
                return username, extra if isinstance(extra, Mapping) else {}
    return None


def author_from_user(username: str, extra: Mapping[str, Any] | None = None) -> Author:
    """The commit author for a Kubernetes user (see the module docstring for the rules)."""
    extra = extra or {}
    display = _extra_value(extra, DISPLAY_NAME_SEGMENTS)
    email = _extra_value(extra, EMAIL_SEGMENTS)
    if email is not None and not _EMAIL.fullmatch(email):
        email = None
    name = _clean(display) or _clean(username) or "unknown"
    if email is None:
        email = _email_of(username)
    return Author(name, _clean(email) or f"unknown@{USER_EMAIL_DOMAIN}", user=username)


def _email_of(username: str) -> str:
    if username.startswith(SERVICE_ACCOUNT_PREFIX):
        ns, _, sa = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
        if ns and sa:
            return f"{_local(sa)}@{_local(ns)}.{SERVICE_ACCOUNT_EMAIL_DOMAIN}"
    candidate = username.rpartition(":")[2] if "@" in username else ""
    if candidate and _EMAIL.fullmatch(candidate):
        return candidate
    return f"{_local(username)}@{USER_EMAIL_DOMAIN}"


def _extra_value(extra: Mapping[str, Any], segments: tuple[str, ...]) -> str | None:
    found: dict[str, list[tuple[str, str]]] = {}
    for key, values in extra.items():
        if not isinstance(key, str):
            continue
        segment = key.rpartition("/")[2].lower()
        if segment not in segments:
            continue
        value = values[0] if isinstance(values, list) and values else values
        if isinstance(value, str) and value.strip():
            found.setdefault(segment, []).append((key, value.strip()))
    for segment in segments:
        if segment in found:
            return sorted(found[segment])[0][1]
    return None


def _local(text: str) -> str:
    return _UNSAFE_LOCAL.sub("-", text).strip(".-")[:64] or "unknown"


def _clean(text: str | None) -> str:
    """Safe in a Git signature: no angle brackets or control characters, bounded length."""
    if not text:
        return ""
    return " ".join(_UNSAFE_NAME.sub(" ", text).split())[:MAX_FIELD]


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _short(value: object) -> str:
    return repr(value)[:60]


def _timestamp(value: object) -> float:
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        return 0.0
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    try:
        return parsed.timestamp()
    except (OverflowError, OSError, ValueError):
        return 0.0


def _replace(fact: Fact, **changes: Any) -> Fact:
    return replace(fact, **changes)
