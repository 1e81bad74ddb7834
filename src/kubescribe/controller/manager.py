"""The operator's main loop: watch kubescribe objects, plan, run streams and branch workers,
and report status."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import structlog

from kubescribe import metrics
from kubescribe.api import conditions as c
from kubescribe.api import events as ev
from kubescribe.controller.caches import ChangeTrigger, ObjectCache
from kubescribe.controller.clusters import ClusterProviders
from kubescribe.controller.commit_config import commit_config
from kubescribe.controller.commitrequests import CommitRequests, TargetAccess
from kubescribe.controller.cursors import CursorKeeper
from kubescribe.controller.desired import compile_plan, source_grants
from kubescribe.controller.destinations import (
    Destination,
    moved_from,
    observed,
    planned,
    status_field,
)
from kubescribe.controller.discovered import DiscoveredTypes
from kubescribe.controller.encryption import EncryptionResolver
from kubescribe.controller.events import EventRecorder
from kubescribe.controller.object_status import (
    TargetFacts,
    attribution_condition,
    rule_conditions,
    target_status,
)
from kubescribe.controller.plan import Failure, Plan, RulePlan, TargetPlan, WorkerKey
from kubescribe.controller.providers import Providers
from kubescribe.controller.reconcile_requests import ReconcileRequests
from kubescribe.controller.shards import Shards
from kubescribe.controller.status import Cond, StatusWriter, kstatus
from kubescribe.controller.streams import StreamSpec
from kubescribe.controller.tenantreads import TenantReadReviews
from kubescribe.controller.watches import Running, Watches, streams_condition
from kubescribe.controller.webhooks import NAME as WEBHOOK_NAME
from kubescribe.controller.webhooks import ChangeWebhook
from kubescribe.git.cachequota import NamespaceCache
from kubescribe.git.records import WriteReport
from kubescribe.git.targets import Committer, KustomizeConfig, TargetConfig
from kubescribe.git.worker import BranchWorker
from kubescribe.kube.client import ApiError, KubeClient
from kubescribe.kube.discovery import discover
from kubescribe.kube.informer import Informer, as_is
from kubescribe.mirror.authors import AttributionMode, AuthorResolver
from kubescribe.mirror.changes import Cursor, TargetKey
from kubescribe.mirror.identity import ResourceType
from kubescribe.mirror.layout import LOCAL_CLUSTER
from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY, NoisePolicy
from kubescribe.net.weblinks import commit_url_template
from kubescribe.waits import wait_event, within

log = structlog.get_logger(__name__)

_CRASH_BACKOFF_MAX = 30.0  # seconds between reconcile passes while each one crashes


OWN_TYPES = {
    "GitProvider": ResourceType("kubescribe.io", "v1alpha1", "gitproviders", "GitProvider", True),
    "GitTarget": ResourceType("kubescribe.io", "v1alpha1", "gittargets", "GitTarget", True),
    "WatchRule": ResourceType("kubescribe.io", "v1alpha1", "watchrules", "WatchRule", True),
    "ClusterWatchRule": ResourceType(
        "kubescribe.io", "v1alpha1", "clusterwatchrules", "ClusterWatchRule", False
    ),
    "ClusterProvider": ResourceType(
        "kubescribe.io", "v1alpha1", "clusterproviders", "ClusterProvider", False
    ),
}
NAMESPACES = ResourceType("", "v1", "namespaces", "Namespace", False)  # cross-namespace grants
DISCOVERY_TRIGGERS = (
    ResourceType(
        "apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", False
    ),
    ResourceType("apiregistration.k8s.io", "v1", "apiservices", "APIService", False),
)


@dataclass(frozen=True)
class Settings:
    """The `kubescribe run` flags, built once by `kubescribe.app` (collaborators: wiring)."""

    cache_dir: Path
    discovery_grace: float = 60.0
    discovery_interval: float = 300.0
    noise: NoisePolicy = DEFAULT_NOISE_POLICY
    allow_file_urls: bool = False
    probe_interval: float = 300.0
    credentials_refresh: float = 10.0
    cross_namespace_sources: bool = True  # False: refuse every WatchRule sourceNamespace elsewhere
    replica_id: str = ""  # set: share the branch writers with other replicas through Leases
    lease_namespace: str = "default"
    lease_duration: float = 10.0
    allow_insecure_cluster_tls: bool = False  # ClusterProvider kubeconfigs without TLS checks
    changes_webhook_name: str = WEBHOOK_NAME  # the change webhook's ValidatingWebhookConfiguration
    # set: what the operator creates cluster-wide is owned by this ClusterRole (helm uninstall)
    owner_cluster_role: str = ""
    attribution_sources: tuple[str, ...] = ()  # audit, admission: what can name authors
    kustomize: str | None = None  # the kustomize binary for GitTarget render checks
    cache_quota: int = 0  # bytes each namespace's clones may hold in the cache (0: no quota)
    # set: a WatchRule mirrors only what this ServiceAccount of its namespace may read
    tenant_service_account: str = ""
    shutdown_timeout: float = 8.0  # seconds from SIGTERM to released Leases (see shutdown)


@dataclass(frozen=True)
class Parts:
    """The manager's collaborators, built by the composition root (`kubescribe.wiring`)."""

    poke: asyncio.Event  # set by whatever changes the plan's inputs: reconcile soon
    events: EventRecorder
    status: StatusWriter
    providers: Providers
    clusters: ClusterProviders
    encryption: EncryptionResolver
    requests: CommitRequests
    cursors: CursorKeeper
    shards: Shards | None = None  # several replicas share the writers
    webhook: ChangeWebhook | None = None  # the change webhook's registration
    tenant_reads: TenantReadReviews | None = None  # --tenant-service-account
    resolver: AuthorResolver | None = None  # audit attribution (attributed-author)
    reconciles: ReconcileRequests = field(default_factory=ReconcileRequests)
    on_report: Callable[[WriteReport], None] = lambda report: None  # alerts: what landed


@dataclass
class Manager:
    client: KubeClient
    settings: Settings
    parts: Parts
    plan: Plan = field(default_factory=Plan)

    def __post_init__(self) -> None:
        self._caches = {kind: ObjectCache(self.parts.poke) for kind in OWN_TYPES}
        self._namespaces = ObjectCache(self.parts.poke)
        self._discovery_poke = asyncio.Event()
        self._types = DiscoveredTypes(self.settings.discovery_grace)
        self._watches = Watches(
            self.parts.cursors,
            self.parts.poke,
            self.settings.noise,
            self._client_of,
            # Several replicas: a target's stream moves with its writer's Lease and resumes from
            # the target's own cursor, so streams stay per target there.
            share=not self.settings.replica_id,
            seen=self._seen,
        )
        self._workers: dict[WorkerKey, BranchWorker] = {}
        self._stopping: dict[WorkerKey, asyncio.Task[object]] = {}
        self._namespace_caches: dict[str, NamespaceCache] = {}
        self._owned: frozenset[WorkerKey] = frozenset()
        self._plan_failures: frozenset[Failure] = frozenset()
        self._reports: dict[TargetKey, WriteReport] = {}
        self._readiness: dict[str, str] = {}  # target -> "<Ready status>/<reason>" exported
        metrics.CACHE_QUOTA.set(self.settings.cache_quota)
        self._tasks: list[asyncio.Task[object]] = []
        self._cursor_task: asyncio.Task[None] | None = None
        self.synced = False

    # -- lifecycle -------------------------------------------------------------------------
    async def run(self) -> None:
        """Run until cancelled; on cancellation flush the branch workers."""
        try:
            own = [
                Informer(self.client, rtype, self._caches[kind], prepare=as_is)
                for kind, rtype in OWN_TYPES.items()
            ]
            # Namespaces: for cross-namespace grants, and for ClusterWatchRules that read
            # namespaced types from the namespaces they select.
            own.append(Informer(self.client, NAMESPACES, self._namespaces, prepare=as_is))
            triggers = [
                Informer(self.client, rtype, ChangeTrigger(self._discovery_poke), prepare=as_is)
                for rtype in DISCOVERY_TRIGGERS
            ]
            self._tasks = [asyncio.create_task(i.run()) for i in own + triggers]
            self._tasks.append(asyncio.create_task(self.parts.requests.run(self._target_access)))
            # Not in _tasks: shutdown stops it only after the last cursors are saved.
            self._cursor_task = asyncio.create_task(self.parts.cursors.run())
            # The first plan needs the served types, this replica's place among the others
            # (join before it: writers spread at once) and a snapshot of each own type: ask
            # the API server for all of them at once.
            first = [self._refresh_discovery(), *(i.synced.wait() for i in own)]
            if self.parts.shards is not None:
                first.append(self.parts.shards.tick())
            await _all(first)
            self._tasks.append(asyncio.create_task(self._discovery_loop()))
            if self.parts.shards is not None:
                self._tasks.append(asyncio.create_task(self.parts.shards.run()))
            crashes = 0
            while True:
                try:
                    await self._reconcile()
                    crashes = 0
                except (ApiError, aiohttp.ClientError, OSError) as exc:
                    # The API server hiccuped mid-reconcile: streams and workers keep running;
                    # the next poke or the 10 s tick reconciles again.
                    metrics.RECONCILE_ERRORS.labels("api").inc()
                    log.warning("reconcile.failed", error=str(exc) or type(exc).__name__)
                except Exception:
                    # A bug must not end the loop (it would stop every tenant until a restart):
                    # log it, count it and try again, less often while it repeats.
                    crashes += 1
                    metrics.RECONCILE_ERRORS.labels("crashed").inc()
                    log.exception("reconcile.crashed", attempt=crashes)
                    await asyncio.sleep(min(_CRASH_BACKOFF_MAX, 0.5 * 2 ** min(crashes, 8)))
                await wait_event(self.parts.poke, 10)
                self.parts.poke.clear()
                await asyncio.sleep(0.05)  # coalesce bursts of object events
        finally:
            await self.shutdown()

    async def shutdown(self) -> None:
        """Stop within `settings.shutdown_timeout`: stop watching, let every writer write and
        push what it holds (hand-overs under way included), save the cursors, and release the
        Leases last, whatever the steps before did. What a step could not finish in its share
        of the time is not acknowledged: nothing is lost, the next owner replays it."""
        started = time.monotonic()
        deadline = started + self.settings.shutdown_timeout
        # Kept for the cursors and the Leases, so a slow push cannot cost the release.
        reserve = min(2.0, self.settings.shutdown_timeout / 4)
        handovers = [t for t in self._stopping.values() if not t.done()]
        watching = [t for t in self._tasks if t not in handovers]
        watching += self._watches.tasks()
        self._watches.clear()
        for task in watching:
            task.cancel()
        workers = list(self._workers.values())
        self._workers.clear()
        flush_by = deadline - reserve
        # Writers stop taking items now, while the streams wind down (what they refuse is replayed)
        stops = [w.stop(timeout=max(0.0, flush_by - time.monotonic())) for w in workers]
        gathered = asyncio.gather(*stops, *handovers, return_exceptions=True)
        flushed = await within(gathered, flush_by - time.monotonic())
        if watching:  # the Lease loop must be over before its Leases are released
            await asyncio.wait(watching, timeout=max(0.1, deadline - reserve - time.monotonic()))
        saved = await self.parts.cursors.flush(
            timeout=max(0.1, deadline - reserve / 2 - time.monotonic())
        )
        if self._cursor_task is not None:
            self._cursor_task.cancel()
        await self.release_leases(max(0.5, deadline - time.monotonic()))
        self.parts.providers.close()
        await self.parts.clusters.close()
        log.info(
            "operator.shutdown",
            seconds=round(time.monotonic() - started, 3),
            writers=len(workers) + len(handovers),
            flushed=flushed,
            cursors_saved=saved,
        )

    async def release_leases(self, timeout: float) -> None:
        """Release the writer Leases, leave the membership (a late stop's last resort too)."""
        if self.parts.shards is not None and not await within(self.parts.shards.stop(), timeout):
            log.warning("operator.leases_not_released", reason="the API server did not answer")

    # -- discovery -------------------------------------------------------------------------
    async def _discovery_loop(self) -> None:
        while True:
            await wait_event(self._discovery_poke, self.settings.discovery_interval)
            self._discovery_poke.clear()
            await asyncio.sleep(0.5)  # a CRD is served a moment after it is created
            try:
                await self._refresh_discovery()
            except Exception as exc:
                log.warning("discovery.failed", error=str(exc))
                continue
            self.parts.poke.set()

    async def _refresh_discovery(self) -> None:
        if self._types.refresh(await discover(self.client), time.monotonic()):
            # Re-check once the grace period is over, so a settled removal is dropped.
            loop = asyncio.get_running_loop()
            loop.call_later(self.settings.discovery_grace + 1, self._discovery_poke.set)

    # -- reconcile -------------------------------------------------------------------------
    async def _reconcile(self) -> None:
        plan = self._compile()
        if self.parts.tenant_reads is not None:
            plan = await self._with_read_answers(self.parts.tenant_reads, plan)
        self.plan = plan
        self._report_plan_failures()
        self.parts.clusters.sync(self.plan.clusters)
        caches = self._caches
        asked = self.parts.reconciles.take(
            caches["GitProvider"].objects, caches["GitTarget"].objects, self.parts.providers.reprobe
        )
        await self.parts.providers.sync(self.plan.providers)
        self.parts.providers.gate(self.plan)  # no credentials or signing key: the targets wait
        await self.parts.encryption.refresh(self.plan)
        self._apply_workers()
        for target in (t for t in asked if t in self.plan.targets):  # against the remote's tip
            if (worker := self._workers.get(self.plan.targets[target].worker_key)) is not None:
                worker.refetch()
        relists = [s.key for target in asked for s in self.plan.streams_of(target)]
        # re-list: refused documents can be written; a reconcile-at request asks for it
        for key in [*self.parts.encryption.take_resyncs(), *relists]:
            self._watches.stop(key, relist=True)  # a saved cursor would skip what was listed
        await self._apply_streams()
        owned = frozenset(self._workers)
        if owned != self._owned:
            self._owned = owned
            metrics.OWNED_WRITERS.set(len(owned))
            self.parts.requests.reconsider()
        if self.parts.webhook is not None and self._speaks_for("webhook/attribution"):
            await self.parts.webhook.sync(self.plan.streams.values())
        # A stream the operator may not list (WatchForbidden, in the target's status) does not
        # hold readiness back: it needs an RBAC change, not a restart.
        self.synced = all(r.synced or r.forbidden for r in self._watches.running.values())
        await self._write_statuses()

    def _report_plan_failures(self) -> None:
        """Log the objects whose spec could not be evaluated (once, when the set changes)."""
        failures = frozenset(self.plan.failures)
        if failures == self._plan_failures:
            return
        for failure in failures - self._plan_failures:
            namespace, name = failure.key
            log.error(
                "plan.spec_not_evaluated",
                kind=failure.kind,
                namespace=namespace,
                name=name,
                error=failure.error,
            )
        self._plan_failures = failures
        for kind in OWN_TYPES:
            metrics.PLAN_FAILURES.labels(kind).set(sum(1 for f in failures if f.kind == kind))

    async def _with_read_answers(self, reads: TenantReadReviews, plan: Plan) -> Plan:
        """The plan again with the answers to what it asked; a rule that arrived while the API
        server answered brings questions of its own (asked at the next reconcile after three
        rounds)."""
        for _ in range(3):
            if not await reads.refresh(plan.read_questions):
                break
            plan = self._compile()
        return plan

    def _compile(self) -> Plan:
        caches = self._caches
        return compile_plan(
            caches["GitProvider"].objects.values(),
            caches["GitTarget"].objects.values(),
            caches["WatchRule"].objects.values(),
            caches["ClusterWatchRule"].objects.values(),
            self._types.items(),
            self.settings.noise,
            allow_file_urls=self.settings.allow_file_urls,
            grants=(
                source_grants(self._namespaces.objects.values())
                if self.settings.cross_namespace_sources
                else None
            ),
            cluster_providers=caches["ClusterProvider"].objects.values(),
            remote_discovered=self.parts.clusters.discovered(),
            reads=self.parts.tenant_reads.known() if self.parts.tenant_reads is not None else None,
        )

    def _apply_workers(self) -> None:
        by_worker: dict[WorkerKey, list[TargetPlan]] = {}
        for target in self.plan.targets.values():
            if target.writable:
                by_worker.setdefault(target.worker_key, []).append(target)
        shards = self.parts.shards
        if shards is not None:
            shards.want(by_worker)
        self._retire_workers(by_worker)
        for key, targets in by_worker.items():
            if shards is not None and (not shards.owns(key) or shards.handing_over(key)):
                continue  # another replica writes this branch
            if key in self._stopping and not self._stopping[key].done():
                continue  # its previous worker is still writing out (same clone)
            self._stopping.pop(key, None)
            worker = self._workers.get(key)
            if worker is None:
                worker = self._start_worker(key, targets)
            worker.configure([self._target_config(t) for t in targets])
            self.parts.providers.assign(
                key, [t.provider.key for t in targets if t.provider], worker
            )

    def _retire_workers(self, by_worker: Mapping[WorkerKey, list[TargetPlan]]) -> None:
        """Stop the writers of branches not written here: hand over, abandon, or write out."""
        shards = self.parts.shards
        for key, worker in list(self._workers.items()):
            handover = shards is not None and shards.handing_over(key)
            lost = shards is not None and not shards.owns(key)
            if key in by_worker and not handover and not lost:
                continue
            del self._workers[key]
            self.parts.providers.drop_worker(key)
            if handover:
                stopping: Coroutine[Any, Any, object] = self._hand_over(key, worker)
            elif lost:  # another replica writes it now: write nothing more
                self._writer_event(
                    key,
                    "Warning",
                    ev.WRITER_LOST,
                    f"Replica {self.settings.replica_id} lost the Lease of branch"
                    f" {key.branch} (not renewed in time, or taken): it stopped writing at"
                    " once; the new owner writes what it had not pushed",
                )
                stopping = worker.abandon()
            else:
                stopping = worker.stop(timeout=20)
            task = asyncio.create_task(stopping)
            task.add_done_callback(lambda _: self.parts.poke.set())
            self._stopping[key] = task
            self._tasks.append(task)

    def _start_worker(self, key: WorkerKey, targets: list[TargetPlan]) -> BranchWorker:
        provider = targets[0].provider
        assert provider is not None and provider.spec is not None
        committer = provider.spec.commit.committer
        worker = BranchWorker(
            url=provider.spec.url,
            branch=key.branch,
            # Each namespace keeps its own clone: nothing one writes is another's base.
            cache_dir=self._namespace_cache(key.namespace).directory,
            cache_quota=self._namespace_cache(key.namespace),
            committer=Committer(committer.name, committer.email),
            on_report=self._on_report,
            on_pushed=self._on_pushed,
            resolver=self.parts.resolver,
            callbacks=self.parts.providers.callbacks(key, provider.spec.url),
        )
        self._workers[key] = worker
        self.parts.providers.assign(key, [t.provider.key for t in targets if t.provider], worker)
        worker.start()
        if self.parts.shards is not None:
            self._writer_event(
                key,
                "Normal",
                ev.WRITER_ACQUIRED,
                f"Replica {self.settings.replica_id} writes branch {key.branch} now"
                f" (replicas: {len(self.parts.shards.members)})",
            )
        return worker

    def _namespace_cache(self, namespace: str) -> NamespaceCache:
        """The folder of a namespace's clones and its quota, one for all its workers."""
        cache = self._namespace_caches.get(namespace)
        if cache is None:
            cache = self._namespace_caches[namespace] = NamespaceCache(
                self.settings.cache_dir / "namespaces" / namespace,
                self.settings.cache_quota,
                namespace,
            )
        return cache

    async def _hand_over(self, key: WorkerKey, worker: BranchWorker) -> None:
        """Write and push what the worker holds, save its cursors, then let the Lease go."""
        assert self.parts.shards is not None
        started = time.monotonic()
        await worker.stop(timeout=20)
        await self.parts.cursors.flush()
        await self.parts.shards.release(key)
        metrics.HANDOVER.observe(time.monotonic() - started)
        self._writer_event(
            key,
            "Normal",
            ev.WRITER_HANDED_OVER,
            f"Replica {self.parts.shards.identity} handed branch {key.branch} over to another"
            f" replica (the replicas changed) after writing what it held, in"
            f" {time.monotonic() - started:.1f}s",
        )
        log.info("writer.handed_over", branch=key.branch, seconds=time.monotonic() - started)

    def _target_config(self, target: TargetPlan) -> TargetConfig:
        assert target.spec is not None and target.provider is not None and target.provider.spec
        commit = target.commit or commit_config(target.provider.spec, target.spec.commit)
        return TargetConfig(
            key=target.key,
            folder=target.folder,
            layout=target.layout,
            prune=target.prune,
            renderer=self.parts.encryption.renderer(target.key),
            change_template=commit.change,
            snapshot_template=commit.snapshot,
            group_template=commit.group,
            window=commit.window,
            attribution=AttributionMode(target.provider.spec.attribution.mode),
            infer_authors=target.provider.spec.attribution.infer_from_managed_fields,
            kustomize=self._kustomize_config(target),
            base_branch=target.spec.base_branch,
            ignore=target.ignore,
            moved_from=moved_from(target, self._seen(target)),
            commit_url=commit_url_template(
                target.provider.spec.url, target.provider.spec.commit_url_template
            ),
        )

    def _seen(self, t: TargetPlan) -> Destination | None:
        """Where the target's status says its mirror is written (`status.observedDestination`)."""
        return observed(self._caches["GitTarget"].objects.get((t.key.namespace, t.key.name)))

    def _moved(self, t: TargetPlan, streams: list[Running]) -> bool:
        """Whether all of a target is written at its spec's destination: each stream listed
        there and synced, nothing of the target pending, the last write pushed."""
        worker, report = self._workers.get(t.worker_key), self._reports.get(t.key)
        return (
            worker is not None
            and worker.pending_age(t.key) == 0
            and (report is None or report.ok)
            and all(r.destination == planned(t) and r.synced for r in streams)
        )

    def _kustomize_config(self, target: TargetPlan) -> KustomizeConfig | None:
        assert target.spec is not None
        spec = target.spec.kustomize
        if spec.mode == "Disabled":
            return None
        return KustomizeConfig(
            root="" if spec.root == "." else spec.root,
            write_unsupported=spec.write_unsupported,
            render_check=self.settings.kustomize if spec.render_check else None,
            render_check_unavailable=spec.render_check and not self.settings.kustomize,
        )

    def _target_access(self, key: TargetKey) -> TargetAccess:
        """For the CommitRequest controller: a target's plan, worker and watch streams."""
        plan = self.plan.targets.get(key)
        if plan is None or not plan.writable:
            return TargetAccess(plan)
        if self.parts.shards is not None and plan.worker_key not in self._workers:
            return TargetAccess(plan, elsewhere=not self.parts.shards.owns(plan.worker_key))
        running = self._watches.running
        informers = [running[s.key].informer for s in self.plan.streams_of(key) if s.key in running]
        return TargetAccess(plan, self._workers.get(plan.worker_key), informers)

    async def _apply_streams(self) -> None:
        """Run the streams of the targets written here (all of them without sharding)."""
        namespaces = {
            str(obj["metadata"]["name"]): dict(obj["metadata"].get("labels") or {})
            for obj in self._namespaces.objects.values()
        }
        wanted = {
            key: spec
            for key, spec in self.plan.streams.items()
            if self.plan.targets[spec.target].worker_key in self._workers
            and self._client_of(spec) is not None
            # a namespace filter waits for the namespaces: an empty set would sweep everything
            and (not spec.namespace_selectors or self._namespaces.synced)
        }
        admitted = {key: spec.admitted(namespaces) for key, spec in wanted.items()}
        stopped = await self._watches.apply(self.plan, wanted, admitted, self._workers)
        for snapshot in self._types.sweeps(stopped, wanted.values(), time.monotonic()):
            target = self.plan.targets.get(snapshot.target)
            if target is not None and (worker := self._workers.get(target.worker_key)):
                worker.submit(snapshot)  # the type is gone: its files swept or retained

    def _client_of(self, spec: StreamSpec) -> KubeClient | None:
        """The client of a stream's cluster (None: a remote cluster not reached yet)."""
        return self.parts.clusters.client_of(spec.cluster) if spec.cluster else self.client

    def _writer_event(self, key: WorkerKey, type_: str, reason: str, message: str) -> None:
        """An Event on each GitTarget written through the writer `key`."""
        for target in self.plan.targets.values():
            if target.writable and target.worker_key == key:
                obj = self._caches["GitTarget"].objects.get((target.key.namespace, target.key.name))
                if obj is not None:
                    self.parts.events.post(obj, type_, reason, message, "Write")

    def _on_report(self, report: WriteReport) -> None:
        previous = self._reports.get(report.target)
        if previous is not None and previous.held and not report.held:
            self.parts.reconciles.again(report.target)  # list afresh what was held
        if report.commit and (previous is None or previous.commit != report.commit):
            log.info("target.pushed", target=str(report.target), commit=report.commit)
        self.parts.on_report(report)  # alerts: what landed; then kept without its documents
        self._reports[report.target] = report = dataclasses.replace(report, landed=())
        obj = self._caches["GitTarget"].objects.get((report.target.namespace, report.target.name))
        if obj is not None:
            for notice in report.notices:
                self.parts.events.post(obj, notice.type, notice.reason, notice.message, "Write")
        target = self.plan.targets.get(report.target)
        if target is not None and target.writable:
            self.parts.providers.record_report(target.worker_key, report)
        self.parts.poke.set()

    def _on_pushed(self, cursors: list[Cursor]) -> None:
        """The ack: these changes are in Git, so their streams' cursors may move."""
        self.parts.cursors.acked(cursors)

    # -- status ----------------------------------------------------------------------------
    async def _write_statuses(self) -> None:
        caches, plan = self._caches, self.plan
        for key, obj in list(caches["GitProvider"].objects.items()):
            p = plan.providers.get(key)
            if p is None or not self._speaks_for(f"GitProvider/{key[0]}/{key[1]}"):
                continue
            conds, extra = self.parts.providers.status(p)
            extra |= self.parts.reconciles.status("GitProvider", key)
            await self.parts.status.write(obj, "gitproviders", conds, extra)
        for (_, name), obj in list(caches["ClusterProvider"].objects.items()):
            cluster = plan.clusters.get(name)
            if cluster is not None and self._speaks_for(f"ClusterProvider/{name}"):
                conds, extra = self.parts.clusters.status(cluster)
                await self.parts.status.write(obj, "clusterproviders", conds, extra)
        readiness: dict[str, str] = {}
        for (ns, name), obj in list(caches["GitTarget"].objects.items()):
            t = plan.targets.get(TargetKey(ns, name))
            if t is not None and self._writes_status_of(t):
                conds, extra = self._target_status(t)
                extra |= self.parts.reconciles.status("GitTarget", (ns, name))
                ready = next(x for x in conds if x.type == c.READY)
                readiness[str(t.key)] = f"{ready.status}/{ready.reason}"
                await self.parts.status.write(obj, "gittargets", conds, extra)
        self._export_readiness(readiness)
        for kind, plural in (
            ("WatchRule", "watchrules"),
            ("ClusterWatchRule", "clusterwatchrules"),
        ):
            for key, obj in list(caches[kind].objects.items()):
                r = plan.rules.get((kind, key))
                if r is None or not self._speaks_for(f"{kind}/{key[0]}/{key[1]}"):
                    continue
                writable = r.problem is not None or not r.target or plan.targets[r.target].writable
                domain = rule_conditions(r, writable)
                streams = self._rule_streams(r)
                if streams is not None:
                    domain.append(streams)
                counted = [
                    d
                    for d in domain
                    if d.type != c.STREAMS_RUNNING or d.reason == c.WATCH_FORBIDDEN
                ]
                await self.parts.status.write(
                    obj,
                    plural,
                    domain + kstatus(counted, progressing=None),
                    {"resolvedResources": list(r.resolved)},
                )

    def _export_readiness(self, readiness: Mapping[str, str]) -> None:
        """`kubescribe_target_ready` of the targets whose status this replica writes (and of no
        other: one that moved to another replica, or was deleted, leaves no series here)."""
        for target, state in self._readiness.items():
            if readiness.get(target) != state:
                with contextlib.suppress(KeyError):
                    metrics.TARGET_READY.remove(target, state.split("/", 1)[1])
        for target, state in readiness.items():
            status, reason = state.split("/", 1)
            metrics.TARGET_READY.labels(target, reason).set(1 if status == "True" else 0)
        self._readiness = dict(readiness)

    def _rule_streams(self, r: RulePlan) -> Cond | None:
        """`StreamsRunning` of a rule: the state of the streams it feeds (None: none run
        here). A type the operator may not list/watch is `WatchForbidden`, naming it."""
        if r.problem is not None or r.target is None:
            return None
        namespaces = set(r.sources or (r.key[0],)) if r.kind == "WatchRule" else {""}
        mine = [
            run
            for run in self._watches.running.values()
            if run.spec.target == r.target
            and run.spec.rtype.gvr in r.resolved
            and run.spec.namespace in namespaces
        ]
        return streams_condition(mine) if mine else None

    def _speaks_for(self, name: str) -> bool:
        """Whether this replica writes the status of an object no writer Lease covers."""
        return self.parts.shards is None or self.parts.shards.mine(name)

    def _writes_status_of(self, t: TargetPlan) -> bool:
        """A GitTarget's status comes from the replica that writes it (its writer's owner)."""
        if self.parts.shards is None:
            return True
        if t.writable:
            return t.worker_key in self._workers
        return self.parts.shards.mine(f"GitTarget/{t.key}")

    def _target_status(self, t: TargetPlan) -> tuple[list[Cond], dict[str, Any]]:
        running = self._watches.running
        streams = [running[s.key] for s in self.plan.streams_of(t.key) if s.key in running]
        facts = TargetFacts(
            streams=len(streams),
            synced=sum(1 for r in streams if r.synced),
            owner=self.parts.shards.identity if self.parts.shards is not None else None,
        )
        if t.writable:
            cluster = t.layout.cluster if t.layout.cluster != LOCAL_CLUSTER else ""
            kustomize = self._kustomize_config(t)
            facts = dataclasses.replace(
                facts,
                resumed=all(r.informer.resumed for r in streams),
                streams_running=streams_condition(streams),
                reachable=self.parts.clusters.reachable(cluster) if cluster else None,
                attributed=attribution_condition(
                    t,
                    self.settings.attribution_sources,
                    self.parts.resolver.unresolved_streak if self.parts.resolver is not None else 0,
                ),
                encryption=self.parts.encryption.conditions(t.key),
                encryption_status=self.parts.encryption.status(t.key),
                report=self._reports.get(t.key),
                render_check_unavailable=kustomize is not None
                and kustomize.render_check_unavailable,
            )
        conds, extra = target_status(t, facts)
        moved = t.writable and self._moved(t, streams)
        if (destination := status_field(t, self._seen(t), moved)) is not None:
            extra["observedDestination"] = destination
        return conds, extra


async def _all(awaitables: list[Coroutine[Any, Any, Any]]) -> None:
    """Await them concurrently; the first failure cancels the others and is raised as is."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
