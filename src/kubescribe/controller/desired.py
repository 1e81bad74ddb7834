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
from kubescribe.api.gittarget import GitTargetSpec
from kubescribe.api.models import (
    ClusterProviderSpec,
    ClusterResourceRule,
    ClusterWatchRuleSpec,
    GitProviderSpec,
    WatchRuleSpec,
)
from kubescribe.controller.commit_config import CommitConfigError, commit_config
from kubescribe.controller.destinations import overlap_order
from kubescribe.controller.plan import (
    NO_AUDIT_ROUTE,
    NOT_EVALUATED,
    ClusterPlan,
    Contribution,
    Failure,
    ObjKey,
    Plan,
    Problem,
    ProviderPlan,
    ReadQuestion,
    RulePlan,
    TargetPlan,
    TenantReads,
    WorkerKey,
)
from kubescribe.controller.streams import StreamSpec, merge_operations
from kubescribe.git.urlpolicy import UrlRefused, check_url
from kubescribe.kube.discovery import Discovered
from kubescribe.mirror.changes import TargetKey
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
from kubescribe.mirror.owned import Content, KeepField
from kubescribe.net.urls import normalize

T = TypeVar("T")
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
        commit_config(spec)
    except CommitConfigError as exc:
        return ProviderPlan(key, gen, spec, problem=Problem(exc.reason, str(exc)))
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
        commit = commit_config(provider.spec, spec.commit)
    except InvalidIgnore as exc:  # an entry stored before the CRD refused it
        return TargetPlan(key, gen, spec, provider, problem=Problem(c.INVALID_IGNORE, str(exc)))
    except CommitConfigError as exc:
        return TargetPlan(key, gen, spec, provider, problem=Problem(exc.reason, str(exc)))
    content = content_of(spec)
    return TargetPlan(
        key, gen, spec, provider, folder, layout, content=content, ignore=ignore, commit=commit
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


def _reject_overlaps(targets: list[TargetPlan], order: Mapping[TargetKey, Any]) -> None:
    """Two targets on one branch may not share a folder: the older one keeps it, one that
    stays keeps it from one moving in."""
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
            commit=plan.commit,
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
    _plan_clusters(plan, cluster_providers)
    for obj in providers:
        evaluate = partial(plan_provider, obj, allow_file_urls=allow_file_urls)
        p = _evaluated(plan, "GitProvider", obj, evaluate, _provider_not_evaluated)
        if p is not None:
            plan.providers[p.key] = p
    _plan_targets(plan, targets, noise)
    rules = _Rules(plan, discovered, remote_discovered or {}, noise, grants, reads)
    rules.add("WatchRule", watch_rules, WatchRuleSpec, namespaced=True)
    rules.add("ClusterWatchRule", cluster_watch_rules, ClusterWatchRuleSpec, namespaced=False)
    for target_key, cluster in rules.target_cluster.items():
        if cluster and target_key in plan.targets:
            t = plan.targets[target_key]
            layout = dataclasses.replace(t.layout, cluster=cluster)
            plan.targets[target_key] = dataclasses.replace(t, layout=layout)
    for stream_key, parts in rules.merged.items():
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


def _plan_clusters(plan: Plan, cluster_providers: Iterable[Mapping[str, Any]]) -> None:
    for obj in cluster_providers:
        cluster_plan = _evaluated(
            plan, "ClusterProvider", obj, partial(plan_cluster, obj), _cluster_not_evaluated
        )
        if cluster_plan is not None:
            plan.clusters[cluster_plan.name] = cluster_plan


def _plan_targets(plan: Plan, targets: Iterable[Mapping[str, Any]], noise: NoisePolicy) -> None:
    """The GitTargets, overlapping folders refused (the oldest keeps its folder)."""
    evaluated: list[tuple[TargetPlan, Mapping[str, Any]]] = []
    for obj in targets:
        evaluate_target = partial(_plan_target, obj, plan.providers)
        tp = _evaluated(plan, "GitTarget", obj, evaluate_target, _target_not_evaluated)
        if tp is not None:
            evaluated.append((tp, obj))
    target_plans = [tp for tp, _ in evaluated]
    order = {tp.key: overlap_order(tp, obj) for tp, obj in evaluated}
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


class _Place(NamedTuple):
    """Where a rule reads: its cluster ('' local), audit route and served types."""

    cluster: str
    route: str
    types: list[Discovered]


@dataclass
class _Reading:
    """One rule being planned: where it reads, and what its entries add up to."""

    key: ObjKey
    namespaced: bool  # a WatchRule (a ClusterWatchRule reads cluster-scoped types)
    target: TargetKey
    noise: NoisePolicy
    place: _Place
    checked: TenantReads | None  # what its namespace may read (None: not checked)
    contribution: Contribution = field(default_factory=list)
    resolved: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    sources: set[str] = field(default_factory=set)
    refused: list[Problem] = field(default_factory=list)
    not_readable: dict[ReadQuestion, str] = field(default_factory=dict)

    def problem(self, entries: int) -> Problem | None:
        if not self.resolved and len(self.refused) < entries:
            missing = sorted(set(self.unresolved))
            return Problem(
                c.NO_MATCHING_RESOURCES,
                "no served resource matches the rules"
                + (f" (not found: {', '.join(missing)})" if missing else ""),
            )
        if self.refused and not self.namespaced:  # a ClusterWatchRule's refusal
            return self.refused[0]
        return None

    def plan(self, kind: str, generation: int, entries: int) -> RulePlan:
        checked = self.checked
        return RulePlan(
            kind,
            self.key,
            generation,
            self.target,
            tuple(sorted(set(self.resolved))),
            tuple(sorted(set(self.unresolved))),
            self.problem(entries),
            tuple(sorted(self.sources)),
            self.refused[0] if self.refused else None,
            checked.service_account if checked is not None else "",
            checked.refusal(self.not_readable) if checked is not None else None,
        )


@dataclass
class _Rules:
    """Plans WatchRules and ClusterWatchRules against the plan's targets and clusters: the
    rule plans into the plan, their streams into `merged`, each target's cluster (the first
    rule's, rules sorted) into `target_cluster`."""

    plan: Plan
    discovered: list[Discovered]
    remote: Mapping[str, list[Discovered]]
    noise: NoisePolicy
    grants: SourceGrants | None
    reads: TenantReads | None
    target_cluster: dict[TargetKey, str] = field(default_factory=dict)
    merged: dict[str, Contribution] = field(default_factory=dict)

    def add(
        self,
        kind: str,
        objs: Iterable[Mapping[str, Any]],
        spec_type: type[Any],
        *,
        namespaced: bool,
    ) -> None:
        # Sorted, so which rule's cluster a target takes does not depend on arrival order.
        for obj in sorted(objs, key=_sort_key):
            evaluated = _evaluated(
                self.plan,
                kind,
                obj,
                partial(self.rule, kind, obj, spec_type, namespaced),
                partial(_rule_not_evaluated, kind),
            )
            if evaluated is None:
                continue
            rule_plan, contribution, claim = evaluated
            self.plan.rules[(kind, rule_plan.key)] = rule_plan
            if claim is not None:
                self.target_cluster.setdefault(*claim)
            for spec_, operations in contribution:
                self.merged.setdefault(spec_.key, []).append((spec_, operations))

    def rule(
        self, kind: str, obj: Mapping[str, Any], spec_type: type[Any], namespaced: bool
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
        target = self.plan.targets.get(target_key)
        if target is None:
            missing_target = Problem(c.TARGET_NOT_FOUND, f"GitTarget {target_key} not found")
            return RulePlan(kind, key, gen, target_key, problem=missing_target), [], None
        place = self._place(spec, target_key)
        if isinstance(place, Problem):
            return RulePlan(kind, key, gen, target_key, problem=place), [], None
        checked = self.reads if namespaced and not place.cluster else None
        reading = _Reading(key, namespaced, target_key, target.noise or self.noise, place, checked)
        for entry in spec.rules:
            self._entry(entry, reading)
        plan = reading.plan(kind, gen, len(spec.rules))
        return plan, reading.contribution, (target_key, place.cluster)

    def _place(self, spec: Any, target_key: TargetKey) -> _Place | Problem:
        """The rule's cluster (its target may mirror only one), or why it cannot read there."""
        place = _Place("", "", self.discovered)
        if spec.cluster_ref is not None:
            cluster = spec.cluster_ref.name
            problem = _cluster_problem(self.plan.clusters.get(cluster), target_key.namespace)
            if problem is None and cluster not in self.remote:
                problem = Problem(
                    c.CLUSTER_NOT_READY, f"ClusterProvider {cluster!r} has not been reached yet"
                )
            if problem is not None:
                return problem
            provider_spec = self.plan.clusters[cluster].spec
            assert provider_spec is not None
            route = provider_spec.audit_route or NO_AUDIT_ROUTE
            place = _Place(cluster, route, self.remote[cluster])
        if self.target_cluster.get(target_key, place.cluster) != place.cluster:
            first = self.target_cluster[target_key] or LOCAL_CLUSTER
            return Problem(
                c.CLUSTER_CONFLICT,
                f"GitTarget {target_key} already mirrors cluster {first!r}: one cluster per "
                "GitTarget (give each cluster a GitTarget of its own)",
            )
        return place

    def _entry(self, entry: Any, r: _Reading) -> None:
        """One entry of the rule's `rules`: the streams it resolves to, or why it is refused."""
        cluster, route, types = r.place
        namespace = (getattr(entry, "source_namespace", None) or r.key[0]) if r.namespaced else ""
        if r.namespaced and not cluster:  # a ClusterProvider's grant covers its cluster
            if (refusal := _source_refusal(r.key[0], namespace, self.grants)) is not None:
                r.refused.append(refusal)
                return
            r.sources.add(namespace)
        items, missing = _resolve(entry, types, r.namespaced, r.noise)
        namespaces = getattr(entry, "namespaces", None)
        across: list[Discovered] = []
        if namespaces is not None:  # a ClusterWatchRule reading namespaced types
            if cluster:
                r.refused.append(
                    Problem(
                        c.NAMESPACES_NOT_SUPPORTED,
                        "namespaces with clusterRef: use WatchRules on the remote cluster",
                    )
                )
                return
            across, missing_here = _resolve(entry, types, True, r.noise)
            missing = sorted(set(missing) & set(missing_here))
        r.unresolved += missing
        selector = entry.label_selector.model_dump(by_alias=True) if entry.label_selector else None
        for item in items:
            r.resolved.append(item.rtype.gvr)
            if r.checked is not None:
                question = ReadQuestion(r.key[0], namespace, item.rtype.group, item.rtype.resource)
                self.plan.read_questions.add(question)
                if not r.checked.answers.get(question, False):
                    r.not_readable[question] = item.rtype.gvr
                    continue
            spec_ = StreamSpec(
                r.target, item.rtype, namespace, (selector,), frozenset(), cluster, route
            )
            r.contribution.append((spec_, list(entry.operations)))
        for item in across:
            assert namespaces is not None
            r.resolved.append(item.rtype.gvr)
            spec_ = StreamSpec(
                r.target,
                item.rtype,
                "",
                (selector,),
                frozenset(),
                cluster,
                route,
                (namespaces.model_dump(by_alias=True, exclude_none=True),),
            )
            r.contribution.append((spec_, list(entry.operations)))


def _rule_not_evaluated(
    kind: str, key: ObjKey, generation: int
) -> tuple[RulePlan, Contribution, None]:
    return RulePlan(kind, key, generation, None, problem=NOT_EVALUATED), [], None
