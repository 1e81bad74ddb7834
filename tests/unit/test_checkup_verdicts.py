"""`kubescribe check` verdicts from plain facts: each fault gives its own failing line."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from kubescribe.api.crds import crd_manifests
from kubescribe.checkup.verdicts import (
    Facts,
    Verdict,
    WebhookProbe,
    as_json,
    crd_verdicts,
    failed,
    lease_verdicts,
    metrics_verdicts,
    object_verdicts,
    operator_verdicts,
    rbac_verdicts,
    table,
    verdicts,
    webhook_verdicts,
)

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(days=300)


def established(crd: dict[str, Any]) -> dict[str, Any]:
    return {**crd, "status": {"conditions": [{"type": "Established", "status": "True"}]}}


def obj(kind_ns: str, name: str, *conditions: dict[str, str], **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"namespace": kind_ns, "name": name},
        "status": {"conditions": list(conditions), **status},
    }


def cond(kind: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, str]:
    return {"type": kind, "status": status, "reason": reason or kind, "message": message}


def lease(
    name: str, kind: str, holder: str, renewed: datetime, duration: int = 10
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubescribe.io/lease": kind}},
        "spec": {
            "holderIdentity": holder,
            "renewTime": renewed.isoformat().replace("+00:00", "Z"),
            "leaseDurationSeconds": duration,
        },
    }


def healthy() -> Facts:
    wanted = crd_manifests()
    return Facts(
        now=NOW,
        wanted_crds=wanted,
        live_crds={c["metadata"]["name"]: established(c) for c in wanted},
        deployments=[
            {
                "metadata": {"namespace": "ks", "name": "kubescribe"},
                "spec": {"replicas": 2},
                "status": {"readyReplicas": 2},
            }
        ],
        leases=[
            lease("m-a", "member", "a", NOW),
            lease("m-b", "member", "b", NOW),
            lease("w-1", "writer", "a", NOW),
        ],
        webhooks=[WebhookProbe("changes.kubescribe.io", LATER, LATER)],
        samples={
            "kubescribe_audit_last_event_timestamp_seconds": [
                ({"route": "local"}, NOW.timestamp() - 4)
            ],
            "kubescribe_redis_up": [({"store": "facts"}, 1.0)],
        },
        metrics_error="",
        providers=[obj("team", "git", cond("Writable"))],
        targets=[obj("team", "mirror", cond("Ready"), lastPushTime="2026-12-03T11:59:00Z")],
        rules=[obj("team", "cms", cond("StreamsRunning"))],
        version="0.2.0",
    )


def test_a_healthy_install_passes_every_check() -> None:
    found = verdicts(healthy())
    assert not failed(found), table(found)
    assert {v.status for v in found} == {"ok"}
    assert any("last audit event 4 s ago" in v.detail for v in found)
    assert any("last push 60 s ago" in v.detail for v in found)


def test_a_missing_or_stale_crd_is_named_with_the_fix() -> None:
    wanted = crd_manifests()
    name = wanted[0]["metadata"]["name"]
    stale = established(json.loads(json.dumps(wanted[1])))
    stale["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["description"] = "older"
    live: dict[str, dict[str, Any] | None] = {c["metadata"]["name"]: established(c) for c in wanted}
    live[name] = None
    live[wanted[1]["metadata"]["name"]] = stale
    found = {v.check: v for v in crd_verdicts(wanted, live, "0.2.0")}
    assert found[f"CRD {name}"].status == "fail"
    assert found[f"CRD {name}"].detail == "not installed"
    assert "kubescribe crds" in found[f"CRD {name}"].fix
    assert found[f"CRD {wanted[1]['metadata']['name']}"].detail == "differs from kubescribe 0.2.0"


def test_a_number_stored_as_an_integer_still_matches() -> None:
    wanted = [
        {
            "metadata": {"name": "x"},
            "spec": {"versions": [{"name": "v1", "served": True, "schema": {"default": 20.0}}]},
        }
    ]
    live = established(json.loads(json.dumps(wanted[0]).replace("20.0", "20")))
    [v] = crd_verdicts(wanted, {"x": live}, "0.2.0")
    assert v.status == "ok"


def test_the_operator_deployment_must_be_found_and_ready() -> None:
    [missing] = operator_verdicts([], outside=False)
    assert missing.status == "fail"
    assert "no Deployment" in missing.detail
    dep = {"metadata": {"namespace": "ks", "name": "k"}, "spec": {"replicas": 3}, "status": {}}
    [short] = operator_verdicts([dep], outside=False)
    assert (short.status, short.detail) == ("fail", "0/3 replicas ready")
    [outside] = operator_verdicts([], outside=True)
    assert outside.status == "ok"


def test_a_writer_lease_held_by_a_replica_that_is_gone_fails() -> None:
    leases = [
        lease("m-a", "member", "a", NOW),
        lease("m-b", "member", "b", NOW - timedelta(seconds=60)),  # expired
        lease("w-1", "writer", "b", NOW),
    ]
    [v] = lease_verdicts(leases, NOW)
    assert v.status == "fail"
    assert "w-1" in v.detail
    assert lease_verdicts([], NOW) == []


def test_webhook_certificates_and_endpoints() -> None:
    expired = NOW - timedelta(hours=3)
    found = webhook_verdicts(
        [
            WebhookProbe("ca-expired", expired, LATER),
            WebhookProbe("served-expired", LATER, expired),
            WebhookProbe("down", LATER, None, "endpoint not answering at 127.0.0.1:1: refused"),
            WebhookProbe("no-bundle", None, None),
        ],
        NOW,
    )
    details = {v.check: (v.status, v.detail) for v in found}
    assert details["Webhook ca-expired"] == ("fail", "CA certificate expired 3 h ago")
    assert details["Webhook served-expired"] == ("fail", "serving certificate expired 3 h ago")
    assert details["Webhook down"][1].startswith("endpoint not answering")
    assert details["Webhook no-bundle"] == ("fail", "no CA bundle")


def test_audit_not_wired_redis_down_and_unreadable_metrics() -> None:
    samples = {
        "kubescribe_audit_last_event_timestamp_seconds": [({"route": "local"}, 0.0)],
        "kubescribe_redis_up": [({"store": "facts"}, 0.0)],
    }
    found = {v.check: v for v in metrics_verdicts(samples, "", NOW)}
    assert found["Audit"].status == "fail"
    assert found["Audit"].detail.startswith("audit not wired")
    assert (found["Redis"].status, found["Redis"].detail) == (
        "fail",
        "unreachable (facts); facts and cursors stay local",
    )
    [unread] = metrics_verdicts(None, "no running operator Pod", NOW)
    assert unread.status == "fail"
    assert "no running operator Pod" in unread.detail
    quiet = {v.check: v for v in metrics_verdicts({}, "", NOW)}
    assert quiet["Audit"].status == "warn"
    assert "Redis" not in quiet


def test_rbac_and_object_conditions_name_the_fault() -> None:
    forbidden = cond("StreamsRunning", "False", "WatchForbidden", "core/v1/services in team")
    [v] = rbac_verdicts([obj("team", "svcs", forbidden)])
    assert (v.check, v.status, v.detail) == ("RBAC team/svcs", "fail", "core/v1/services in team")
    blocked = cond("Writable", "False", "PushDenied", "push denied: read-only")
    [p] = object_verdicts("GitProvider", [obj("team", "git", blocked)], "Writable")
    assert p.status == "fail"
    assert p.detail == "Writable=False PushDenied: push denied: read-only"
    assert "PushDenied" in p.fix


def test_table_and_json_output() -> None:
    found = [Verdict("A", "ok", "fine"), Verdict("Longer check", "fail", "broken", "do this")]
    text = table(found)
    assert text.splitlines()[2].startswith("Longer check  FAIL    broken")
    assert "fix: do this" in text.splitlines()[3]
    doc = json.loads(as_json(found))
    assert doc["ok"] is False
    assert doc["checks"][1]["fix"] == "do this"
