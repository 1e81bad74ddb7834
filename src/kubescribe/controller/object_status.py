"""The status of GitTargets and WatchRules, computed from their plan and what the manager
observed at run time (`TargetFacts`). Pure: the manager gathers the facts, this decides the
conditions, their order and the extra status fields."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubescribe.api import conditions as c
from kubescribe.controller.plan import RulePlan, TargetPlan
from kubescribe.controller.status import (
    Cond,
    documents_condition,
    kstatus,
    render_condition,
    rfc3339,
)
from kubescribe.git.records import PlacementReport, WriteReport
from kubescribe.mirror.authors import AttributionMode

UNRESOLVED_ALARM = 5  # changes in a row without an author before a target says so
# Author wiring is reported (the Authors column), but commits flow: Ready ignores it; and
# StreamsRunning counts only when a type may not be watched.
_INFORMATIVE = (c.STREAMS_RUNNING, c.AUTHORS_ATTRIBUTED)


@dataclass(frozen=True)
class TargetFacts:
    """What the manager knows of a target at run time (only `streams`, `synced` and `owner`
    matter while it is not writable)."""

    streams: int = 0
    synced: int = 0
    resumed: bool = False  # every stream resumed from a saved cursor
    streams_running: Cond | None = None
    owner: str | None = None  # the replica that writes it (with several replicas)
    reachable: Cond | None = None  # SourceClusterReachable of a remote cluster's target
    attributed: Cond | None = None
    encryption: Sequence[Cond] = ()
    encryption_status: Mapping[str, Any] = field(default_factory=dict)
    report: WriteReport | None = None
    render_check_unavailable: bool = False  # renderCheck asked for, no kustomize binary


def target_status(t: TargetPlan, facts: TargetFacts) -> tuple[list[Cond], dict[str, Any]]:
    """Conditions (domain and kstatus) and extra status fields of a GitTarget."""
    domain = _spec_conditions(t)
    progressing = None
    extra: dict[str, Any] = {"streams": facts.streams}
    if facts.owner is not None and t.writable:
        extra["owner"] = facts.owner
    if t.spec is not None and t.spec.suspend and t.problem is None:
        domain.append(Cond(c.READY, "False", c.SUSPENDED, "Writes are suspended (spec.suspend)"))
        return domain + kstatus(domain, progressing=None)[1:], extra
    if t.writable:
        # A remote cluster's reachability (its files are kept while it is away), then authors.
        domain += [cond for cond in (facts.reachable, facts.attributed) if cond is not None]
        domain += facts.encryption
        extra.update(facts.encryption_status)
        if facts.streams_running is not None:
            domain.append(facts.streams_running)
        report = facts.report
        if report is None and facts.streams and facts.resumed:
            domain.append(Cond(c.PUSHED, "True", c.PUSHED, "Resumed from the saved watch cursors"))
        elif report is None:
            progressing = "Waiting for the first write"
        else:
            domain += _report_conditions(report, facts, extra)
        if facts.synced < facts.streams:
            progressing = f"{facts.synced}/{facts.streams} watch streams synced"
    counted = [
        d
        for d in domain
        if d.type not in _INFORMATIVE
        or (d.type == c.STREAMS_RUNNING and d.reason == c.WATCH_FORBIDDEN)
    ]
    return domain + kstatus(counted, progressing=progressing), extra


def _spec_conditions(t: TargetPlan) -> list[Cond]:
    """Validated and GitPathAccepted: what the spec alone decides."""
    domain: list[Cond] = []
    if t.problem:
        domain.append(Cond(c.VALIDATED, "False", t.problem.reason, t.problem.message))
    elif t.path_problem:
        domain.append(Cond(c.VALIDATED, "False", t.path_problem.reason, t.path_problem.message))
    else:
        domain.append(Cond(c.VALIDATED, "True", c.VALIDATED, "Spec is valid"))
    if t.path_problem:
        domain.append(
            Cond(c.GIT_PATH_ACCEPTED, "False", t.path_problem.reason, t.path_problem.message)
        )
    elif t.problem is None:
        domain.append(
            Cond(c.GIT_PATH_ACCEPTED, "True", c.GIT_PATH_ACCEPTED, f"Writing to {t.folder or '.'}")
        )
    return domain


def _report_conditions(
    report: WriteReport, facts: TargetFacts, extra: dict[str, Any]
) -> list[Cond]:
    """Pushed, DocumentsWritten and RenderMatchesLive from the last write (its figures into
    `extra`)."""
    extra.update(documents=report.documents, retainedDocuments=report.retained)
    if report.commit:
        extra["lastCommit"] = report.commit
    if report.pushed_at is not None:
        extra["lastPushTime"] = rfc3339(report.pushed_at)
    if (base := report.base) is not None:
        # Every field always set: a merge patch would leave a stale one behind an omitted one.
        extra["baseBranch"] = {
            "name": base.name,
            "commit": base.commit or "",
            "observedTime": rfc3339(base.observed_at),
            "writeBranchDescends": bool(base.descends),
        }
    if report.ok:
        domain = [Cond(c.PUSHED, "True", c.PUSHED, report.message or "Up to date")]
    else:
        domain = [Cond(c.PUSHED, "False", report.reason, report.message)]
    if report.held:
        domain.append(Cond(c.DOCUMENTS_WRITTEN, "False", c.KUSTOMIZATION_MISSING, report.held))
    else:
        domain.append(documents_condition(report.failing))
    if report.kustomization is not None:
        domain.append(
            render_condition(report.kustomization, report.failing, facts.render_check_unavailable)
        )
    extra["placement"] = placement_status(report.placement)
    return domain


def placement_status(placement: PlacementReport | None) -> dict[str, Any] | None:
    """`status.placement` (None: a plain folder, the field is removed)."""
    if placement is None:
        return None
    roots = [
        {"kustomization": r.kustomization, "documents": r.documents, "kinds": list(r.kinds)}
        for r in placement.roots
    ]
    out = {"forest": placement.forest, "roots": roots, "plainDocuments": placement.plain}
    if placement.root is not None:
        out["root"] = placement.root
    inherited = {"documents": placement.inherited, "objects": list(placement.inherited_objects)}
    return {**out, "inherited": inherited}


def attribution_condition(
    t: TargetPlan, sources: Sequence[str], unresolved_streak: int
) -> Cond | None:
    """`AuthorsAttributed` of a target whose provider attributes authors, or that ignores
    changes by user or service account (else None)."""
    spec = t.provider.spec if t.provider is not None else None
    if spec is None:
        return None
    attributed = AttributionMode(spec.attribution.mode) is AttributionMode.ATTRIBUTED
    if not attributed and not t.ignore.needs_author:
        return None
    if not sources:
        return Cond(
            c.AUTHORS_ATTRIBUTED,
            "False",
            c.NO_ATTRIBUTION_SOURCE,
            (
                "attributed-author is set, but the operator has no audit receiver, change "
                "webhook or Redis: every change gets the unresolved author"
            )
            if attributed
            else (
                "spec.ignore.changesBy names users or service accounts, but the operator has "
                "no audit receiver, change webhook or Redis: no change is dropped by its user, "
                "all are recorded"
            ),
        )
    if unresolved_streak >= UNRESOLVED_ALARM:
        return Cond(
            c.AUTHORS_ATTRIBUTED,
            "False",
            c.AUTHORS_UNRESOLVED,
            f"The last {unresolved_streak} changes found no fact from {', '.join(sources)}: "
            "check that the API server reaches the audit receiver or the change webhook",
        )
    return Cond(c.AUTHORS_ATTRIBUTED, "True", c.AUTHORS_ATTRIBUTED, f"From {', '.join(sources)}")


def rule_conditions(r: RulePlan, target_writable: bool) -> list[Cond]:
    """The domain conditions of a WatchRule or ClusterWatchRule (its StreamsRunning aside)."""
    if r.problem:
        domain = [Cond(c.VALIDATED, "False", r.problem.reason, r.problem.message)]
    elif r.target and not target_writable:
        domain = [
            Cond(c.VALIDATED, "True", c.TARGET_NOT_READY, f"GitTarget {r.target} is not ready")
        ]
    else:
        domain = [Cond(c.VALIDATED, "True", c.VALIDATED, "Rules resolved")]
    if r.kind != "WatchRule":
        return domain
    if r.source_problem is not None:
        problem = r.source_problem
        domain.append(Cond(c.SOURCE_NAMESPACE_AUTHORIZED, "False", problem.reason, problem.message))
    else:
        domain.append(
            Cond(
                c.SOURCE_NAMESPACE_AUTHORIZED,
                "True",
                c.SOURCE_NAMESPACE_AUTHORIZED,
                f"Reading namespace {', '.join(r.sources) or r.key[0]}",
            )
        )
    if r.read_problem is not None:
        problem = r.read_problem
        domain.append(Cond(c.READ_AUTHORIZED, "False", problem.reason, problem.message))
    elif r.reader:
        message = f"ServiceAccount {r.reader!r} may list and watch every type the rules name"
        domain.append(Cond(c.READ_AUTHORIZED, "True", c.READ_AUTHORIZED, message))
    return domain
