"""From watch events to the branch worker: filter, sanitize, and shape changes and snapshots."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubescribe import metrics
from kubescribe.controller.cursors import StreamJournal
from kubescribe.kube.informer import ObjectKey
from kubescribe.mirror.changes import (
    Change,
    Cursor,
    Operation,
    PackedDocuments,
    Snapshot,
    TargetKey,
)
from kubescribe.mirror.gitops_owner import gitops_owner
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.noise import NoisePolicy
from kubescribe.mirror.owned import FULL, Content, keep_owned
from kubescribe.mirror.sanitize import sanitize
from kubescribe.mirror.selectors import selector_matches, selector_query

_OPERATIONS = {"ADDED": Operation.CREATE, "MODIFIED": Operation.UPDATE, "DELETED": Operation.DELETE}


@dataclass(frozen=True)
class StreamSpec:
    """One watch stream of one target: a type in one namespace (or all / cluster scope).

    `selectors` are the label selectors of every rule feeding this stream (None in the tuple =
    a rule without a selector, which selects everything).
    """

    target: TargetKey
    rtype: ResourceType
    namespace: str
    selectors: tuple[Mapping[str, Any] | None, ...]
    operations: frozenset[Operation]
    cluster: str = ""  # a ClusterProvider's name; '' for the operator's own cluster
    audit_route: str = ""  # whose audit facts name the authors ('' = the operator's own)
    # A cluster-wide stream of a namespaced type (ClusterWatchRule `namespaces`): the
    # namespace selector of each rule, parallel to `selectors`; () = no namespace filter.
    namespace_selectors: tuple[Mapping[str, Any], ...] = ()

    @property
    def key(self) -> str:
        where = f"{self.cluster}@" if self.cluster else ""
        return f"{self.target}|{where}{self.rtype.gvr}|{self.namespace or '*'}"

    @property
    def server_selector(self) -> str | None:
        """Pushed to the API server only when every rule agrees on one selector."""
        queries = {selector_query(s) for s in self.selectors}
        return queries.pop() if len(queries) == 1 else None

    def selects(self, labels: Mapping[str, str]) -> bool:
        return any(selector_matches(s, labels) for s in self.selectors)

    def admitted(
        self, namespaces: Mapping[str, Mapping[str, str]]
    ) -> tuple[frozenset[str], ...] | None:
        """For each rule, the namespaces (name -> labels) its namespace selector admits;
        None for a stream without a namespace filter."""
        if not self.namespace_selectors:
            return None
        return tuple(
            frozenset(n for n, labels in namespaces.items() if namespace_admits(sel, n, labels))
            for sel in self.namespace_selectors
        )


def namespace_admits(selector: Mapping[str, Any], name: str, labels: Mapping[str, str]) -> bool:
    names = selector.get("names") or []
    if names and name not in names:
        return False
    return selector_matches(selector.get("labelSelector"), labels)


@dataclass(frozen=True, slots=True)
class Initial:
    """What a stream keeps of one object of its initial state (see `TargetStream.prepare`)."""

    terminating: bool
    document: bytes | None  # packed (`PackedDocuments`); None: not selected, or noise


class TargetStream:
    """The informer's sink for one StreamSpec.

    With a `journal`, every event's object key is recorded for the resume cursor; an event
    that is filtered out while nothing of the stream waits in the worker is acknowledged at
    once (`ack_now`), so a stream of only filtered events still moves its cursor. After each
    submission the stream awaits `room` (the worker's backpressure): the watch reader waits,
    nothing is dropped."""

    def __init__(
        self,
        spec: StreamSpec,
        noise: NoisePolicy,
        submit: Callable[[Change | Snapshot], None],
        clock: Callable[[], float] = time.monotonic,
        *,
        journal: StreamJournal | None = None,
        ack_now: Callable[[str, str], None] | None = None,
        admitted: tuple[frozenset[str], ...] | None = None,
        room: Callable[[], Awaitable[None]] | None = None,
        content: Content = FULL,
        wall: Callable[[], float] = time.time,
        cursor_key: str = "",
    ) -> None:
        self.spec = spec
        # Whose cursor its changes move: its own stream's, or the shared one it is fed by.
        self.cursor_key = cursor_key or spec.key
        self.wall = wall  # dates the observation for `latest_manager`
        self.room = room
        self.content = content
        self.admitted = admitted  # see `StreamSpec.admitted`; fixed for the stream's life
        self.noise = noise
        self.submit = submit
        self.clock = clock
        self.journal = journal
        self.ack_now = ack_now

    @property
    def fingerprint(self) -> str:
        """What a resume cursor of this stream depends on besides its key (a new noise policy
        or content mode renders documents differently: the stream lists afresh)."""
        spec = self.spec
        admitted = [sorted(a) for a in self.admitted] if self.admitted is not None else None
        text = json.dumps(
            [
                list(spec.selectors),
                sorted(spec.operations),
                repr(self.noise),
                admitted,
                repr(self.content),
            ],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def _identity(self, namespace: str, name: str) -> Identity:
        rtype = self.spec.rtype
        return Identity(rtype.group, rtype.kind, namespace if rtype.namespaced else "", name)

    def _selects(self, obj: Mapping[str, Any]) -> bool | None:
        """Whether a rule selects the object; None when no rule admits its namespace."""
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        if self.admitted is None:
            return self.spec.selects(labels)
        namespace = str(meta.get("namespace") or "")
        pairs = [
            selector
            for selector, admitted in zip(self.spec.selectors, self.admitted, strict=False)
            if namespace in admitted
        ]
        if not pairs:
            return None
        return any(selector_matches(s, labels) for s in pairs)

    def _keep(self, obj: Mapping[str, Any]) -> bool:
        """Selected by a rule and not noise (noise is counted by reason)."""
        if not self._selects(obj):
            return False
        reason = self.noise.classify(
            obj, group=self.spec.rtype.group, resource=self.spec.rtype.resource
        )
        if reason is not None:
            metrics.FILTERED.labels(reason).inc()
            return False
        return True

    def _document(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        owned = None
        if self.content.owned:
            kept = keep_owned(obj, self.content)
            if kept.document is None:
                metrics.CONTENT_FALLBACKS.labels(kept.fallback).inc()
            owned = kept.document
        doc = sanitize(obj, owned)
        for reason in self.noise.strip(doc, obj):
            metrics.STRIPPED.labels(reason).inc()
        doc.setdefault("apiVersion", self.spec.rtype.api_version)
        doc.setdefault("kind", self.spec.rtype.kind)
        return doc

    def prepare(self, obj: dict[str, Any]) -> Initial:
        """Sanitize each object of the initial state as it arrives: the informer keeps this
        instead of the API object until the snapshot."""
        # An object being deleted (finalizers pending) is deleted as far as Git is concerned.
        if _terminating(obj):
            return Initial(True, None)
        if not self._keep(obj):
            return Initial(False, None)
        return Initial(False, PackedDocuments.pack(self._document(obj)))

    async def on_snapshot(
        self, objects: Mapping[ObjectKey, Initial], deleted: set[ObjectKey], rv: str
    ) -> None:
        terminating = {k for k, initial in objects.items() if initial.terminating}
        documents = PackedDocuments(
            {
                self._identity(ns, name): initial.document
                for (ns, name), initial in objects.items()
                if initial.document is not None
            }
        )
        if self.journal is not None:
            self.journal.snapshot(rv, objects)
        ops = self.spec.operations
        gone = (
            frozenset(self._identity(*k) for k in deleted | terminating)
            if Operation.DELETE in ops
            else frozenset()
        )
        self.submit(
            Snapshot(
                target=self.spec.target,
                rtype=self.spec.rtype,
                namespace=self.spec.namespace if self.spec.rtype.namespaced else "",
                documents=documents,
                observed_at=self.clock(),
                deleted=gone,
                cursor=Cursor(self.cursor_key, rv),
            )
        )
        if self.room is not None:
            await self.room()

    async def on_event(self, event_type: str, obj: dict[str, Any], rv: str) -> None:
        change = self.change(event_type, obj, rv)
        self._journal(event_type, obj, rv, submitted=change is not None)
        if change is not None:
            self.submit(change)
            if self.room is not None:
                await self.room()

    async def on_stale(self, event_type: str, obj: dict[str, Any], rv: str) -> None:
        """A replayed event its object has moved past (`mirror.replay`): nothing to write, but
        the cursor moves past it like past a filtered event."""
        self._journal(event_type, obj, rv, submitted=False)

    def _journal(self, event_type: str, obj: dict[str, Any], rv: str, *, submitted: bool) -> None:
        if self.journal is None:
            return
        meta = obj.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        present = event_type != "DELETED"
        if self.journal.event(rv, key, present, submitted=submitted) and self.ack_now is not None:
            self.ack_now(self.cursor_key, rv)

    def change(self, event_type: str, obj: dict[str, Any], rv: str) -> Change | None:
        """The change an event makes in this stream's target (None: none)."""
        operation = _OPERATIONS.get(event_type)
        meta = obj.get("metadata") or {}
        if self.admitted is not None and self._selects(obj) is None:
            return None  # a namespace the stream does not admit (deletes included)
        if operation is not None and operation is not Operation.DELETE:
            if _terminating(obj):
                # Deletion intent: the first event with a deletionTimestamp is the delete;
                # the finalizer removals after it find nothing left to remove.
                operation = Operation.DELETE
            elif not self._selects(obj):
                # Only client-side selectors get here: the object left the selection.
                operation = Operation.DELETE
            elif not self._keep(obj):
                return None
        if operation is None or operation not in self.spec.operations:
            return None
        return Change(
            target=self.spec.target,
            operation=operation,
            identity=self._identity(str(meta.get("namespace") or ""), str(meta["name"])),
            rtype=self.spec.rtype,
            document=None if operation is Operation.DELETE else self._document(obj),
            observed_at=self.clock(),
            cursor=Cursor(self.cursor_key, rv),
            uid=str(meta.get("uid") or ""),
            audit_route=self.spec.audit_route,
            field_manager=(
                latest_manager(meta, self.wall()) if operation is not Operation.DELETE else ""
            ),
            owner=gitops_owner(obj),
        )


def _terminating(obj: Mapping[str, Any]) -> bool:
    meta = obj.get("metadata")
    return isinstance(meta, Mapping) and bool(meta.get("deletionTimestamp"))


# How far a managedFields time may lie after the observation (clock skew, second precision).
FUTURE_ALLOWANCE = 2.0


def latest_manager(meta: Mapping[str, Any], observed: float) -> str:
    """The manager of the most recent managedFields entry (the last writer, as a tool name);
    '' when the newest time (second precision) is shared by different managers.

    Whoever may update an object may write its managedFields, times included: entries dated
    more than `FUTURE_ALLOWANCE` seconds after `observed` (Unix time) or without a readable
    time are ignored, so no entry can stay "the newest" and name every later change."""
    dated: list[tuple[dt.datetime, str]] = []
    for entry in meta.get("managedFields") or []:
        when = _entry_time(entry) if isinstance(entry, Mapping) else None
        if when is not None and when.timestamp() <= observed + FUTURE_ALLOWANCE:
            dated.append((when, str(entry.get("manager") or "")))
    newest = max((when for when, _ in dated), default=None)
    managers = {manager for when, manager in dated if when == newest}
    return managers.pop() if len(managers) == 1 else ""


def _entry_time(entry: Mapping[str, Any]) -> dt.datetime | None:
    try:
        when = dt.datetime.fromisoformat(str(entry.get("time") or ""))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def merge_operations(lists: Sequence[Sequence[str]]) -> frozenset[Operation]:
    ops: set[Operation] = set()
    for names in lists:
        for name in names or ["*"]:
            ops.update(Operation) if name == "*" else ops.add(Operation(name))
    return frozenset(ops)
