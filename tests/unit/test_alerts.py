"""Alerts: the pure rules (selection, field paths, grouping, rate, message bytes, signature),
the receiver URL policy and an Alert's conditions from hostile specs."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import replace
from typing import Any

import pytest

from kubescribe.api import conditions as c
from kubescribe.controller.alerts import Alerts, _route, route_conditions
from kubescribe.git.records import Landed, WriteReport
from kubescribe.git.urlpolicy import UrlRefusal, UrlRefused, check_receiver_url
from kubescribe.mirror.alerts import (
    AlertEvent,
    AlertRule,
    Burst,
    FieldMemory,
    RateLimit,
    event_of,
    message_body,
    signature,
)
from kubescribe.mirror.authors import Author
from kubescribe.mirror.changes import Change, Operation, TargetKey
from kubescribe.mirror.gitops_owner import GitOpsOwner
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.ignore import IgnoreRule

DEPLOYMENTS = ResourceType("apps", "v1", "deployments", "Deployment", True)
SECRETS = ResourceType("", "v1", "secrets", "Secret", True)
T = TargetKey("team", "prod")
ALICE = Author("Alice", "alice@example.org", "audit", "alice")


def deployment(replicas: int, image: str = "nginx:1.27") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "team"},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "web", "image": image}]}},
        },
    }


def change(
    doc: dict[str, Any] | None,
    op: Operation = Operation.UPDATE,
    rtype: ResourceType = DEPLOYMENTS,
    manager: str = "",
) -> Change:
    identity = Identity(rtype.group, rtype.kind, "team", "web")
    return Change(T, op, identity, rtype, doc, 0.0, field_manager=manager)


def event(
    username: str = "alice", manager: str = "kubectl", paths: tuple[str, ...] | None = ()
) -> AlertEvent:
    author = Author(username, f"{username}@x", "audit", username) if username else None
    return event_of(change(deployment(1), manager=manager), "c0ffee", author, paths, 1.0)


def test_field_memory_tells_the_changed_paths_and_keeps_no_values() -> None:
    memory = FieldMemory()
    assert memory.changed(change(deployment(1), Operation.CREATE)) == (
        "apiVersion",
        "kind",
        "metadata.name",
        "metadata.namespace",
        "spec.replicas",
        "spec.template.spec.containers[web].image",
        "spec.template.spec.containers[web].name",
    )
    assert memory.changed(change(deployment(3))) == ("spec.replicas",)
    assert memory.changed(change(deployment(3, "nginx:1.28"))) == (
        "spec.template.spec.containers[web].image",
    )
    secret = {"apiVersion": "v1", "kind": "Secret", "data": {"password": "aHVudGVyMg=="}}
    memory.changed(change(secret, Operation.CREATE, SECRETS))
    rotated = {"apiVersion": "v1", "kind": "Secret", "data": {"password": "c2VjcmV0"}}
    assert memory.changed(change(rotated, rtype=SECRETS)) == ("data.password",)
    kept = repr(memory._seen)
    assert "aHVudGVyMg" not in kept
    assert "c2VjcmV0" not in kept


def test_a_document_not_seen_before_has_unknown_paths_and_memory_is_bounded() -> None:
    memory = FieldMemory(limit=1)
    assert memory.changed(change(deployment(2))) is None
    other = Change(T, Operation.UPDATE, Identity("apps", "Deployment", "team", "api"),
                   DEPLOYMENTS, deployment(1), 0.0)  # fmt: skip
    memory.changed(other)
    assert len(memory) == 1
    assert memory.changed(change(deployment(5))) is None  # forgotten: least recently seen


def test_selection_by_kind_operation_author_and_path() -> None:
    assert AlertRule().matches(event())
    assert not AlertRule(kinds=frozenset({"Secret"})).matches(event())
    assert not AlertRule(operations=frozenset({"DELETE"})).matches(event())
    assert AlertRule(authors=frozenset({"alice"})).matches(event())
    assert not AlertRule(authors=frozenset({"alice"})).matches(event("bob"))
    spec = AlertRule(field_paths=("spec.template",))
    assert spec.matches(event(paths=("spec.template.spec.containers[web].image",)))
    assert not spec.matches(event(paths=("spec.templates",)))  # a prefix of the name only
    assert not spec.matches(event(paths=None))  # unknown paths match no path list


def test_exclude_authors_reuses_the_ignore_rule() -> None:
    rule = AlertRule(
        exclude=IgnoreRule.parse(
            users=["bob"],
            service_accounts=["flux-system/*"],
            field_managers=["kustomize-controller"],
        )
    )
    assert not rule.matches(event("bob"))
    assert not rule.matches(event("system:serviceaccount:flux-system:kustomize-controller"))
    assert not rule.matches(event("alice", manager="kustomize-controller"))
    assert rule.matches(event("system:serviceaccount:other:deployer"))
    assert rule.matches(event(""))  # an unknown author is told, never dropped on a guess


def test_a_burst_closes_after_its_window_and_the_rate_limit_slides() -> None:
    burst = Burst(opened=10.0)
    assert not burst.due(5, 14.9)
    assert burst.due(5, 15.0)
    limit = RateLimit(2)
    assert limit.allow(0.0)
    assert limit.allow(1.0)
    assert not limit.allow(2.0)
    assert limit.allow(3600.0)


def test_the_message_names_who_what_and_the_commit_and_is_signed() -> None:
    e = event_of(change(deployment(3)), "abc123", ALICE, ("spec.replicas",), 5.0)
    body = message_body("team/outside-gitops", [e] * 101, 6.0)
    parsed = json.loads(body)
    assert parsed["count"] == 101
    assert parsed["omitted"] == 1
    assert len(parsed["changes"]) == 100
    assert parsed["commits"] == ["abc123"]
    first = parsed["changes"][0]
    assert first["who"] == {
        "author": "Alice <alice@example.org>",
        "username": "alice",
        "fieldManager": "",
    }
    assert first["what"]["fieldPaths"] == ["spec.replicas"]
    expected = hmac.new(b"k", body, hashlib.sha256).hexdigest()
    assert signature(b"k", body) == f"sha256={expected}"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://169.254.169.254/latest/meta-data/", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("http://metadata.google.internal/computeMetadata/v1/", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("https://[fe80::1]/hook", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("http://[::ffff:169.254.169.254]/", UrlRefusal.ADDRESS_NOT_ALLOWED),
        ("https://user:token@hooks.example.org/x", UrlRefusal.CREDENTIALS_IN_URL),
        ("file:///etc/passwd", UrlRefusal.SCHEME_NOT_ALLOWED),
        ("gopher://hooks.example.org/", UrlRefusal.SCHEME_NOT_ALLOWED),
        ("git@hooks.example.org:x", UrlRefusal.SCHEME_NOT_ALLOWED),
        (" https://hooks.example.org/", UrlRefusal.MALFORMED),
        ("https://hooks.example.org\n/", UrlRefusal.MALFORMED),
    ],
)
def test_a_receiver_url_goes_through_the_address_policy(url: str, reason: UrlRefusal) -> None:
    with pytest.raises(UrlRefused) as refused:
        check_receiver_url(url)
    assert refused.value.reason is reason
    assert "token" not in refused.value.message


def test_a_name_resolving_to_a_metadata_address_is_refused() -> None:
    check_receiver_url("https://hooks.example.org/x")
    with pytest.raises(UrlRefused, match="metadata"):
        check_receiver_url("https://hooks.example.org/x", lambda host: ["169.254.169.254"])


def _alert(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "a", "namespace": "team", "generation": 1}, "spec": spec}


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"webhook": {"url": "http://169.254.169.254/"}}, c.URL_REFUSED),
        ({}, c.INVALID_SPEC),
        ({"webhook": "not a mapping"}, c.INVALID_SPEC),
        (
            {
                "webhook": {"url": "https://h.example.org/"},
                "selector": {"excludeAuthors": {"serviceAccounts": ["no-slash"]}},
            },
            c.INVALID_SPEC,
        ),
        ({"webhook": {"url": "https://h.example.org/"}, "groupWindowSeconds": -1}, c.INVALID_SPEC),
    ],
)
def test_a_hostile_spec_is_a_reason_never_an_exception(spec: dict[str, Any], reason: str) -> None:
    route = _route(("team", "a"), _alert(spec))
    ready = route_conditions(route)[0]
    assert (ready.type, ready.status, ready.reason) == (c.READY, "False", reason)
    if reason == c.INVALID_SPEC and "excludeAuthors" in json.dumps(spec):
        assert "spec.selector.excludeAuthors" in ready.message


def test_delivery_failure_and_recovery_show_on_the_conditions() -> None:
    route = _route(("team", "a"), _alert({"webhook": {"url": "https://h.example.org/"}}))
    assert [(x.type, x.status, x.reason) for x in route_conditions(route)] == [
        (c.READY, "True", c.READY),
        (c.DELIVERY_FAILING, "False", c.OK),
    ]
    route.failing = (c.RECEIVER_UNREACHABLE, "POST failed: connection refused")
    assert [(x.type, x.status, x.reason) for x in route_conditions(route)] == [
        (c.READY, "False", c.RECEIVER_UNREACHABLE),
        (c.DELIVERY_FAILING, "True", c.RECEIVER_UNREACHABLE),
    ]


def test_a_burst_is_one_message_and_an_alert_hears_only_its_namespace() -> None:
    now = [100.0]
    alerts = Alerts(client=None, status=None, clock=lambda: now[0], wall=lambda: 0.0)  # type: ignore[arg-type]
    spec = {"webhook": {"url": "https://h.example.org/"}, "groupWindowSeconds": 5}
    mine, theirs = ("team", "a"), ("other", "b")
    alerts._routes = {mine: _route(mine, _alert(spec)), theirs: _route(theirs, _alert(spec))}
    for replicas in range(1, 101):
        landed = Landed(f"sha{replicas}", ALICE, change(deployment(replicas)))
        alerts.observe(WriteReport(target=T, landed=(landed,)))
    now[0] = 104.9
    alerts._close_bursts()
    assert alerts._queue.qsize() == 0  # the window is still open
    now[0] = 105.0
    alerts._close_bursts()
    assert alerts._queue.qsize() == 1  # one message for the burst, none for namespace other
    message = alerts._queue.get_nowait()
    assert message.route == mine
    assert message.count == 100
    assert json.loads(message.body)["count"] == 100
    assert alerts._routes[theirs].burst is None


def test_a_flux_change_says_so_and_links_its_commit_a_delete_too() -> None:
    alerts = Alerts(client=None, status=None, wall=lambda: 0.0)  # type: ignore[arg-type]
    spec = {"webhook": {"url": "https://h.example.org/"}, "groupWindowSeconds": 0}
    alerts._routes = {("team", "a"): _route(("team", "a"), _alert(spec))}
    owner = GitOpsOwner("Flux", "Kustomization", "flux-system", "apps")
    url = "https://github.com/acme/mirror/commit/"
    for sha, doc, op in (("a1", deployment(1), Operation.UPDATE), ("b2", None, Operation.DELETE)):
        told = replace(change(doc, op), owner=owner)
        alerts.observe(WriteReport(target=T, landed=(Landed(sha * 4, ALICE, told, url + sha * 4),)))
        alerts._close_bursts()
    for sha in ("a1", "b2"):
        body = json.loads(alerts._queue.get_nowait().body)
        (told_json,) = body["changes"]
        assert told_json["managedBy"] == {
            "tool": "Flux",
            "kind": "Kustomization",
            "namespace": "flux-system",
            "name": "apps",
        }
        assert told_json["drift"] == "changed outside Flux: kustomization flux-system/apps"
        assert told_json["commitUrl"] == body["commitUrl"] == url + sha * 4


def test_an_object_without_gitops_labels_has_no_owner_nor_link() -> None:
    parsed = json.loads(message_body("team/a", [event()], 1.0))
    (told,) = parsed["changes"]
    assert (told["managedBy"], told["drift"], told["commitUrl"]) == (None, None, None)
    assert parsed["commitUrl"] is None
