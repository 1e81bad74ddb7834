"""The stream sink turns watch events into sanitized changes and snapshots."""

from __future__ import annotations

from typing import Any

from kubescribe import metrics
from kubescribe.controller.cursors import StreamJournal
from kubescribe.controller.streams import Initial, StreamSpec, TargetStream, merge_operations
from kubescribe.mirror.changes import Change, Operation, PackedDocuments, Snapshot, TargetKey
from kubescribe.mirror.gitops_owner import GitOpsOwner
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY
from kubescribe.mirror.owned import Content

CM = ResourceType("", "v1", "configmaps", "ConfigMap", True)
TARGET = TargetKey("ns", "t")


def cm(name: str, **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": labels,
            "resourceVersion": "7",
            "managedFields": [{}],
        },
        "data": {"a": "1"},
    }


def sink(
    *selectors: dict[str, Any] | None, ops: frozenset[Operation] = frozenset(Operation)
) -> tuple[TargetStream, list[Change | Snapshot]]:
    out: list[Change | Snapshot] = []
    spec = StreamSpec(TARGET, CM, "ns", selectors or (None,), ops)
    return TargetStream(spec, DEFAULT_NOISE_POLICY, out.append, lambda: 1.0), out


def initial(
    stream: TargetStream, objects: dict[tuple[str, str], dict[str, Any]]
) -> dict[tuple[str, str], Initial]:
    """The initial state as the informer hands it over: each object prepared on arrival."""
    return {key: stream.prepare(obj) for key, obj in objects.items()}


async def test_events_become_sanitized_changes_with_uid() -> None:
    stream, out = sink()
    await stream.on_event("ADDED", cm("a"), "7")
    (change,) = out
    assert isinstance(change, Change)
    assert change.operation is Operation.CREATE
    assert change.identity == Identity("", "ConfigMap", "ns", "a")
    assert change.uid == "uid-a"
    assert change.document is not None
    assert "managedFields" not in change.document["metadata"]


async def test_noise_is_dropped_and_snapshot_keeps_observed_deletes() -> None:
    stream, out = sink()
    await stream.on_event("ADDED", cm("kube-root-ca.crt"), "8")
    assert out == []
    await stream.on_snapshot(
        initial(stream, {("ns", "a"): cm("a"), ("ns", "kube-root-ca.crt"): cm("kube-root-ca.crt")}),
        {("ns", "gone")},
        "9",
    )
    (snap,) = out
    assert isinstance(snap, Snapshot)
    assert list(snap.documents) == [Identity("", "ConfigMap", "ns", "a")]
    assert snap.deleted == frozenset({Identity("", "ConfigMap", "ns", "gone")})


async def test_object_leaving_a_client_side_selection_is_a_delete() -> None:
    stream, out = sink({"matchLabels": {"team": "a"}}, {"matchLabels": {"team": "b"}})
    assert stream.spec.server_selector is None
    await stream.on_event("MODIFIED", cm("x", team="c"), "10")
    (change,) = out
    assert isinstance(change, Change)
    assert change.operation is Operation.DELETE
    assert change.document is None


async def test_operations_filter_live_events() -> None:
    stream, out = sink(ops=merge_operations([["CREATE"]]))
    await stream.on_event("MODIFIED", cm("a"), "11")
    await stream.on_event("DELETED", cm("a"), "12")
    assert out == []
    await stream.on_snapshot({}, {("ns", "a")}, "13")
    (snap,) = out
    assert isinstance(snap, Snapshot)
    assert snap.deleted == frozenset()  # deletes are not mirrored for this stream


async def test_changes_of_a_remote_cluster_carry_its_audit_route() -> None:
    spec = StreamSpec(
        TargetKey("ns", "t"),
        ResourceType("", "v1", "configmaps", "ConfigMap", True),
        "app",
        (None,),
        frozenset(Operation),
        cluster="east",
        audit_route="east",
    )
    submitted: list[Any] = []
    stream = TargetStream(spec, DEFAULT_NOISE_POLICY, submitted.append)
    obj = {"metadata": {"name": "c", "namespace": "app", "uid": "u1"}, "data": {}}
    await stream.on_event("ADDED", obj, "7")
    [change] = submitted
    assert change.audit_route == "east"
    assert "east@" in spec.key


def terminating(obj: dict[str, Any], *finalizers: str) -> dict[str, Any]:
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    obj["metadata"]["finalizers"] = list(finalizers)
    return obj


async def test_deletion_intent_is_the_delete_and_finalizer_removals_change_nothing() -> None:
    stream, out = sink()
    await stream.on_event("MODIFIED", terminating(cm("a"), "x/one", "x/two"), "8")
    await stream.on_event("MODIFIED", terminating(cm("a"), "x/two"), "9")
    await stream.on_event("DELETED", terminating(cm("a")), "10")
    assert [c.operation for c in out if isinstance(c, Change)] == [Operation.DELETE] * 3
    assert all(isinstance(c, Change) and c.document is None for c in out)
    assert out[0].uid == "uid-a"  # type: ignore[union-attr]


async def test_a_snapshot_counts_terminating_objects_as_deleted() -> None:
    stream, out = sink()
    await stream.on_snapshot(
        initial(stream, {("ns", "a"): cm("a"), ("ns", "b"): terminating(cm("b"), "f")}), set(), "9"
    )
    (snap,) = out
    assert isinstance(snap, Snapshot)
    assert set(snap.documents) == {Identity("", "ConfigMap", "ns", "a")}
    assert snap.deleted == frozenset({Identity("", "ConfigMap", "ns", "b")})


async def test_a_cluster_wide_stream_keeps_only_admitted_namespaces() -> None:
    out: list[Change | Snapshot] = []
    spec = StreamSpec(TARGET, CM, "", (None,), frozenset(Operation), namespace_selectors=({},))
    stream = TargetStream(
        spec, DEFAULT_NOISE_POLICY, out.append, lambda: 1.0, admitted=(frozenset({"ns"}),)
    )
    other = cm("b")
    other["metadata"]["namespace"] = "elsewhere"
    await stream.on_snapshot(
        initial(stream, {("ns", "a"): cm("a"), ("elsewhere", "b"): other}), set(), "5"
    )
    await stream.on_event("ADDED", other, "6")
    await stream.on_event("DELETED", other, "7")
    await stream.on_event("MODIFIED", cm("a"), "8")
    snap, change = out
    assert isinstance(snap, Snapshot)
    assert set(snap.documents) == {Identity("", "ConfigMap", "ns", "a")}
    assert isinstance(change, Change)
    assert change.identity.name == "a"


async def test_each_submission_waits_for_room_and_filtered_events_do_not() -> None:
    out: list[Change | Snapshot] = []
    waits: list[int] = []

    async def room() -> None:
        waits.append(len(out))  # called after the submission it follows

    spec = StreamSpec(TARGET, CM, "ns", (None,), frozenset(Operation))
    stream = TargetStream(spec, DEFAULT_NOISE_POLICY, out.append, lambda: 1.0, room=room)
    await stream.on_snapshot(initial(stream, {("ns", "a"): cm("a")}), set(), "1")
    await stream.on_event("ADDED", cm("b"), "2")
    await stream.on_event("ADDED", cm("kube-root-ca.crt"), "3")  # noise: nothing submitted
    assert waits == [1, 2]


def test_packed_documents_unpack_a_fresh_tree_on_each_access() -> None:
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"k": "1"}}
    key = Identity("", "ConfigMap", "ns", "a")
    packed = PackedDocuments({key: PackedDocuments.pack(doc)})
    assert dict(packed) == {key: doc}
    first = packed[key]
    assert isinstance(first, dict)
    first["data"]["k"] = "changed by a renderer"
    assert packed[key] == doc
    assert key in packed
    assert Identity("", "ConfigMap", "ns", "b") not in packed


async def test_owned_content_keeps_written_fields_and_falls_back_when_unusable() -> None:
    spec = StreamSpec(TARGET, CM, "ns", (None,), frozenset(Operation))
    out: list[Change | Snapshot] = []
    stream = TargetStream(
        spec, DEFAULT_NOISE_POLICY, out.append, lambda: 1.0, content=Content("Owned")
    )
    written = cm("a")
    written["metadata"]["managedFields"] = [
        {
            "apiVersion": "v1",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:a": {}}},
            "manager": "kubectl",
            "operation": "Apply",
        }
    ]
    written["data"]["server"] = "filled"
    before = metrics.CONTENT_FALLBACKS.labels("unsupported-format")._value.get()
    await stream.on_event("ADDED", written, "7")
    await stream.on_event("ADDED", cm("b"), "8")  # managedFields [{}]: unusable
    first, second = out
    assert isinstance(first, Change)
    assert isinstance(second, Change)
    assert first.document == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "a", "namespace": "ns"},
        "data": {"a": "1"},
    }
    assert second.document is not None
    assert second.document["data"] == {"a": "1"}
    assert metrics.CONTENT_FALLBACKS.labels("unsupported-format")._value.get() == before + 1
    assert stream.fingerprint != sink()[0].fingerprint


async def test_a_managed_fields_entry_dated_in_the_future_does_not_pin_the_inferred_manager() -> (
    None
):
    """Anyone who may update an object may write its managedFields, times included: an entry
    dated after the observation would otherwise stay "the newest" and name every later change."""
    out: list[Change | Snapshot] = []
    spec = StreamSpec(TARGET, CM, "ns", (None,), frozenset(Operation))
    observed = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    stream = TargetStream(
        spec, DEFAULT_NOISE_POLICY, out.append, lambda: 1.0, wall=lambda: observed
    )
    obj = cm("a")
    obj["metadata"]["managedFields"] = [
        {"manager": "kubectl-edit", "operation": "Update", "time": "2027-01-15T07:59:59Z"},
        {"manager": "pinned", "operation": "Update", "time": "2099-01-01T00:00:00Z"},
        {"manager": "garbage", "operation": "Update", "time": "not a time"},
    ]
    await stream.on_event("MODIFIED", obj, "8")
    # Within the allowance for clock skew an entry still counts.
    obj["metadata"]["managedFields"][1]["time"] = "2027-01-15T08:00:01Z"
    await stream.on_event("MODIFIED", obj, "9")
    assert [c.field_manager for c in out if isinstance(c, Change)] == ["kubectl-edit", "pinned"]


async def test_a_stale_replayed_event_submits_nothing_and_moves_the_cursor_past_it() -> None:
    out: list[Change | Snapshot] = []
    acks: list[tuple[str, str]] = []
    spec = StreamSpec(TARGET, CM, "ns", (None,), frozenset(Operation))
    journal = StreamJournal(spec.key, "fp")
    stream = TargetStream(
        spec,
        DEFAULT_NOISE_POLICY,
        out.append,
        lambda: 1.0,
        journal=journal,
        ack_now=lambda key, rv: acks.append((key, rv)),
    )
    await stream.on_stale("MODIFIED", cm("doomed"), "11")
    assert out == []
    assert acks == [(spec.key, "11")]  # nothing of the stream waits: acknowledged at once
    await stream.on_event("MODIFIED", cm("kept"), "12")
    await stream.on_stale("DELETED", cm("recreated"), "13")
    assert len(out) == 1
    assert acks == [(spec.key, "11")]  # not ahead of the change still waiting in the worker
    save = journal.ack("12", 1)
    assert save is not None
    assert save.added == {("ns", "doomed"), ("ns", "kept")}


async def test_the_gitops_owner_is_read_from_the_object_before_its_bookkeeping_is_stripped() -> (
    None
):
    stream, out = sink()
    flux = cm(
        "a",
        **{
            "kustomize.toolkit.fluxcd.io/name": "apps",
            "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
        },
    )
    await stream.on_event("MODIFIED", flux, "7")
    await stream.on_event("DELETED", flux, "8")
    await stream.on_event("ADDED", cm("b"), "9")
    updated, deleted, plain = out
    assert isinstance(updated, Change)
    assert isinstance(deleted, Change)
    assert isinstance(plain, Change)
    assert updated.document is not None
    assert "labels" not in updated.document["metadata"]  # stripped: not in Git
    owner = GitOpsOwner("Flux", "Kustomization", "flux-system", "apps")
    assert updated.owner == deleted.owner == owner
    assert deleted.document is None
    assert plain.owner is None
