"""Field paths, summaries and blame of the history commands (pure)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from kubescribe.history import fields
from kubescribe.history.refs import RefError, parse_ref
from kubescribe.history.restoring import controlled_by, refusal, restorable
from kubescribe.history.times import TimeError, duration, looks_like_commit, parse_time
from kubescribe.mirror import fieldpaths
from kubescribe.mirror.identity import Identity

NOW = dt.datetime(2026, 12, 3, 14, 0, tzinfo=dt.UTC)


def deployment(replicas: int, image: str = "nginx:1.27", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "shop", **({"labels": labels} if labels else {})},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "web", "image": image}]}},
        },
    }


def test_paths_name_list_items_by_name_and_bracket_keys_that_are_not_words() -> None:
    flat = fieldpaths.flatten(deployment(2, **{"app.kubernetes.io/name": "web"}))
    assert flat["spec.template.spec.containers[web].image"] == "nginx:1.27"
    assert flat['metadata.labels["app.kubernetes.io/name"]'] == "web"
    assert fieldpaths.flatten({"args": ["a", "b"], "empty": {}}) == {
        "args[0]": "a",
        "args[1]": "b",
        "empty": {},
    }
    assert "sops" not in str(fieldpaths.flatten({"sops": {"mac": "x"}, "data": {"k": "v"}}))


def test_summary_says_what_changed_by_field_path() -> None:
    changes = fields.diff(deployment(2), deployment(3))
    assert fields.summary("UPDATE", changes, secret=False) == "spec.replicas 2→3"
    config = {"kind": "ConfigMap", "apiVersion": "v1", "data": {"LOG_LEVEL": "info"}}
    longer = {**config, "data": {"LOG_LEVEL": "x" * 100, "NEW": "1"}}
    assert fields.summary("UPDATE", fields.diff(config, longer), False) == (
        "data.LOG_LEVEL changed, data.NEW added (1)"
    )
    many = fields.diff(deployment(2, a="1"), deployment(3, "nginx:2", b="2"))
    assert fields.summary("UPDATE", many, False).endswith(" and 1 more")
    assert fields.summary("CREATE", [], False) == "created"
    assert fields.summary("DELETE", [], False) == "deleted"


def test_a_secret_value_is_never_in_a_summary_nor_a_redacted_document() -> None:
    old = {"apiVersion": "v1", "kind": "Secret", "data": {"password": "c2VjcmV0"}}
    new = {"apiVersion": "v1", "kind": "Secret", "data": {"password": "bmV3", "user": "YQ=="}}
    assert fields.is_secret(old)
    assert fields.is_secret({"sops": {}, "kind": "Anything"})
    text = fields.summary("UPDATE", fields.diff(old, new), secret=True)
    assert text == "data.password changed, data.user added"
    shown_old, shown_new = fields.redacted_pair(old, new)
    assert "c2VjcmV0" not in str(shown_old)
    assert shown_new["data"] == {"password": "(hidden, changed)", "user": "(hidden)"}
    assert fields.shown("ENC[AES256_GCM,data:xyz]") is None


def test_blame_names_the_change_that_last_set_each_field() -> None:
    versions: list[tuple[str, Any]] = [
        ("alice", deployment(2)),
        ("bob", deployment(3)),
        ("carol", None),
    ]
    blamed = {b.path: (b.change, b.value) for b in fields.blame(versions)}
    assert blamed["spec.replicas"] == ("bob", 3)
    assert blamed["spec.template.spec.containers[web].image"] == ("alice", "nginx:1.27")
    # A new life after a delete owes nothing to the one before.
    again = fields.blame([*versions, ("dave", deployment(3))])
    assert {b.change for b in again} == {"dave"}


def test_times_and_commits() -> None:
    assert duration("1h30m") == dt.timedelta(hours=1, minutes=30)
    assert duration("2d") == dt.timedelta(days=2)
    assert duration("abc") is None
    assert parse_time("1h", NOW) == NOW - dt.timedelta(hours=1)
    assert parse_time("2026-12-03T12:00:00Z", NOW) == dt.datetime(2026, 12, 3, 12, tzinfo=dt.UTC)
    assert parse_time("2026-12-03 12:00", NOW) == dt.datetime(2026, 12, 3, 12, tzinfo=dt.UTC)
    assert parse_time("2026-12-03T13:00:00+01:00", NOW) == dt.datetime(
        2026, 12, 3, 12, tzinfo=dt.UTC
    )
    assert parse_time("13:30", NOW) == dt.datetime(2026, 12, 3, 13, 30, tzinfo=dt.UTC)
    assert parse_time("9:00", NOW) == dt.datetime(2026, 12, 3, 9, tzinfo=dt.UTC)
    assert parse_time("15:00", NOW) == dt.datetime(2026, 12, 2, 15, tzinfo=dt.UTC)
    with pytest.raises(TimeError, match="not a time"):
        parse_time("yesterday", NOW)
    assert looks_like_commit("4f92688")
    assert not looks_like_commit("20261203")
    assert not looks_like_commit("1h")


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("deployment/web", True),
        ("deployments/web", True),
        ("deploy/web", True),
        ("Deployment/web", True),
        ("deployments.apps/web", True),
        ("deployments.batch/web", False),
        ("configmap/web", False),
    ],
)
def test_type_names_as_kubectl_takes_them(text: str, matches: bool) -> None:
    assert parse_ref(text).matches(Identity("apps", "Deployment", "shop", "web")) is matches


def test_core_and_plural_y_type_names() -> None:
    assert parse_ref("secrets.core/db").matches(Identity("", "Secret", "a", "db"))
    assert parse_ref("cm/x").matches(Identity("", "ConfigMap", "a", "x"))
    assert parse_ref("networkpolicies/x").matches(
        Identity("networking.k8s.io", "NetworkPolicy", "a", "x")
    )
    for bad in ("web", "deploy/", "/web", "a/b/c"):
        with pytest.raises(RefError, match="TYPE/NAME"):
            parse_ref(bad)


def test_a_restore_applies_no_server_set_field_and_refuses_what_it_cannot_give_back() -> None:
    doc = deployment(2)
    doc["metadata"].update(uid="u", resourceVersion="7", managedFields=[], generation=3)
    doc["status"] = {"replicas": 2}
    doc["sops"] = {"mac": "x"}
    assert restorable(doc) == deployment(2)
    assert refusal(deployment(2)) is None
    token = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token"}
    assert "token" in (refusal(token) or "")
    owned = {
        "metadata": {"ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "controller": True}]}
    }
    assert controlled_by(owned) == "ReplicaSet/rs"
    assert controlled_by(None) is None
