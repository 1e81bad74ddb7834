"""From the kubescribe objects in the cluster and discovery to what should run (pure).

`compile_plan` decides, for every GitProvider, GitTarget and (Cluster)WatchRule, whether it is
valid and why not, and which watch streams feed which target. It does no I/O, so every status
reason is easy to test. It never raises for a spec value: each object is evaluated on its own,
and one whose evaluation fails in an unforeseen way is `SpecNotEvaluated` (and listed in
`Plan.failures`), while the rest of the plan goes on.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple, TypeVar

from pydantic import ValidationError

from kubescribe.api import conditions as c
from kubescribe.api.models import (
    ClusterProviderSpec,
    ClusterResourceRule,
    ClusterWatchRuleSpec,
    GitProviderSpec,
    GitTargetSpec,
    WatchRuleSpec,
)
from kubescribe.controller.streams import StreamSpec, merge_operations
from kubescribe.git.urlpolicy import UrlRefused, check_url
from kubescribe.kube.discovery import Discovered
from kubescribe.mirror import messages
from kubescribe.mirror.changes import PruneMode, TargetKey
from kubescribe.mirror.ignore import NO_IGNORE, IgnoreRule, InvalidIgnore
from kubescribe.mirror.layout import (
    DEFAULT_TEMPLATE,
    LOCAL_CLUSTER,
    Layout,
    LayoutError,
    normalize_target_path,
)
from kubescribe.mirror.layout import paths_overlap as overlap
from kubescribe.mirror.noise import NoisePolicy
from kubescribe.mirror.owned import FULL, Content, KeepField
from kubescribe.mirror.window import parse_duration
from kubescribe.net.urls import normalize

T = TypeVar("T")
ObjKey = tuple[str, str]  # (namespace, name); namespace '' for cluster-scoped objects


Contribution = list[tuple[StreamSpec, list[str]]]  # a rule's streams, with their operations


class WorkerKey(NamedTuple):
    namespace: str
    url: str  # normalized
    branch: str


@dataclass(frozen=True)
class Problem:
    reason: str
    message: str


NOT_EVALUATED = Problem(
    c.SPEC_NOT_EVALUATED,
    "The operator could not evaluate this spec (logged as plan.spec_not_evaluated, with the "
    "object's name); the rest of the plan goes on. Change the spec, and report it as a bug",
)


@dataclass(frozen=True)
class Failure:
    """An object whose evaluation raised. `error` is the exception's type: its message may
    repeat spec values, so it is not kept."""

    kind: str
    key: ObjKey
    error: str


@dataclass(frozen=True)
class ProviderPlan:
    key: ObjKey
    generation: int
    spec: GitProviderSpec | None
    normalized_url: str = ""
    problem: Problem | None = None


@dataclass(frozen=True)
class ClusterPlan:
    """A ClusterProvider: valid or why not."""

    name: str
    generation: int
    spec: ClusterProviderSpec | None
    problem: Problem | None = None

    def allows(self, namespace: str) -> bool:
        allowed = self.spec.allowed_namespaces if self.spec else []
        return "*" in allowed or namespace in allowed


NO_AUDIT_ROUTE = "!none"  # a remote cluster without an audit route: no facts ever match it


@dataclass(frozen=True)
class TargetPlan:
    key: TargetKey
    generation: int
    spec: GitTargetSpec | None
    provider: ProviderPlan | None = None
    folder: str = ""
    layout: Layout = field(default_factory=Layout)
    problem: Problem | None = None
    path_problem: Problem | None = None
    noise: NoisePolicy | None = None  # None: the operator's policy
    content: Content = FULL
    ignore: IgnoreRule = NO_IGNORE

    @property
    def writable(self) -> bool:
        return (
            self.problem is None
            and self.path_problem is None
            and self.spec is not None
            and not self.spec.suspend
        )

    @property
    def worker_key(self) -> WorkerKey:
        """One writer per repository and branch within a namespace: a worker pushes and signs
        only with what its own namespace provides (the trust boundary)."""
        assert self.provider is not None and self.spec is not None
        return WorkerKey(self.key.namespace, self.provider.normalized_url, self.spec.branch)

    @property
    def prune(self) -> PruneMode:
        return PruneMode(self.spec.prune.mode if self.spec else "Always")


@dataclass(frozen=True)
class RulePlan:
    kind: str
    key: ObjKey
    generation: int
    target: TargetKey | None
    resolved: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()
    problem: Problem | None = None
    sources: tuple[str, ...] = ()  # the namespaces its streams read (WatchRule)
    source_problem: Problem | None = None  # a sourceNamespace that was refused
    reader: str = ""  # the ServiceAccount whose reads were checked ('' = not checked)
    read_problem: Problem | None = None  # a type that ServiceAccount may not read


# --- cross-namespace sources --------------------------------------------------------------

WATCHABLE_FROM = "kubescribe.io/watchable-from"
"""Annotation on a Namespace: the namespaces (comma-separated, or `*`) whose WatchRules may
read it. Namespaces are cluster-scoped, so a tenant cannot grant itself another's objects."""


SourceGrants = Mapping[str, frozenset[str]]
"""Source namespace -> the namespaces it lets read it (`*` for all)."""


def source_grants(namespaces: Iterable[Mapping[str, Any]]) -> dict[str, frozenset[str]]:
    """The grants that Namespace objects carry in their `watchable-from` annotation."""
    grants: dict[str, frozenset[str]] = {}
    for ns in namespaces:
        meta = ns.get("metadata") or {}
        value = (meta.get("annotations") or {}).get(WATCHABLE_FROM)
        if isinstance(value, str) and (names := {n.strip() for n in value.split(",")} - {""}):
            grants[str(meta.get("name", ""))] = frozenset(names)
    return grants


def _source_refusal(reader: str, source: str, grants: SourceGrants | None) -> Problem | None:
    """Why namespace `reader` may not read `source` (None: it may). `grants` None: lockdown."""
    if source == reader:
        return None
    if grants is None:
        return Problem(
            c.CROSS_NAMESPACE_SOURCES_DISABLED,
            f"sourceNamespace {source!r}: cross-namespace sources are disabled on this operator",
        )
    allowed = grants.get(source, frozenset())
    if "*" in allowed or reader in allowed:
        return None
    return Problem(
        c.SOURCE_NAMESPACE_NOT_AUTHORIZED,
        f"sourceNamespace {source!r} does not grant namespace {reader!r} (annotation "
        f"{WATCHABLE_FROM} on Namespace {source!r}, set by a cluster administrator)",
    )


# --- what a WatchRule's namespace may read (--tenant-service-account) ------------------------


class ReadQuestion(NamedTuple):
    """May the tenant ServiceAccount of namespace `reader` list and watch `group`/`resource` in
    namespace `source`?"""

    reader: str
    source: str
    group: str
    resource: str


@dataclass(frozen=True)
class TenantReads:
    """A WatchRule mirrors only the types that the ServiceAccount `service_account` of its own
    namespace may list and watch in the namespace read: the operator's wide read access is
    never lent to a tenant for more than its own. `answers` come from the API server
    (SubjectAccessReviews); a question without an answer yet is refused."""

    service_account: str
    answers: Mapping[ReadQuestion, bool] = field(default_factory=dict)

    def refusal(self, refused: Mapping[ReadQuestion, str]) -> Problem | None:
        """RuleNotAuthorized for the questions refused (-> the type's name), naming the first."""
        if not refused:
            return None
        (question, gvr), more = next(iter(refused.items())), len(refused) - 1
        who = f"ServiceAccount {self.service_account!r} of namespace {question.reader!r}"
        what = f"{gvr} in namespace {question.source!r}"
        if question in self.answers:
            message = f"{who} may not list and watch {what}"
        else:
            message = f"{who}: whether it may list and watch {what} could not be checked yet"
        return Problem(
            c.RULE_NOT_AUTHORIZED,
            message + (f" (and {more} more)" if more else "") + ": not mirrored",
        )


@dataclass
class Plan:
    clusters: dict[str, ClusterPlan] = field(default_factory=dict)
    providers: dict[ObjKey, ProviderPlan] = field(default_factory=dict)
    targets: dict[TargetKey, TargetPlan] = field(default_factory=dict)
    rules: dict[tuple[str, ObjKey], RulePlan] = field(default_factory=dict)
    streams: dict[str, StreamSpec] = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)
    read_questions: set[ReadQuestion] = field(default_factory=set)  # with `TenantReads`

    def streams_of(self, target: TargetKey) -> list[StreamSpec]:
        return [s for s in self.streams.values() if s.target == target]


def _key(obj: Mapping[str, Any]) -> ObjKey:
    meta = obj["metadata"]
    return str(meta.get("namespace") or ""), str(meta["name"])


def _sort_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    try:
        return _key(obj)
    except Exception:  # reported when it is evaluated
        return "", ""


def _generation(obj: Mapping[str, Any]) -> int:
    generation = obj["metadata"].get("generation")
    return generation if isinstance(generation, int) else 0


def _evaluated(
    plan: Plan,
    kind: str,
    obj: Mapping[str, Any],
    evaluate: Callable[[], T],
    failed: Callable[[ObjKey, int], T],
) -> T | None:
    """`evaluate()`, or when it raises, `failed(key, generation)` (an object carrying
    `NOT_EVALUATED`) and a `Failure` in the plan. None for an object without a name."""
    try:
        return evaluate()
    except Exception as exc:
        try:
            key = _key(obj)
        except Exception:  # the API server never sends one; nothing to report it on
            plan.failures.append(Failure(kind, ("", ""), type(exc).__name__))
            return None
        plan.failures.append(Failure(kind, key, type(exc).__name__))
        return failed(key, _generation(obj))


def _invalid(exc: ValidationError) -> Problem:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    return Problem(c.INVALID_SPEC, f"spec.{where}: {first['msg']}")


def plan_provider(obj: Mapping[str, Any], *, allow_file_urls: bool = False) -> ProviderPlan:
    key, gen = _key(obj), _generation(obj)
    try:
        spec = GitProviderSpec.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        return ProviderPlan(key, gen, None, problem=_invalid(exc))
    try:
        messages.validate(spec.commit.message.change, messages.CHANGE_FIELDS)
        messages.validate(spec.commit.message.snapshot, messages.SNAPSHOT_FIELDS)
        messages.validate(spec.commit.message.group, messages.GROUP_FIELDS)
    except messages.TemplateError as exc:
        return ProviderPlan(key, gen, spec, problem=Problem(c.INVALID_TEMPLATE, str(exc)))
    try:
        parse_duration(spec.push.commit_window)
    except ValueError as exc:
        return ProviderPlan(key, gen, spec, problem=Problem(c.INVALID_SPEC, f"spec.push: {exc}"))
    try:
        check_url(spec.url, allow_file_urls)
    except UrlRefused as refused:  # its message never repeats credentials found in the URL
        problem = Problem(c.URL_REFUSED, f"spec.url: {refused.message} ({refused.reason})")
        return ProviderPlan(key, gen, spec, problem=problem)
    return ProviderPlan(key, gen, spec, normalized_url=normalize(spec.url))


def _provider_not_evaluated(key: ObjKey, generation: int) -> ProviderPlan:
    return ProviderPlan(key, generation, None, problem=NOT_EVALUATED)


def _cluster_not_evaluated(key: ObjKey, generation: int) -> ClusterPlan:
    return ClusterPlan(key[1], generation, None, NOT_EVALUATED)


def _target_not_evaluated(key: ObjKey, generation: int) -> TargetPlan:
    return TargetPlan(TargetKey(*key), generation, None, problem=NOT_EVALUATED)


def plan_cluster(obj: Mapping[str, Any]) -> ClusterPlan:
    name, gen = _key(obj)[1], _generation(obj)
    try:
        spec = ClusterProviderSpec.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        return ClusterPlan(name, gen, None, _invalid(exc))
    return ClusterPlan(name, gen, spec)


def _plan_target(obj: Mapping[str, Any], providers: Mapping[ObjKey, ProviderPlan]) -> TargetPlan:
    ns, name = _key(obj)
    key, gen = TargetKey(ns, name), _generation(obj)
    try:
        spec = GitTargetSpec.model_validate(obj.get("spec") or {})
    except ValidationError as exc:
        return TargetPlan(key, gen, None, problem=_invalid(exc))
    provider = providers.get((ns, spec.provider_ref.name))
    if provider is None:
        problem = Problem(c.PROVIDER_NOT_FOUND, f"GitProvider {spec.provider_ref.name!r} not found")
        return TargetPlan(key, gen, spec, problem=problem)
    if provider.problem is not None or provider.spec is None:
        problem = Problem(
            c.PROVIDER_NOT_READY, f"GitProvider {spec.provider_ref.name!r} is invalid"
        )
        return TargetPlan(key, gen, spec, provider, problem=problem)
    allowed = provider.spec.allowed_branches
    if not any(fnmatch.fnmatchcase(spec.branch, glob) for glob in allowed):
        problem = Problem(
            c.BRANCH_NOT_ALLOWED,
            f"branch {spec.branch!r} is not in the provider's allowedBranches {allowed}",
        )
        return TargetPlan(key, gen, spec, provider, problem=problem)
    try:
        folder = normalize_target_path(spec.path)
    except LayoutError as exc:  # a path stored before the CRD refused it
        return TargetPlan(key, gen, spec, provider, problem=Problem(c.INVALID_PATH, str(exc)))
    try:
        layout = Layout(
            default=spec.placement.default or DEFAULT_TEMPLATE,
            per_type={(t.group, t.resource): t.template for t in spec.placement.types},
        )
    except LayoutError as exc:
        return TargetPlan(key, gen, spec, provider, problem=Problem(c.INVALID_TEMPLATE, str(exc)))
    try:
        ignore = ignore_of(spec)
    except InvalidIgnore as exc:  # an entry stored before the CRD refused it
        return TargetPlan(key, gen, spec, provider, problem=Problem(c.INVALID_IGNORE, str(exc)))
    return TargetPlan(
        key, gen, spec, provider, folder, layout, content=content_of(spec), ignore=ignore
    )


def ignore_of(spec: GitTargetSpec) -> IgnoreRule:
    """Whose changes the target drops (`spec.ignore.changesBy`); `InvalidIgnore`."""
    if spec.ignore is None:
        return NO_IGNORE
    by = spec.ignore.changes_by
    return IgnoreRule.parse(by.users, by.service_accounts, by.field_managers)


def content_of(spec: GitTargetSpec) -> Content:
    """What the target's documents hold (`spec.content`)."""
    wanted = spec.content
    return Content(
        wanted.mode,
        tuple(sorted(set(wanted.controllers))),
        tuple(KeepField(tuple(k.path.split(".")), k.group, k.kind) for k in wanted.keep),
    )


def _with_noise(target: TargetPlan, base: NoisePolicy) -> TargetPlan:
    """The target's own noise policy (spec.noise on top of `base`), or InvalidNoise."""
    if target.spec is None or target.spec.noise is None or target.problem is not None:
        return target
    config = target.spec.noise.model_dump(by_alias=True, exclude_none=True)
    try:
        policy = NoisePolicy.from_config(config, base=base)
    except ValueError as exc:
        return dataclasses.replace(target, problem=Problem(c.INVALID_NOISE, str(exc)))
    return dataclasses.replace(target, noise=policy)


def _reject_overlaps(targets: list[TargetPlan], order: Mapping[TargetKey, tuple[str, ...]]) -> None:
    """Two targets on one branch may not share a folder: the older one keeps it."""
    accepted: dict[WorkerKey, list[TargetPlan]] = {}
    for i, plan in sorted(enumerate(targets), key=lambda p: order[p[1].key]):
        if plan.problem is not None:
            continue
        same_branch = accepted.setdefault(plan.worker_key, [])
        clash = next((o for o in same_branch if overlap(o.folder, plan.folder)), None)
        if clash is None:
            same_branch.append(plan)
            continue
        targets[i] = TargetPlan(
            plan.key,
            plan.generation,
            plan.spec,
            plan.provider,
            plan.folder,
            plan.layout,
            content=plan.content,
            ignore=plan.ignore,
            path_problem=Problem(
                c.PATH_OVERLAP,
                f"path {plan.folder or '.'!r} overlaps GitTarget {clash.key} "
                f"(path {clash.folder or '.'!r}) on branch {plan.worker_key.branch!r}",
            ),
        )


def _cluster_problem(cluster: ClusterPlan | None, namespace: str) -> Problem | None:
    if cluster is None:
        return Problem(c.CLUSTER_PROVIDER_NOT_FOUND, "ClusterProvider not found")
    if cluster.problem is not None:
        return Problem(
            c.CLUSTER_NOT_READY, f"ClusterProvider {cluster.name!r}: {cluster.problem.message}"
        )
    if not cluster.allows(namespace):
        return Problem(
            c.CLUSTER_NOT_ALLOWED,
            f"ClusterProvider {cluster.name!r} does not allow namespace {namespace!r} "
            "(spec.allowedNamespaces, set by a cluster administrator)",
        )
    return None


def _matches(rule: ClusterResourceRule, item: Discovered, explicit: set[str]) -> bool:
    rtype = item.rtype
    groups, versions = rule.api_groups, rule.api_versions
    if "*" not in groups and rtype.group not in groups:
        return False
    if "*" in versions:
        if not item.preferred:
            return False
    elif rtype.version not in versions:
        return False
    return "*" in rule.resources or rtype.resource in explicit


def _resolve(
    rule: ClusterResourceRule,
    discovered: Iterable[Discovered],
    namespaced: bool,
    noise: NoisePolicy,
) -> tuple[list[Discovered], list[str]]:
    explicit = {r for r in rule.resources if r != "*"}
    found: list[Discovered] = []
    seen_resources: set[str] = set()
    for item in discovered:
        if not _matches(rule, item, explicit) or item.rtype.namespaced != namespaced:
            continue
        if item.rtype.resource not in explicit and noise.drops_type(
            item.rtype.group, item.rtype.resource
        ):
            continue  # a wildcard does not open streams for types that are all noise
        found.append(item)
        seen_resources.add(item.rtype.resource)
    return found, sorted(explicit - seen_resources)


def compile_plan(
    providers: Iterable[Mapping[str, Any]],
    targets: Iterable[Mapping[str, Any]],
    watch_rules: Iterable[Mapping[str, Any]],
    cluster_watch_rules: Iterable[Mapping[str, Any]],
    discovered: list[Discovered],
    noise: NoisePolicy,
    *,
    allow_file_urls: bool = False,
    grants: SourceGrants | None = None,
    cluster_providers: Iterable[Mapping[str, Any]] = (),
    remote_discovered: Mapping[str, list[Discovered]] | None = None,
    reads: TenantReads | None = None,
) -> Plan:
    """`grants`: who may read which namespace (`source_grants`); None refuses every
    cross-namespace source (the operator's lockdown flag). `remote_discovered`: the served
    types of each ClusterProvider's cluster, once it has been reached. `reads`: what each
    WatchRule's namespace may read in its own cluster (None: not checked); the questions
    asked of it are in `Plan.read_questions`."""
    plan = Plan()
    for obj in cluster_providers:
        cluster_plan = _evaluated(
            plan, "ClusterProvider", obj, partial(plan_cluster, obj), _cluster_not_evaluated
        )
        if cluster_plan is not None:
            plan.clusters[cluster_plan.name] = cluster_plan
    remote = remote_discovered or {}
    target_cluster: dict[TargetKey, str] = {}
    for obj in providers:
        evaluate = partial(plan_provider, obj, allow_file_urls=allow_file_urls)
        p = _evaluated(plan, "GitProvider", obj, evaluate, _provider_not_evaluated)
        if p is not None:
            plan.providers[p.key] = p
    evaluated: list[tuple[TargetPlan, Mapping[str, Any]]] = []
    for obj in targets:
        evaluate_target = partial(_plan_target, obj, plan.providers)
        tp = _evaluated(plan, "GitTarget", obj, evaluate_target, _target_not_evaluated)
        if tp is not None:
            evaluated.append((tp, obj))
    target_plans = [tp for tp, _ in evaluated]
    order = {
        tp.key: (str(obj["metadata"].get("creationTimestamp", "")), tp.key.namespace, tp.key.name)
        for tp, obj in evaluated
    }
    _reject_overlaps(target_plans, order)
    for i, tp in enumerate(target_plans):
        try:
            target_plans[i] = _with_noise(tp, noise)
        except Exception as exc:
            plan.failures.append(
                Failure("GitTarget", (tp.key.namespace, tp.key.name), type(exc).__name__)
            )
            target_plans[i] = dataclasses.replace(tp, problem=NOT_EVALUATED)
    plan.targets = {tp.key: tp for tp in target_plans}

    merged: dict[str, Contribution] = {}

    def plan_rules(
        kind: str, obj: Mapping[str, Any], spec_type: type[Any], namespaced: bool
    ) -> tuple[RulePlan, Contribution, tuple[TargetKey, str] | None]:
        """The rule's plan, the streams it adds and the cluster it claims for its target;
        only the read questions it asks go into the plan here, so a rule that raises adds no
        stream."""
        key, gen = _key(obj), _generation(obj)
        try:
            spec = spec_type.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            return RulePlan(kind, key, gen, None, problem=_invalid(exc)), [], None
        ref = spec.target_ref
        target_key = TargetKey(getattr(ref, "namespace", None) or key[0], ref.name)
        target = plan.targets.get(target_key)
        if target is None:
            missing_target = Problem(c.TARGET_NOT_FOUND, f"GitTarget {target_key} not found")
            return RulePlan(kind, key, gen, target_key, problem=missing_target), [], None
        cluster, route, types = "", "", discovered
        if spec.cluster_ref is not None:
            cluster = spec.cluster_ref.name
            problem = _cluster_problem(plan.clusters.get(cluster), target_key.namespace)
            if problem is None and cluster not in remote:
                problem = Problem(
                    c.CLUSTER_NOT_READY, f"ClusterProvider {cluster!r} has not been reached yet"
                )
            if problem is not None:
                return RulePlan(kind, key, gen, target_key, problem=problem), [], None
            provider_spec = plan.clusters[cluster].spec
            assert provider_spec is not None
            route, types = provider_spec.audit_route or NO_AUDIT_ROUTE, remote[cluster]
        if target_cluster.get(target_key, cluster) != cluster:
            first = target_cluster[target_key] or LOCAL_CLUSTER
            conflict = Problem(
                c.CLUSTER_CONFLICT,
                f"GitTarget {target_key} already mirrors cluster {first!r}: one cluster per "
                "GitTarget (give each cluster a GitTarget of its own)",
            )
            return RulePlan(kind, key, gen, target_key, problem=conflict), [], None
        contribution: Contribution = []
        resolved: list[str] = []
        unresolved: list[str] = []
        sources: set[str] = set()
        refused: list[Problem] = []
        checked = reads if namespaced and not cluster else None
        not_readable: dict[ReadQuestion, str] = {}
        for rule in spec.rules:
            namespace = (getattr(rule, "source_namespace", None) or key[0]) if namespaced else ""
            if namespaced and not cluster:  # a ClusterProvider's grant covers its cluster
                if (refusal := _source_refusal(key[0], namespace, grants)) is not None:
                    refused.append(refusal)
                    continue
                sources.add(namespace)
            policy = target.noise or noise
            items, missing = _resolve(rule, types, namespaced, policy)
            namespaces = getattr(rule, "namespaces", None)
            across: list[Discovered] = []
            if namespaces is not None:  # a ClusterWatchRule reading namespaced types
                if cluster:
                    refused.append(
                        Problem(
                            c.NAMESPACES_NOT_SUPPORTED,
                            "namespaces with clusterRef: use WatchRules on the remote cluster",
                        )
                    )
                    continue
                across, missing_here = _resolve(rule, types, True, policy)
                missing = sorted(set(missing) & set(missing_here))
            unresolved += missing
            selector = (
                rule.label_selector.model_dump(by_alias=True) if rule.label_selector else None
            )
            for item in items:
                resolved.append(item.rtype.gvr)
                if checked is not None:
                    question = ReadQuestion(
                        key[0], namespace, item.rtype.group, item.rtype.resource
                    )
                    plan.read_questions.add(question)
                    if not checked.answers.get(question, False):
                        not_readable[question] = item.rtype.gvr
                        continue
                spec_ = StreamSpec(
                    target_key, item.rtype, namespace, (selector,), frozenset(), cluster, route
                )
                contribution.append((spec_, list(rule.operations)))
            for item in across:
                assert namespaces is not None
                resolved.append(item.rtype.gvr)
                spec_ = StreamSpec(
                    target_key,
                    item.rtype,
                    "",
                    (selector,),
                    frozenset(),
                    cluster,
                    route,
                    (namespaces.model_dump(by_alias=True, exclude_none=True),),
                )
                contribution.append((spec_, list(rule.operations)))
        problem = None
        if not resolved and len(refused) < len(spec.rules):
            problem = Problem(
                c.NO_MATCHING_RESOURCES,
                "no served resource matches the rules"
                + (f" (not found: {', '.join(sorted(set(unresolved)))})" if unresolved else ""),
            )
        if problem is None and refused and not namespaced:  # a ClusterWatchRule's refusal
            problem = refused[0]
        rule_plan = RulePlan(
            kind,
            key,
            gen,
            target_key,
            tuple(sorted(set(resolved))),
            tuple(sorted(set(unresolved))),
            problem,
            tuple(sorted(sources)),
            refused[0] if refused else None,
            checked.service_account if checked is not None else "",
            checked.refusal(not_readable) if checked is not None else None,
        )
        return rule_plan, contribution, (target_key, cluster)

    def rule_not_evaluated(
        kind: str, key: ObjKey, generation: int
    ) -> tuple[RulePlan, Contribution, None]:
        return RulePlan(kind, key, generation, None, problem=NOT_EVALUATED), [], None

    rule_kinds: tuple[tuple[str, Iterable[Mapping[str, Any]], type[Any], bool], ...] = (
        ("WatchRule", watch_rules, WatchRuleSpec, True),
        ("ClusterWatchRule", cluster_watch_rules, ClusterWatchRuleSpec, False),
    )
    for kind, objs, spec_type, namespaced in rule_kinds:
        # Sorted, so which rule's cluster a target takes does not depend on arrival order.
        for obj in sorted(objs, key=_sort_key):
            evaluated_rule = _evaluated(
                plan,
                kind,
                obj,
                partial(plan_rules, kind, obj, spec_type, namespaced),
                partial(rule_not_evaluated, kind),
            )
            if evaluated_rule is None:
                continue
            rule_plan, contribution, claim = evaluated_rule
            plan.rules[(kind, rule_plan.key)] = rule_plan
            if claim is not None:
                target_cluster.setdefault(*claim)
            for spec_, operations in contribution:
                merged.setdefault(spec_.key, []).append((spec_, operations))
    for target_key, cluster in target_cluster.items():
        if cluster and target_key in plan.targets:
            t = plan.targets[target_key]
            layout = dataclasses.replace(t.layout, cluster=cluster)
            plan.targets[target_key] = dataclasses.replace(t, layout=layout)

    for stream_key, parts in merged.items():
        first = parts[0][0]
        if not plan.targets[first.target].writable:
            continue
        plan.streams[stream_key] = StreamSpec(
            first.target,
            first.rtype,
            first.namespace,
            tuple(p[0].selectors[0] for p in parts),
            merge_operations([ops for _, ops in parts]),
            first.cluster,
            first.audit_route,
            tuple(s for p in parts for s in p[0].namespace_selectors),
        )
    return plan
