"""The plan's records: what `compile_plan` (`controller.desired`) decides should run, and why
each object is or is not valid (pure data)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from kubescribe.api import conditions as c
from kubescribe.api.gittarget import GitTargetSpec
from kubescribe.api.models import ClusterProviderSpec, GitProviderSpec
from kubescribe.controller.commit_config import CommitConfig
from kubescribe.controller.streams import StreamSpec
from kubescribe.mirror.changes import PruneMode, TargetKey
from kubescribe.mirror.ignore import NO_IGNORE, IgnoreRule
from kubescribe.mirror.layout import Layout
from kubescribe.mirror.noise import NoisePolicy
from kubescribe.mirror.owned import FULL, Content

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
    commit: CommitConfig | None = None  # set on every target without a problem

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
