"""Decoding audit EventLists into attribution facts; hostile input only raises AuditDecodeError."""

from __future__ import annotations

import contextlib
import json
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubescribe.attribution.decode import (
    FACT_COLLECTION,
    FACT_DELETE,
    FACT_NAMED,
    FACT_WRITE,
    SKIP_DRY_RUN,
    SKIP_FAILED,
    SKIP_INVALID,
    SKIP_NO_OBJECT,
    SKIP_NO_USER,
    SKIP_OVERSIZED,
    SKIP_STAGE,
    SKIP_VERB,
    AuditDecodeError,
    AuditTooLarge,
    Decoded,
    Fact,
    author_from_user,
    decode_event_list,
    decode_events,
    json_memory_bound,
)
from kubescribe.attribution.facts import from_record, keys_of, to_record
from kubescribe.mirror.authors import Author

T0 = "2026-01-02T03:04:05.000000Z"
T1 = "2026-01-02T03:04:05.250000Z"


def event(
    verb: str = "create",
    *,
    user: str = "kubescribe-admin",
    impersonated: dict[str, Any] | None = None,
    ref: dict[str, Any] | None = None,
    response: dict[str, Any] | None = None,
    code: int = 201,
    stage: str = "ResponseComplete",
    **extra: Any,
) -> dict[str, Any]:
    ev: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "audit.k8s.io/v1",
        "level": "RequestResponse",
        "auditID": "a-1",
        "stage": stage,
        "requestURI": "/api/v1/namespaces/ns/configmaps",
        "verb": verb,
        "user": {"username": user, "groups": ["system:masters"]},
        "objectRef": ref
        if ref is not None
        else {"resource": "configmaps", "namespace": "ns", "name": "cm", "apiVersion": "v1"},
        "responseStatus": {"metadata": {}, "code": code},
        "requestReceivedTimestamp": T0,
        "stageTimestamp": T1,
        **extra,
    }
    if impersonated is not None:
        ev["impersonatedUser"] = impersonated
    if response is not None:
        ev["responseObject"] = response
    return ev


def cm(uid: str = "u-1", rv: str = "10") -> dict[str, Any]:
    return {
        "kind": "ConfigMap",
        "apiVersion": "v1",
        "metadata": {"name": "cm", "namespace": "ns", "uid": uid, "resourceVersion": rv},
    }


def decode(*events: Any) -> Decoded:
    body = {"kind": "EventList", "apiVersion": "audit.k8s.io/v1", "items": list(events)}
    return decode_event_list(json.dumps(body).encode())


def test_create_becomes_a_write_fact_keyed_by_uid_and_response_version() -> None:
    got = decode(event(response=cm()))
    assert got.accepted == 1
    assert not got.skipped
    [fact] = got.facts
    assert fact.kind == FACT_WRITE
    assert (fact.verb, fact.group, fact.resource, fact.namespace, fact.name) == (
        "create",
        "",
        "configmaps",
        "ns",
        "cm",
    )
    assert (fact.uid, fact.resource_version) == ("u-1", "10")
    assert fact.author == Author("kubescribe-admin", "kubescribe-admin@users.kubescribe.invalid")
    assert fact.completed - fact.received == pytest.approx(0.25)
    assert keys_of(fact) == ("rv/u-1/10",)


def test_impersonated_user_wins_and_extra_names_the_author() -> None:
    impersonated = {
        "username": "alice",
        "extra": {
            "example.org/email": ["alice@example.org"],
            "example.org/name": ["Alice Liddell"],
        },
    }
    [fact] = decode(event(impersonated=impersonated, response=cm())).facts
    assert fact.username == "alice"
    assert fact.author == Author("Alice Liddell", "alice@example.org")


def test_author_rules() -> None:
    assert author_from_user("system:serviceaccount:team-a:deployer") == Author(
        "system:serviceaccount:team-a:deployer",
        "deployer@team-a.serviceaccount.kubescribe.invalid",
    )
    assert author_from_user("oidc:bob@example.com") == Author(
        "oidc:bob@example.com", "bob@example.com"
    )
    # Plain keys work; display-name segments are matched case-insensitively.
    assert author_from_user("u1", {"Display-Name": ["Ünïcode Person"], "mail": ["u1@x.org"]}) == (
        Author("Ünïcode Person", "u1@x.org")
    )
    # An extra email that is not an address is ignored.
    assert author_from_user("u2", {"email": ["not an address"]}).email == (
        "u2@users.kubescribe.invalid"
    )
    # Nothing from a hostile name can break a Git signature.
    hostile = author_from_user("evil <root@x>\nname", {"name": ["a<b>\x00c"]})
    assert hostile.name == "a b c"
    assert "<" not in hostile.email
    assert "\n" not in hostile.email


def test_scale_subresource_attributes_the_parent_object_version() -> None:
    scale = {
        "kind": "Scale",
        "apiVersion": "autoscaling/v1",
        "metadata": {"name": "web", "namespace": "ns", "uid": "dep-1", "resourceVersion": "42"},
        "spec": {"replicas": 3},
    }
    ref = {"resource": "deployments", "namespace": "ns", "name": "web", "apiGroup": "apps"}
    ref["subresource"] = "scale"
    [fact] = decode(event("patch", ref=ref, response=scale, code=200)).facts
    assert (fact.group, fact.subresource, fact.uid, fact.resource_version) == (
        "apps",
        "scale",
        "dep-1",
        "42",
    )
    assert keys_of(fact) == ("rv/dep-1/42",)


def test_immediate_delete_is_keyed_by_the_uid_of_its_status_details() -> None:
    status = {
        "kind": "Status",
        "status": "Success",
        "details": {"name": "cm", "kind": "configmaps", "uid": "u-1"},
    }
    [fact] = decode(event("delete", response=status, code=200)).facts
    assert (fact.kind, fact.uid, fact.resource_version) == (FACT_DELETE, "u-1", "")
    assert keys_of(fact) == ("del/u-1",)


def test_finalizer_held_delete_is_keyed_by_uid_and_its_update_version() -> None:
    held = cm(rv="17")
    held["metadata"]["deletionTimestamp"] = T1
    [fact] = decode(event("delete", response=held, code=200)).facts
    assert keys_of(fact) == ("del/u-1", "rv/u-1/17")


def test_deletecollection_gives_a_window_fact_and_one_delete_per_listed_object() -> None:
    listed = {
        "kind": "ConfigMapList",
        "items": [cm("u-1", "5"), cm("u-2", "6"), {"metadata": {"name": "no-uid"}}, "junk"],
    }
    ref = {"resource": "configmaps", "namespace": "ns", "apiVersion": "v1"}
    got = decode(event("deletecollection", ref=ref, response=listed, code=200))
    kinds = [(f.kind, f.uid) for f in got.facts]
    assert kinds == [(FACT_COLLECTION, ""), (FACT_DELETE, "u-1"), (FACT_DELETE, "u-2")]
    assert keys_of(got.facts[0]) == ("coll//configmaps/ns",)
    # Without a response object (audit level Metadata) the window fact still exists.
    bare = decode(event("deletecollection", ref=ref, code=200))
    assert [f.kind for f in bare.facts] == [FACT_COLLECTION]


def test_events_that_name_no_change_are_skipped_and_counted() -> None:
    got = decode(
        event(response=cm(), stage="RequestReceived"),
        event("get", response=cm(), code=200),
        event(response=cm(), code=409),
        event(response=cm(), requestURI="/api/v1/namespaces/ns/configmaps?dryRun=All"),
        event(ref={}, response=cm()),
        event(response={"kind": "ConfigMap", "metadata": {"name": "cm"}}),  # no uid
        event(response={"kind": "Status", "metadata": {}}),
        event(user="", response=cm()),
        event(response=cm(), stageTimestamp="yesterday"),
        "not an event",
        event(response=cm()),
    )
    assert got.events == 11
    assert got.accepted == 1
    assert got.skipped == {
        SKIP_STAGE: 1,
        SKIP_VERB: 1,
        SKIP_FAILED: 1,
        SKIP_DRY_RUN: 1,
        SKIP_NO_OBJECT: 3,
        SKIP_NO_USER: 1,
        SKIP_INVALID: 2,
    }


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"kind": "Event"}', "want EventList"),
        (b'{"kind": "EventList", "apiVersion": "v1"}', "want audit.k8s.io"),
        (b'{"kind": "EventList", "items": {"a": 1}}', "items is not a list"),
        (b"[" * 100_000, "not JSON"),
    ],
)
def test_non_event_lists_raise_the_documented_error(body: bytes, message: str) -> None:
    with pytest.raises(AuditDecodeError, match=message):
        decode_event_list(body)


def test_events_with_fields_over_their_caps_are_skipped_whole() -> None:
    listed: dict[str, Any] = {
        "kind": "ConfigMapList",
        "items": [cm("u-1"), {"metadata": {"uid": "u-2"}}],
    }
    listed["items"][1]["metadata"]["name"] = "n" * 254
    ref = {"resource": "configmaps", "namespace": "ns"}
    got = decode(
        event(user="u" * 513, response=cm()),
        event(response=cm(uid="x" * 129)),
        event(response=cm(rv="9" * 65)),
        event(ref={"resource": "r" * 254}, response=cm()),
        event(auditID="a" * 129, response=cm()),
        event("deletecollection", ref=ref, response=listed, code=200),
        event(user="u" * 512, response=cm()),  # at the cap: fine
    )
    assert got.skipped == {SKIP_OVERSIZED: 6}
    assert [f.username for f in got.facts] == ["u" * 512]


def test_more_events_than_the_cap_raise_too_large() -> None:
    body = json.dumps({"kind": "EventList", "items": [{}] * 11}).encode()
    assert decode_event_list(body, max_events=11).events == 11
    with pytest.raises(AuditTooLarge, match="11 events, more than 10"):
        decode_event_list(body, max_events=10)


def _shapes(size: int) -> dict[str, bytes]:
    """Bodies of about `size` bytes that make json.loads allocate the most per byte."""
    n = size // 3

    def items(body: bytes) -> bytes:
        return b'{"kind":"EventList","items":[{"x":[' + body + b"]}]}"

    events = [event(response=cm(uid=f"u-{i}", rv=str(i))) for i in range(size // 700)]
    return {
        "empty_dicts": items(b",".join([b"{}"] * n)),
        "empty_lists": items(b",".join([b"[]"] * n)),
        "short_strings": items(b",".join([b'"ab"'] * (size // 5))),
        "floats": items(b",".join([b"1.5"] * (size // 4))),
        "ints": items(b",".join([b"999"] * (size // 4))),
        "dict_keys": items(b"{" + b",".join(b'"k%d":0' % i for i in range(size // 10)) + b"}"),
        "ascii_string": items(b'"' + b"a" * size + b'"'),
        "ucs4_string": items(json.dumps("\U0001f600" + "a" * size, ensure_ascii=False).encode()),
        "ucs4_escaped": items(json.dumps("\U0001f600" + "a" * size).encode()),
        "ucs2_string": items(json.dumps("\u0100" + "a" * size, ensure_ascii=False).encode()),
        "latin1_strings": items(b",".join(['"\u00e9\u00e9"'.encode()] * (size // 7))),
        "events": json.dumps({"kind": "EventList", "items": events}).encode(),
    }


@pytest.mark.parametrize("shape", sorted(_shapes(1)))
def test_json_memory_bound_covers_what_json_loads_allocates(shape: str) -> None:
    body = _shapes(256 * 1024)[shape]
    tracemalloc.start()
    try:
        json.loads(body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= json_memory_bound(body)
    if shape == "events":  # real batches are not refused far below the cap
        assert json_memory_bound(body) < 14 * len(body)


def test_empty_event_list_is_fine() -> None:
    assert decode_event_list(b'{"kind":"EventList","apiVersion":"audit.k8s.io/v1"}').facts == []


def test_facts_survive_the_record_round_trip() -> None:
    [fact] = decode(event(response=cm())).facts
    record = to_record(fact)
    assert all(isinstance(v, str) for v in record.values())
    assert from_record(record) == fact
    assert from_record({"kind": "write"}) is None


# -- fuzzing -------------------------------------------------------------------------------

json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=30,
)
interesting = {
    "kind": st.sampled_from(["EventList", "Event", "Status"]) | json_value,
    "apiVersion": st.sampled_from(["audit.k8s.io/v1", None]) | json_value,
    "stage": st.sampled_from(["ResponseComplete", "RequestReceived"]) | json_value,
    "verb": st.sampled_from(["create", "patch", "delete", "deletecollection", "get"]) | json_value,
    "user": st.fixed_dictionaries({"username": st.text(max_size=30) | json_value}) | json_value,
    "impersonatedUser": st.fixed_dictionaries(
        {"username": st.text(max_size=30), "extra": json_value}
    )
    | json_value,
    "objectRef": st.fixed_dictionaries(
        {"resource": st.text(max_size=10) | json_value}, optional={"uid": json_value}
    )
    | json_value,
    "responseObject": st.fixed_dictionaries(
        {"metadata": json_value | st.fixed_dictionaries({"uid": json_value})},
        optional={"kind": json_value, "items": st.lists(json_value), "details": json_value},
    )
    | json_value,
    "responseStatus": st.fixed_dictionaries({"code": st.integers()}) | json_value,
    "stageTimestamp": st.sampled_from([T1, "", "9999-99-99"]) | json_value,
    "requestReceivedTimestamp": st.sampled_from([T0]) | json_value,
}
audit_event = st.fixed_dictionaries({}, optional=interesting)
event_list = st.fixed_dictionaries(
    {"kind": st.just("EventList") | json_value},
    optional={"apiVersion": st.just("audit.k8s.io/v1") | json_value, "items": json_value}
    | {"items": st.lists(audit_event | json_value, max_size=5)},
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(event_list | json_value)
def test_fuzz_decoder_returns_facts_or_raises_its_error(doc: Any) -> None:
    try:
        got = decode_events(doc)
    except AuditDecodeError:
        return
    assert got.accepted + sum(got.skipped.values()) == got.events
    for fact in got.facts:
        assert isinstance(fact, Fact)
        assert keys_of(fact)
        assert "<" not in fact.author.name
        assert "\n" not in fact.author.email


@settings(max_examples=200)
@given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_fuzz_raw_bytes(body: bytes) -> None:
    with contextlib.suppress(AuditDecodeError):
        decode_event_list(body)


def test_writes_proxied_to_an_extension_api_server_become_named_facts() -> None:
    """The aggregator never decodes a proxied request: its audit event has an objectRef (no name
    for a create) and no request or response object."""
    ref = {"apiGroup": "demo.kubescribe.test", "apiVersion": "v1", "resource": "widgets"}
    created = event(ref={**ref, "namespace": "ns"}, user="alice")
    patched = event("patch", ref={**ref, "namespace": "ns", "name": "w"}, code=200, user="bob")
    got = decode(created, patched)
    assert got.skipped == {}
    assert [(f.kind, f.verb, f.name, f.username) for f in got.facts] == [
        (FACT_NAMED, "create", "", "alice"),
        (FACT_NAMED, "patch", "w", "bob"),
    ]
    assert keys_of(got.facts[0]) == ("wnew/demo.kubescribe.test/widgets/ns",)
    assert keys_of(got.facts[1]) == ("wname/demo.kubescribe.test/widgets/ns/w",)
    assert from_record(to_record(got.facts[1])) == got.facts[1]
    # A response that is there but names no object still says nothing.
    assert decode(event(response={"kind": "Status", "metadata": {}})).facts == []
    # Hostile objectRefs and users never raise: skipped or taken as strings only.
    odd = decode(
        event(ref={"resource": ["widgets"]}),
        event(ref={"resource": "widgets", "name": {"x": 1}, "namespace": 7}),
        event(ref={"resource": "w" * 300}),
        event(ref={"resource": "widgets"}, responseObject=None, user=""),
    )
    assert [(f.kind, f.name, f.namespace) for f in odd.facts] == [(FACT_NAMED, "", "")]
    assert odd.skipped == {SKIP_NO_OBJECT: 1, SKIP_OVERSIZED: 1, SKIP_NO_USER: 1}
