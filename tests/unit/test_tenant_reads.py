"""The WatchRule permission model (`--tenant-service-account`): a rule mirrors only what its
namespace's ServiceAccount may read, as the plan compiler decides it from the answers given."""

from __future__ import annotations

from kubescribe.api import conditions as c
from kubescribe.controller.desired import compile_plan
from kubescribe.controller.object_status import rule_conditions
from kubescribe.controller.plan import Plan, ReadQuestion, TenantReads
from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY
from tests.unit.test_desired import TYPES, obj, provider, target

CMS = ReadQuestion("ns", "ns", "", "configmaps")
DEPLOYS = ReadQuestion("ns", "ns", "apps", "deployments")
SOURCE_CMS = ReadQuestion("ns", "src", "", "configmaps")


def plan_with(reads: TenantReads | None) -> Plan:
    rules = obj(
        "WatchRule",
        "r",
        {
            "targetRef": {"name": "t"},
            "rules": [
                {"apiGroups": ["", "apps"], "resources": ["configmaps", "deployments"]},
                {"apiGroups": [""], "resources": ["configmaps"], "sourceNamespace": "src"},
            ],
        },
    )
    return compile_plan(
        [provider()],
        [target("t", "a")],
        [rules],
        [],
        TYPES,
        DEFAULT_NOISE_POLICY,
        grants={"src": frozenset({"ns"})},
        reads=reads,
    )


def streams(plan: Plan) -> set[tuple[str, str]]:
    return {(s.namespace, s.rtype.resource) for s in plan.streams.values()}


def test_without_the_flag_nothing_is_asked_and_every_type_is_read() -> None:
    plan = plan_with(None)
    assert plan.read_questions == set()
    assert streams(plan) == {("ns", "configmaps"), ("ns", "deployments"), ("src", "configmaps")}
    r = plan.rules[("WatchRule", ("ns", "r"))]
    assert c.READ_AUTHORIZED not in {d.type for d in rule_conditions(r, target_writable=True)}


def test_a_type_the_service_account_may_not_read_is_not_mirrored_and_named() -> None:
    plan = plan_with(TenantReads("reader", {CMS: True, DEPLOYS: False, SOURCE_CMS: True}))
    assert plan.read_questions == {CMS, DEPLOYS, SOURCE_CMS}
    assert streams(plan) == {("ns", "configmaps"), ("src", "configmaps")}
    r = plan.rules[("WatchRule", ("ns", "r"))]
    assert r.problem is None  # what it may read keeps flowing
    [cond] = [d for d in rule_conditions(r, target_writable=True) if d.type == c.READ_AUTHORIZED]
    assert (cond.status, cond.reason) == ("False", c.RULE_NOT_AUTHORIZED)
    assert cond.message == (
        "ServiceAccount 'reader' of namespace 'ns' may not list and watch apps/v1/deployments "
        "in namespace 'ns': not mirrored"
    )


def test_the_source_namespace_is_asked_about_and_an_unanswered_question_is_refused() -> None:
    plan = plan_with(TenantReads("reader", {CMS: True, DEPLOYS: True}))
    assert streams(plan) == {("ns", "configmaps"), ("ns", "deployments")}
    problem = plan.rules[("WatchRule", ("ns", "r"))].read_problem
    assert problem is not None
    assert "core/v1/configmaps in namespace 'src' could not be checked yet" in problem.message


def test_every_type_allowed_reads_authorized() -> None:
    plan = plan_with(TenantReads("reader", dict.fromkeys((CMS, DEPLOYS, SOURCE_CMS), True)))
    r = plan.rules[("WatchRule", ("ns", "r"))]
    [cond] = [d for d in rule_conditions(r, target_writable=True) if d.type == c.READ_AUTHORIZED]
    assert (cond.status, cond.reason) == ("True", c.READ_AUTHORIZED)
    assert len(plan.streams) == 3


def test_several_refused_types_are_counted_once_each() -> None:
    plan = plan_with(TenantReads("reader", {CMS: False, DEPLOYS: False, SOURCE_CMS: True}))
    problem = plan.rules[("WatchRule", ("ns", "r"))].read_problem
    assert problem is not None
    assert problem.message.endswith(
        "core/v1/configmaps in namespace 'ns' (and 1 more): not mirrored"
    )
    assert streams(plan) == {("src", "configmaps")}
