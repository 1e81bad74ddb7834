"""GitTarget and WatchRule status from the plan and run-time facts (controller/object_status):
which conditions, in which order, which reason decides Ready, and the extra status fields."""

from __future__ import annotations

from typing import Any

from kubescribe.api import conditions as c
from kubescribe.controller.desired import compile_plan
from kubescribe.controller.object_status import (
    UNRESOLVED_ALARM,
    TargetFacts,
    attribution_condition,
    rule_conditions,
    target_status,
)
from kubescribe.controller.plan import Plan
from kubescribe.controller.status import Cond, _comparable, build_status
from kubescribe.git.records import PlacementReport, Refusal, RootReport, WriteReport
from kubescribe.kube.discovery import Discovered
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY
from tests.manifests import CM_RULE, provider, target, watch_rule

TYPES = [Discovered(ResourceType("", "v1", "configmaps", "ConfigMap", True), True)]
KEY = TargetKey("ns", "t")
RUNNING = Cond(c.STREAMS_RUNNING, "True", c.STREAMS_RUNNING, "1/1 watch streams synced")
URL = "https://git.example/r.git"


def plan(target_spec: dict[str, Any] | None = None, **provider_spec: Any) -> Plan:
    return compile_plan(
        [provider("git", "ns", URL, **provider_spec)],
        [target("t", "ns", "git", "mirror", **(target_spec or {}))],
        [watch_rule("r", "ns", "t", CM_RULE)],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
    )


def report(ok: bool = True, reason: str = c.PUSHED, **kw: Any) -> WriteReport:
    fields: dict[str, Any] = {
        "commit": "0123456789abcdef",
        "pushed_at": 1_700_000_000.0,
        "documents": 3,
        "retained": 1,
    }
    message = "Up to date" if ok else "no route"
    return WriteReport(target=KEY, ok=ok, reason=reason, message=message, **{**fields, **kw})


def table(conds: list[Cond]) -> dict[str, tuple[str, str]]:
    return {d.type: (d.status, d.reason) for d in conds}


def test_a_pushed_target_is_ready_with_its_last_commit() -> None:
    facts = TargetFacts(streams=1, synced=1, streams_running=RUNNING, report=report())
    conds, extra = target_status(plan().targets[KEY], facts)
    assert [d.type for d in conds] == [
        c.VALIDATED,
        c.GIT_PATH_ACCEPTED,
        c.STREAMS_RUNNING,
        c.PUSHED,
        c.DOCUMENTS_WRITTEN,
        c.READY,
        c.STALLED,
        c.RECONCILING,
    ]
    assert table(conds)[c.READY] == ("True", c.READY)
    assert extra == {
        "streams": 1,
        "documents": 3,
        "retainedDocuments": 1,
        "lastCommit": "0123456789abcdef",
        "lastPushTime": "2023-11-14T22:13:20Z",
        "placement": None,  # a plain folder: the field is removed
    }


def test_before_the_first_write_it_is_progressing_unless_resumed_from_cursors() -> None:
    t = plan().targets[KEY]
    conds, _ = target_status(t, TargetFacts(streams=2, synced=2, streams_running=RUNNING))
    assert table(conds)[c.READY] == ("Unknown", c.PROGRESSING)
    assert next(d for d in conds if d.type == c.READY).message == "Waiting for the first write"

    resumed = TargetFacts(streams=2, synced=2, resumed=True, streams_running=RUNNING)
    conds, _ = target_status(t, resumed)
    assert table(conds)[c.PUSHED] == ("True", c.PUSHED)
    assert table(conds)[c.READY] == ("True", c.READY)


def test_unsynced_streams_keep_it_progressing_after_a_push() -> None:
    facts = TargetFacts(streams=2, synced=1, streams_running=RUNNING, report=report())
    conds, _ = target_status(plan().targets[KEY], facts)
    ready = next(d for d in conds if d.type == c.READY)
    assert (ready.status, ready.reason, ready.message) == (
        "Unknown",
        c.PROGRESSING,
        "1/2 watch streams synced",
    )


def test_a_failed_push_decides_ready_and_reconciles() -> None:
    facts = TargetFacts(streams=1, synced=1, streams_running=RUNNING)
    failed = TargetFacts(**{**facts.__dict__, "report": report(False, c.REMOTE_UNREACHABLE)})
    conds, _ = target_status(plan().targets[KEY], failed)
    assert table(conds)[c.PUSHED] == ("False", c.REMOTE_UNREACHABLE)
    assert table(conds)[c.READY] == ("False", c.REMOTE_UNREACHABLE)
    assert table(conds)[c.RECONCILING] == ("True", c.REMOTE_UNREACHABLE)
    assert table(conds)[c.STALLED] == ("False", c.OK)


def test_refused_documents_stall_the_target_but_not_the_push() -> None:
    refused = [Refusal(Identity("", "Secret", "ns", "db"), c.ENCRYPTION_MISSING, "no recipient")]
    facts = TargetFacts(
        streams=1, synced=1, streams_running=RUNNING, report=report(failing=refused)
    )
    conds, _ = target_status(plan().targets[KEY], facts)
    assert table(conds)[c.PUSHED] == ("True", c.PUSHED)
    assert table(conds)[c.DOCUMENTS_WRITTEN] == ("False", c.ENCRYPTION_MISSING)
    assert table(conds)[c.STALLED] == ("True", c.ENCRYPTION_MISSING)


def test_a_render_check_that_cannot_run_is_unknown_and_does_not_decide_ready() -> None:
    t = plan({"kustomize": {"renderCheck": True}}).targets[KEY]
    written = report(kustomization="mirror/kustomization.yaml")
    missing = TargetFacts(streams=1, synced=1, report=written, render_check_unavailable=True)
    conds, _ = target_status(t, missing)
    render = next(d for d in conds if d.type == c.RENDER_MATCHES_LIVE)
    assert (render.status, render.reason) == ("Unknown", c.RENDER_CHECK_UNAVAILABLE)
    assert "no kustomize binary" in render.message
    assert "--kustomize" in render.message
    assert table(conds)[c.READY] == ("True", c.READY)  # the mirror is not blocked by it
    conds, _ = target_status(t, TargetFacts(streams=1, synced=1, report=written))
    assert table(conds)[c.RENDER_MATCHES_LIVE] == ("True", c.RENDER_MATCHES_LIVE)
    # A known difference stays False: the check's absence does not hide it.
    web = Identity("apps", "Deployment", "ns", "web")
    known = report(
        kustomization="mirror/kustomization.yaml",
        failing=[Refusal(web, c.KUSTOMIZE_UNSUPPORTED, "a patch targets it")],
    )
    conds, _ = target_status(t, TargetFacts(report=known, render_check_unavailable=True))
    assert table(conds)[c.RENDER_MATCHES_LIVE] == ("False", c.KUSTOMIZE_UNSUPPORTED)


def test_author_wiring_and_running_streams_never_decide_ready() -> None:
    unresolved = Cond(c.AUTHORS_ATTRIBUTED, "False", c.AUTHORS_UNRESOLVED, "no fact")
    slow = Cond(c.STREAMS_RUNNING, "False", c.PROGRESSING, "0/1 watch streams synced")
    facts = TargetFacts(
        streams=1, synced=1, streams_running=slow, attributed=unresolved, report=report()
    )
    conds, _ = target_status(plan().targets[KEY], facts)
    assert table(conds)[c.READY] == ("True", c.READY)

    forbidden = Cond(c.STREAMS_RUNNING, "False", c.WATCH_FORBIDDEN, "may not watch secrets")
    facts = TargetFacts(streams=1, synced=1, streams_running=forbidden, report=report())
    conds, _ = target_status(plan().targets[KEY], facts)
    assert table(conds)[c.READY] == ("False", c.WATCH_FORBIDDEN)
    assert table(conds)[c.STALLED] == ("True", c.WATCH_FORBIDDEN)


def test_run_time_conditions_come_in_a_fixed_order_after_the_spec() -> None:
    away = Cond(c.SOURCE_CLUSTER_REACHABLE, "False", c.CLUSTER_UNREACHABLE, "timeout")
    authors = Cond(c.AUTHORS_ATTRIBUTED, "True", c.AUTHORS_ATTRIBUTED, "From audit")
    encryption = Cond(c.ENCRYPTION_CONFIGURED, "True", c.ENCRYPTION_CONFIGURED, "1 recipient")
    facts = TargetFacts(
        streams=1,
        synced=1,
        streams_running=RUNNING,
        owner="replica-a",
        reachable=away,
        attributed=authors,
        encryption=[encryption],
        encryption_status={"encryption": {"recipients": ["age1x"]}},
    )
    conds, extra = target_status(plan().targets[KEY], facts)
    assert [d.type for d in conds][:6] == [
        c.VALIDATED,
        c.GIT_PATH_ACCEPTED,
        c.SOURCE_CLUSTER_REACHABLE,
        c.AUTHORS_ATTRIBUTED,
        c.ENCRYPTION_CONFIGURED,
        c.STREAMS_RUNNING,
    ]
    assert table(conds)[c.READY] == ("False", c.CLUSTER_UNREACHABLE)
    assert extra == {"streams": 1, "owner": "replica-a", "encryption": {"recipients": ["age1x"]}}


def test_a_suspended_target_says_so_and_ignores_run_time_facts() -> None:
    facts = TargetFacts(streams=1, synced=0, owner="replica-a", report=report(False))
    conds, extra = target_status(plan({"suspend": True}).targets[KEY], facts)
    assert [(d.type, d.status, d.reason) for d in conds][:4] == [
        (c.VALIDATED, "True", c.VALIDATED),
        (c.GIT_PATH_ACCEPTED, "True", c.GIT_PATH_ACCEPTED),
        (c.READY, "False", c.SUSPENDED),
        (c.STALLED, "False", c.OK),
    ]
    assert [d.type for d in conds][4:] == [c.RECONCILING]
    assert extra == {"streams": 1}  # no owner: nobody writes it


def test_an_invalid_target_is_stalled_on_its_problem() -> None:
    t = plan({"branch": "release"}, allowedBranches=["main"]).targets[KEY]
    conds, extra = target_status(t, TargetFacts(owner="replica-a", report=report()))
    assert table(conds) == {
        c.VALIDATED: ("False", c.BRANCH_NOT_ALLOWED),
        c.READY: ("False", c.BRANCH_NOT_ALLOWED),
        c.STALLED: ("True", c.BRANCH_NOT_ALLOWED),
        c.RECONCILING: ("False", c.OK),
    }
    assert extra == {"streams": 0}


def test_attribution_condition_by_sources_and_unresolved_streak() -> None:
    configured = plan().targets[KEY]
    assert attribution_condition(configured, ["audit"], 0) is None
    attributed = plan(attribution={"mode": "attributed-author"}).targets[KEY]
    assert attribution_condition(attributed, [], 0) == Cond(
        c.AUTHORS_ATTRIBUTED,
        "False",
        c.NO_ATTRIBUTION_SOURCE,
        "attributed-author is set, but the operator has no audit receiver, change webhook or "
        "Redis: every change gets the unresolved author",
    )
    ok = attribution_condition(attributed, ["audit", "admission"], UNRESOLVED_ALARM - 1)
    assert ok == Cond(c.AUTHORS_ATTRIBUTED, "True", c.AUTHORS_ATTRIBUTED, "From audit, admission")
    alarm = attribution_condition(attributed, ["audit"], UNRESOLVED_ALARM)
    assert alarm is not None
    assert (alarm.status, alarm.reason) == ("False", c.AUTHORS_UNRESOLVED)


def test_ignoring_users_reports_whether_authors_can_be_known() -> None:
    by_manager = plan({"ignore": {"changesBy": {"fieldManagers": ["kustomize-controller"]}}})
    assert attribution_condition(by_manager.targets[KEY], [], 0) is None  # no author needed
    by_account = plan({"ignore": {"changesBy": {"serviceAccounts": ["flux-system/*"]}}})
    missing = attribution_condition(by_account.targets[KEY], [], 0)
    assert missing is not None
    assert (missing.status, missing.reason) == ("False", c.NO_ATTRIBUTION_SOURCE)
    assert "no change is dropped by its user, all are recorded" in missing.message
    ok = attribution_condition(by_account.targets[KEY], ["audit"], 0)
    assert ok == Cond(c.AUTHORS_ATTRIBUTED, "True", c.AUTHORS_ATTRIBUTED, "From audit")


def test_an_ignore_entry_that_can_never_match_is_a_validated_reason() -> None:
    bad = plan({"ignore": {"changesBy": {"serviceAccounts": ["kustomize-controller"]}}})
    t = bad.targets[KEY]
    assert not t.writable
    conds, _ = target_status(t, TargetFacts())
    assert table(conds)[c.VALIDATED] == ("False", c.INVALID_IGNORE)
    assert table(conds)[c.STALLED] == ("True", c.INVALID_IGNORE)
    message = next(d.message for d in conds if d.type == c.VALIDATED)
    assert message.startswith("spec.ignore.changesBy.serviceAccounts[0]: 'kustomize-controller'")


def test_rule_conditions_follow_the_rule_and_its_target() -> None:
    p = plan()
    r = p.rules[("WatchRule", ("ns", "r"))]
    assert table(rule_conditions(r, target_writable=True)) == {
        c.VALIDATED: ("True", c.VALIDATED),
        c.SOURCE_NAMESPACE_AUTHORIZED: ("True", c.SOURCE_NAMESPACE_AUTHORIZED),
    }
    assert table(rule_conditions(r, target_writable=False))[c.VALIDATED] == (
        "True",
        c.TARGET_NOT_READY,
    )


def test_placement_is_reported_for_a_kustomized_folder_and_removed_for_a_plain_one() -> None:
    t = plan().targets[KEY]
    roots = (RootReport("apps/web/kustomization.yaml", 2, ("ConfigMap", "Deployment.apps")),)
    written = report(
        kustomization="mirror/apps/web/kustomization.yaml",
        placement=PlacementReport(forest=True, roots=roots, plain=1),
    )
    _, extra = target_status(t, TargetFacts(streams=1, synced=1, report=written))
    assert extra["placement"] == {
        "forest": True,
        "roots": [
            {
                "kustomization": "apps/web/kustomization.yaml",
                "documents": 2,
                "kinds": ["ConfigMap", "Deployment.apps"],
            }
        ],
        "plainDocuments": 1,
        "inherited": {"documents": 0, "objects": []},
    }
    overlay = PlacementReport(
        forest=False,
        roots=(),
        plain=0,
        root="overlays/prod/kustomization.yaml",
        inherited=70,
        inherited_objects=("ConfigMap ns/settings",),
    )
    _, extra = target_status(t, TargetFacts(streams=1, synced=1, report=report(placement=overlay)))
    assert extra["placement"] == {
        "forest": False,
        "roots": [],
        "plainDocuments": 0,
        "root": "overlays/prod/kustomization.yaml",
        "inherited": {"documents": 70, "objects": ["ConfigMap ns/settings"]},
    }
    _, extra = target_status(t, TargetFacts(streams=1, synced=1, report=report()))
    assert extra["placement"] is None  # a merge patch removes it
    # and a status without the field is the same as one that removes it: nothing to patch
    assert build_status({}, [], 1, {"placement": None}) == {
        "placement": None,
        "observedGeneration": 1,
        "conditions": [],
    }
    assert _comparable({"placement": None, "conditions": []}) == _comparable({"conditions": []})
