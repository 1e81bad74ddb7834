"""`kubescribe.io/reconcile-at`: each new value is acted on once, per kind and object."""

from __future__ import annotations

from typing import Any

from kubescribe.controller.reconcile_requests import ANNOTATION, ReconcileRequests, requested
from kubescribe.mirror.changes import TargetKey


def annotated(value: object) -> dict[str, Any]:
    return {"metadata": {"annotations": {ANNOTATION: value}}}


def test_a_new_value_is_acted_on_once_and_reported() -> None:
    requests = ReconcileRequests()
    probed: list[tuple[str, str]] = []
    providers = {("ns", "git"): annotated("t1")}
    targets = {("ns", "mirror"): annotated("t1"), ("ns", "quiet"): {"metadata": {}}}
    assert requests.take(providers, targets, probed.append) == [TargetKey("ns", "mirror")]
    assert probed == [("ns", "git")]
    assert requests.take(providers, targets, probed.append) == []  # the same value: done
    assert probed == [("ns", "git")]
    assert requests.status("GitTarget", ("ns", "mirror")) == {"lastHandledReconcileAt": "t1"}
    assert requests.status("GitTarget", ("ns", "quiet")) == {}
    targets[("ns", "mirror")] = annotated("t2")
    assert requests.take({}, targets, probed.append) == [TargetKey("ns", "mirror")]


def test_only_a_bounded_string_is_a_request() -> None:
    assert requested(annotated("2026-12-03T13:00:00Z")) == "2026-12-03T13:00:00Z"
    for value in ("", 7, None, "x" * 257, ["now"]):
        assert requested(annotated(value)) == ""
    assert requested({}) == ""
    assert requested({"metadata": {"annotations": None}}) == ""


def test_the_operators_own_request_lists_a_target_once_without_a_status() -> None:
    requests = ReconcileRequests()
    held = TargetKey("ns", "mirror")
    requests.again(held)
    requests.again(held)
    targets = {("ns", "mirror"): annotated("t1")}
    assert requests.take({}, targets, lambda _: None) == [held]  # once, with the annotation's
    assert requests.take({}, targets, lambda _: None) == []
    assert requests.status("GitTarget", ("ns", "mirror")) == {"lastHandledReconcileAt": "t1"}
    requests.again(held)
    assert requests.take({}, {}, lambda _: None) == [held]
