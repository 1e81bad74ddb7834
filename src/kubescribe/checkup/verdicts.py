"""What `kubescribe check` concludes from what it read: one verdict per line, each failure with
its fix. Pure: the facts come in as plain dicts (API objects, parsed metrics, probe results),
so every verdict is easy to test."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime
from typing import Any, Literal

from kubescribe.api import conditions as c

Status = Literal["ok", "warn", "fail"]
Samples = Mapping[str, Sequence[tuple[Mapping[str, str], float]]]
"""Metric name -> (labels, value) of every sample, over every replica read."""

INSTALL_CRDS = "kubescribe crds | kubectl apply --server-side -f - (or helm upgrade)"
TROUBLESHOOTING = "README.md#troubleshooting-by-status-reason"


@dataclass(frozen=True)
class Verdict:
    check: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True)
class WebhookProbe:
    """A webhook endpoint as `check` saw it: the certificates it serves and its CA bundle."""

    name: str
    ca_expires: datetime | None  # the earliest notAfter in the caBundle; None: no bundle
    served_expires: datetime | None  # the endpoint's certificate; None: not reached
    error: str = ""  # why the endpoint was not reached, or did not verify against the bundle


@dataclass
class Facts:
    now: datetime
    wanted_crds: Sequence[Mapping[str, Any]]
    live_crds: Mapping[str, Mapping[str, Any] | None]
    deployments: Sequence[Mapping[str, Any]]
    leases: Sequence[Mapping[str, Any]]
    webhooks: Sequence[WebhookProbe]
    samples: Samples | None  # None: the operator's metrics could not be read
    metrics_error: str
    providers: Sequence[Mapping[str, Any]]
    targets: Sequence[Mapping[str, Any]]
    rules: Sequence[Mapping[str, Any]]
    outside_cluster: bool = False  # the operator runs as a process (--operator-url)
    version: str = ""


def verdicts(facts: Facts) -> list[Verdict]:
    return [
        *crd_verdicts(facts.wanted_crds, facts.live_crds, facts.version),
        *operator_verdicts(facts.deployments, facts.outside_cluster),
        *lease_verdicts(facts.leases, facts.now),
        *webhook_verdicts(facts.webhooks, facts.now),
        *metrics_verdicts(facts.samples, facts.metrics_error, facts.now),
        *rbac_verdicts(facts.rules),
        *object_verdicts("GitProvider", facts.providers, c.WRITABLE),
        *object_verdicts("GitTarget", facts.targets, c.READY, facts.samples, facts.now),
    ]


def failed(found: Iterable[Verdict]) -> bool:
    return any(v.status == "fail" for v in found)


# -- CRDs -------------------------------------------------------------------------------------
def crd_verdicts(
    wanted: Sequence[Mapping[str, Any]], live: Mapping[str, Mapping[str, Any] | None], version: str
) -> list[Verdict]:
    out = []
    for crd in wanted:
        name = crd["metadata"]["name"]
        have = live.get(name)
        check = f"CRD {name}"
        if have is None:
            out.append(Verdict(check, "fail", "not installed", INSTALL_CRDS))
        elif _schemas(have) != _schemas(crd):
            out.append(Verdict(check, "fail", f"differs from kubescribe {version}", INSTALL_CRDS))
        elif not _condition_true(have, "Established"):
            out.append(Verdict(check, "fail", "not Established", "kubectl describe crd " + name))
        else:
            out.append(Verdict(check, "ok", f"installed, matches kubescribe {version}"))
    return out


def _schemas(crd: Mapping[str, Any]) -> dict[str, str]:
    """Each served version's schema, in a form that ignores key order and how a number is
    written (the API server stores a default of 20.0 as 20)."""
    return {
        v["name"]: json.dumps(_numbers(v.get("schema")), sort_keys=True)
        for v in crd.get("spec", {}).get("versions", [])
        if v.get("served")
    }


def _numbers(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers(v) for v in value]
    return value


# -- the operator -----------------------------------------------------------------------------
def operator_verdicts(deployments: Sequence[Mapping[str, Any]], outside: bool) -> list[Verdict]:
    if outside:
        return [Verdict("Operator", "ok", "read from --operator-url (no Deployment checked)")]
    if not deployments:
        return [
            Verdict(
                "Operator",
                "fail",
                "no Deployment labelled app.kubernetes.io/name=kubescribe",
                "helm install kubescribe (docs/install.md), or --namespace where it runs",
            )
        ]
    out = []
    for dep in deployments:
        name = f"{dep['metadata']['namespace']}/{dep['metadata']['name']}"
        want = dep.get("spec", {}).get("replicas", 1)
        ready = dep.get("status", {}).get("readyReplicas", 0) or 0
        if ready < want:
            out.append(
                Verdict(
                    f"Deployment {name}",
                    "fail",
                    f"{ready}/{want} replicas ready",
                    f"kubectl -n {dep['metadata']['namespace']} describe deployment "
                    f"{dep['metadata']['name']}",
                )
            )
        else:
            out.append(Verdict(f"Deployment {name}", "ok", f"{ready}/{want} replicas ready"))
    return out


def lease_verdicts(leases: Sequence[Mapping[str, Any]], now: datetime) -> list[Verdict]:
    members = [x for x in leases if _label(x, "kubescribe.io/lease") == "member"]
    writers = [x for x in leases if _label(x, "kubescribe.io/lease") == "writer"]
    if not members and not writers:
        return []  # one replica without --replica-id: no Leases
    live = {h for x in members if (h := _holder(x)) and not _expired(x, now)}
    orphaned = sorted(
        x["metadata"]["name"] for x in writers if _holder(x) and _holder(x) not in live
    )
    if orphaned:
        return [
            Verdict(
                "Leases",
                "fail",
                f"{len(orphaned)} writer Lease(s) held by replicas no longer live: "
                + ", ".join(orphaned[:5]),
                "they expire on their own; if they stay, check the replicas' logs (lease.*)",
            )
        ]
    held = sum(1 for x in writers if _holder(x))
    return [Verdict("Leases", "ok", f"{len(live)} replica(s) live, {held} writer(s) held")]


def _holder(lease: Mapping[str, Any]) -> str:
    return str(lease.get("spec", {}).get("holderIdentity") or "")


def _expired(lease: Mapping[str, Any], now: datetime) -> bool:
    spec = lease.get("spec", {})
    renewed = spec.get("renewTime")
    if not renewed:
        return True
    at = datetime.fromisoformat(str(renewed).replace("Z", "+00:00"))
    return (now - at).total_seconds() > float(spec.get("leaseDurationSeconds") or 0)


# -- webhooks -----------------------------------------------------------------------------------
def webhook_verdicts(probes: Sequence[WebhookProbe], now: datetime) -> list[Verdict]:
    out = []
    for p in probes:
        check = f"Webhook {p.name}"
        renew = "renew the webhook certificates (docs/attribution.md, certificates)"
        if p.ca_expires is None:
            out.append(Verdict(check, "fail", "no CA bundle", renew))
        elif p.ca_expires <= now:
            out.append(
                Verdict(check, "fail", f"CA certificate expired {_ago(p.ca_expires, now)}", renew)
            )
        elif p.error:
            out.append(Verdict(check, "fail", p.error, "kubectl logs of the operator; " + renew))
        elif p.served_expires is not None and p.served_expires <= now:
            detail = f"serving certificate expired {_ago(p.served_expires, now)}"
            out.append(Verdict(check, "fail", detail, renew))
        else:
            until = min(x for x in (p.ca_expires, p.served_expires) if x is not None)
            out.append(Verdict(check, "ok", f"answers; certificates valid until {until:%Y-%m-%d}"))
    return out


# -- from the operator's metrics ---------------------------------------------------------------
def metrics_verdicts(samples: Samples | None, error: str, now: datetime) -> list[Verdict]:
    if samples is None:
        return [Verdict("Metrics", "fail", f"cannot read the operator's metrics: {error}", "")]
    out = []
    audit = samples.get("kubescribe_audit_last_event_timestamp_seconds", [])
    if not audit:
        out.append(
            Verdict(
                "Audit",
                "warn",
                "no audit receiver: authors come from the change webhook, or stay unresolved",
                "docs/attribution.md",
            )
        )
    else:
        last = max(value for _, value in audit)
        if last <= 0:
            out.append(
                Verdict(
                    "Audit",
                    "fail",
                    "audit not wired: the receiver listens but no audit event arrived",
                    "point the API server's --audit-webhook-config-file at the operator "
                    "(docs/attribution.md)",
                )
            )
        else:
            age = now.timestamp() - last
            out.append(Verdict("Audit", "ok", f"last audit event {age:.0f} s ago"))
    redis = samples.get("kubescribe_redis_up", [])
    if redis:
        down = sorted({labels.get("store", "") for labels, value in redis if value < 1})
        if down:
            out.append(
                Verdict(
                    "Redis",
                    "fail",
                    "unreachable (" + ", ".join(down) + "); facts and cursors stay local",
                    "check --redis-url and the Redis Service; docs/ha.md",
                )
            )
        else:
            out.append(Verdict("Redis", "ok", "reachable"))
    return out


def rbac_verdicts(rules: Sequence[Mapping[str, Any]]) -> list[Verdict]:
    forbidden = [
        (f"{_where(r)}", cond.get("message", ""))
        for r in rules
        for cond in r.get("status", {}).get("conditions", [])
        if cond.get("type") == c.STREAMS_RUNNING and cond.get("reason") == c.WATCH_FORBIDDEN
    ]
    if not forbidden:
        return [Verdict("RBAC", "ok", "the operator may list and watch every selected type")]
    return [
        Verdict(
            f"RBAC {where}",
            "fail",
            message,
            "grant it: the chart's rbac.resources / rbac.extraApiGroups, then helm upgrade",
        )
        for where, message in forbidden
    ]


def object_verdicts(
    kind: str,
    objects: Sequence[Mapping[str, Any]],
    wanted: str,
    samples: Samples | None = None,
    now: datetime | None = None,
) -> list[Verdict]:
    out = []
    for obj in objects:
        check = f"{kind} {_where(obj)}"
        cond = next(
            (x for x in obj.get("status", {}).get("conditions", []) if x.get("type") == wanted),
            None,
        )
        if cond is None:
            out.append(
                Verdict(check, "fail", f"no {wanted} condition yet", "is the operator running?")
            )
        elif cond.get("status") != "True":
            detail = (
                f"{wanted}={cond.get('status')} {cond.get('reason', '')}: {cond.get('message', '')}"
            )
            out.append(
                Verdict(check, "fail", detail, f"{TROUBLESHOOTING} ({cond.get('reason', '')})")
            )
        else:
            out.append(Verdict(check, "ok", _freshness(obj, samples, now) or wanted))
    return out


def _freshness(obj: Mapping[str, Any], samples: Samples | None, now: datetime | None) -> str:
    status = obj.get("status", {})
    parts = []
    pushed = status.get("lastPushTime")
    if pushed and now is not None:
        at = datetime.fromisoformat(str(pushed).replace("Z", "+00:00"))
        parts.append(f"last push {_ago(at, now)}")
    if samples is not None:
        key = _where(obj)
        ages = [
            value
            for labels, value in samples.get("kubescribe_target_oldest_pending_change_seconds", [])
            if labels.get("target") == key
        ]
        if any(age > 0 for age in ages):
            parts.append(f"oldest pending change {max(ages):.0f} s old")
        elif ages:
            parts.append("nothing pending")
    return "Ready; " + ", ".join(parts) if parts else ""


def _where(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else str(meta.get("name"))


def _label(obj: Mapping[str, Any], key: str) -> str:
    return str(obj.get("metadata", {}).get("labels", {}).get(key, ""))


def _condition_true(obj: Mapping[str, Any], kind: str) -> bool:
    return any(
        x.get("type") == kind and x.get("status") == "True"
        for x in obj.get("status", {}).get("conditions", [])
    )


def _ago(at: datetime, now: datetime) -> str:
    seconds = (now - at).total_seconds()
    if seconds < 0:
        return f"in {-seconds:.0f} s"
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.0f} h ago"


# -- output -----------------------------------------------------------------------------------
def table(found: Sequence[Verdict]) -> str:
    """A fixed-width table, failures with their fix on the line below."""
    width = max((len(v.check) for v in found), default=5)
    lines = [f"{'CHECK'.ljust(width)}  RESULT  DETAIL"]
    for v in found:
        lines.append(f"{v.check.ljust(width)}  {v.status.upper().ljust(6)}  {v.detail}")
        if v.status != "ok" and v.fix:
            lines.append(f"{''.ljust(width)}          fix: {v.fix}")
    return "\n".join(lines)


def as_json(found: Sequence[Verdict]) -> str:
    return json.dumps(
        {"ok": not failed(found), "checks": [asdict(v) for v in found]}, indent=2, sort_keys=True
    )
