"""GitProviders at run time: credentials, known hosts and signing keys from Secrets, probes of
the remote, who each branch worker writes as, and the provider's status.

Secrets and ConfigMaps are read by a direct GET when a provider appears or changes and again
every `refresh_interval` seconds (a new `resourceVersion` rebuilds the credentials and probes
again). Their data lives only in the `Credentials` and `SigningKey` built from it: never in a
cache of objects, never in a log line, a condition message or an exception.

Conditions of a GitProvider (besides `Validated`, from the plan):

* `Readable`: the read probe (the ref advertisement, like `git ls-remote`), or why the
  credentials could not be read. Ready follows it.
* `Writable`: the push probe (receive-pack is offered to the credentials; nothing is sent), and
  the outcome of real pushes by the branch workers that use the provider's credentials. False
  only on an explicit refusal; Unknown when the probe could not run. A probe that cannot run
  never clears a proven denial, and the push probe (which cannot see hooks or branch
  protection) never clears a denial seen on a real push: only a later accepted push does, or
  new credentials.
* `SigningKeyLoaded` (with `spec.signing`): the key commits are signed with, published in
  `status.signingKey`. While it is not loaded the provider's GitTargets write nothing: there is
  no unsigned fallback.

Two GitProviders of one namespace for one repository share the branch workers (one writer per
namespace, normalized URL and branch). A worker pushes with the credentials of the provider most
likely to be allowed to (Writable True, then Unknown; then by name), and signs with the key of
the first provider that configures signing. Providers of another namespace never lend theirs:
writers of two namespaces on one branch race through the fetch-rebuild-retry path.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pygit2
import structlog

from kubescribe import metrics
from kubescribe.api import conditions as c
from kubescribe.api.models import GitProviderSpec
from kubescribe.attribution.health import RouteReports
from kubescribe.controller.keysecrets import SecretUnavailable
from kubescribe.controller.plan import ObjKey, Plan, Problem, ProviderPlan, WorkerKey
from kubescribe.controller.provider_evidence import NOT_PROBED, Evidence, combine, push_evidence
from kubescribe.controller.provider_sources import Sources, read_sources, signing_condition
from kubescribe.controller.status import Cond, kstatus
from kubescribe.git.probe import RemoteProbe, Verdict, probe_remote, use_home
from kubescribe.git.records import WriteReport
from kubescribe.git.repo import CommitSigner, MissingSigner
from kubescribe.git.transport.callbacks import remote_callbacks
from kubescribe.git.transport.known_hosts import write_host_key_preferences
from kubescribe.git.transport.secret import Credentials
from kubescribe.git.worker import BranchWorker
from kubescribe.kube.client import KubeClient

log = structlog.get_logger(__name__)

_RANK: dict[str, int] = {"True": 0, "Unknown": 1, "False": 2}
NOT_READ = Verdict("Unknown", c.PROBING, "Not probed yet")


@dataclass
class _State:
    key: ObjKey
    spec: GitProviderSpec
    spec_json: str
    sources: Sources | None = None
    unavailable: str = ""
    read_at: float = -math.inf
    readable: Verdict = NOT_READ
    writable: Evidence = NOT_PROBED
    epoch: int = 0
    probe_due: bool = True
    probed_at: float = -math.inf
    probing: asyncio.Task[None] | None = None


@dataclass
class _Slot:
    """Who a branch worker writes as: read on the worker's thread for every transfer."""

    url: str
    provider: ObjKey | None = None
    creds: Credentials = field(default_factory=Credentials)
    signer: CommitSigner | None = None
    signed_by: tuple[str, ...] = ()

    def callbacks(self) -> pygit2.RemoteCallbacks:
        return remote_callbacks(self.creds, self.url)


class Providers:
    """Runtime state of every valid GitProvider; driven by the manager's reconcile loop."""

    def __init__(
        self,
        client: KubeClient,
        *,
        cache_dir: Path,
        allow_file_urls: bool = False,
        refresh_interval: float = 10.0,
        probe_interval: float = 300.0,
        on_change: Callable[[], None] | None = None,
        routes: RouteReports | None = None,
    ) -> None:
        self.client = client
        self.routes = routes  # status.attribution: the health of the resolver's own routes
        self.allow_file_urls = allow_file_urls
        self.refresh_interval = refresh_interval
        self.probe_interval = probe_interval
        self._on_change = on_change
        self._home = cache_dir / "libgit2-home"
        self._scratch = cache_dir / "probe"
        use_home(self._home)
        self._known_hosts: tuple[str, ...] | None = None
        self._blocked_reasons: set[str] = set()
        self._states: dict[ObjKey, _State] = {}
        self._slots: dict[WorkerKey, _Slot] = {}
        self._executor = ThreadPoolExecutor(4, thread_name_prefix="kubescribe-probe")

    def close(self) -> None:
        for state in self._states.values():
            if state.probing is not None:
                state.probing.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)

    # -- reconcile ---------------------------------------------------------------------------
    async def sync(self, providers: Mapping[ObjKey, ProviderPlan]) -> None:
        """Follow the valid providers: read their Secrets when new, changed or due, and
        start probes that are due."""
        valid = {k: p for k, p in providers.items() if p.problem is None and p.spec is not None}
        for key in [k for k in self._states if k not in valid]:
            self._drop(key)
        now = time.monotonic()
        for key, plan in valid.items():
            assert plan.spec is not None
            spec_json = plan.spec.model_dump_json()
            state = self._states.get(key)
            if state is None or state.spec_json != spec_json:
                if state is not None:
                    self._drop(key)
                state = self._states[key] = _State(key, plan.spec, spec_json)
            if now - state.read_at >= self.refresh_interval:
                await self._refresh(state)
            due = now - state.probed_at >= self.probe_interval
            if state.sources is not None and state.probing is None and (state.probe_due or due):
                self._start_probe(state)
        self._write_known_hosts()

    def reprobe(self, key: ObjKey) -> None:
        """Read the provider's Secrets again and probe the remote at the next `sync`."""
        state = self._states.get(key)
        if state is not None:
            state.read_at = -math.inf
            state.probe_due = True

    def gate(self, plan: Plan) -> None:
        """Hold back the GitTargets of providers that must not be written with: no readable
        credentials, a refused URL, or signing configured without a key."""
        for tkey, target in list(plan.targets.items()):
            provider = target.provider
            if provider is None or target.problem is not None or target.path_problem is not None:
                continue
            problem = self.blocking_problem(provider.key)
            if problem is not None:
                plan.targets[tkey] = dataclasses.replace(
                    target,
                    problem=Problem(
                        problem.reason, f"GitProvider {provider.key[1]!r}: {problem.message}"
                    ),
                )
        plan.streams = {k: s for k, s in plan.streams.items() if plan.targets[s.target].writable}
        blocked = Counter(
            problem.reason
            for key in plan.providers
            if (problem := self.blocking_problem(key)) is not None
        )
        for reason in {*blocked, *self._blocked_reasons}:
            metrics.PROVIDERS_BLOCKED.labels(reason).set(blocked.get(reason, 0))
        self._blocked_reasons = set(blocked)

    def blocking_problem(self, key: ObjKey) -> Problem | None:
        state = self._states.get(key)
        if state is None:
            return None
        sources = state.sources
        if sources is None:
            return Problem(
                c.CREDENTIALS_UNAVAILABLE, state.unavailable or "credentials not read yet"
            )
        if sources.problem is not None:
            return sources.problem
        if sources.signing_problem is not None:
            return sources.signing_problem
        if state.readable.reason == c.URL_REFUSED:
            return Problem(c.URL_REFUSED, state.readable.message)
        return None

    # -- branch workers ----------------------------------------------------------------------
    def callbacks(self, worker_key: WorkerKey, url: str) -> Any:
        """The callbacks factory for a new branch worker (follows `assign`, which must be
        called before the worker starts: a fresh slot has no credentials and no signer)."""
        slot = self._slots[worker_key] = _Slot(url)
        return slot.callbacks

    def assign(
        self, worker_key: WorkerKey, providers: Iterable[ObjKey], worker: BranchWorker
    ) -> None:
        """Choose the credentials and signing key of a worker from the providers of its
        targets; a change applies from the next transfer and cuts a retry wait short."""
        slot = self._slots.setdefault(worker_key, _Slot(worker.url))
        # Credentials and signing keys never cross the namespace of the worker's targets.
        keys = sorted({k for k in providers if k[0] == worker_key.namespace})
        states = [self._states[k] for k in keys if k in self._states]
        chosen = min(
            states,
            key=lambda s: (_RANK[s.writable.status], _RANK[s.readable.status], s.key),
            default=None,
        )
        creds = chosen.sources.creds if chosen and chosen.sources else Credentials()
        signer: CommitSigner | None = None
        signed_by: tuple[str, ...] = ()
        for state in states:
            if state.spec.signing is not None:
                loaded = state.sources.signer if state.sources else None
                if loaded is not None:
                    signer, signed_by = loaded, (*state.key, loaded.fingerprint)
                else:
                    signer, signed_by = (
                        MissingSigner(
                            f"GitProvider {state.key[1]!r} signs commits and its key is not loaded"
                        ),
                        (*state.key, ""),
                    )
                break
        if signed_by != slot.signed_by or (signer is None) != (slot.signer is None):
            slot.signer, slot.signed_by = signer, signed_by
            worker.set_signer(signer)
        provider = chosen.key if chosen else None
        if (provider, creds) != (slot.provider, slot.creds):
            slot.provider, slot.creds = provider, creds
            worker.retry_now()

    def record_report(self, worker_key: WorkerKey, report: WriteReport) -> None:
        """A worker's write outcome is evidence about the credentials it pushed with."""
        slot = self._slots.get(worker_key)
        if slot is None or slot.provider is None:
            return
        state = self._states.get(slot.provider)
        if state is None or state.sources is None:
            return
        if slot.creds is not state.sources.creds:
            return  # written with credentials the provider no longer has
        state.writable = push_evidence(state.writable, report, time.time())

    def drop_worker(self, worker_key: WorkerKey) -> None:
        self._slots.pop(worker_key, None)

    # -- status ------------------------------------------------------------------------------
    def status(self, plan: ProviderPlan) -> tuple[list[Cond], dict[str, Any]]:
        """Conditions (domain and kstatus) and extra status fields of a GitProvider."""
        extra: dict[str, Any] = {}
        if plan.normalized_url:
            extra["normalizedUrl"] = plan.normalized_url
        if self.routes is not None and self.routes.own:
            extra["attribution"] = self.routes.status()
        if plan.problem is not None:
            validated = Cond(c.VALIDATED, "False", plan.problem.reason, plan.problem.message)
            return [validated, *kstatus([validated], progressing=None)], extra
        domain = [Cond(c.VALIDATED, "True", c.VALIDATED, "Spec is valid")]
        state = self._states.get(plan.key)
        if state is None:
            return [*domain, *kstatus(domain, progressing="Reading credentials")], extra
        sources = state.sources
        problem = sources.problem if sources is not None else None
        if sources is None:
            problem = Problem(
                c.CREDENTIALS_UNAVAILABLE, state.unavailable or "credentials not read yet"
            )
        if problem is not None:
            readable = Cond(c.READABLE, "False", problem.reason, problem.message)
            writable = Cond(c.WRITABLE, "Unknown", problem.reason, "Not probed: no credentials")
        else:
            verdict = state.readable
            readable = Cond(c.READABLE, verdict.status, verdict.reason, verdict.message)
            evidence = state.writable
            writable = Cond(c.WRITABLE, evidence.status, evidence.reason, evidence.message)
        domain.append(readable)
        if state.spec.signing is not None:
            domain.append(signing_condition(state.spec.signing, sources))
            if sources is not None and sources.signer is not None:
                extra["signingKey"] = {
                    "publicKey": sources.signer.public_key_line,
                    "fingerprint": sources.signer.fingerprint,
                }
        progressing = "Probing the remote" if readable.status == "Unknown" else None
        return [*domain, writable, *kstatus(domain, progressing=progressing)], extra

    # -- internals ---------------------------------------------------------------------------
    def _drop(self, key: ObjKey) -> None:
        state = self._states.pop(key, None)
        if state is not None and state.probing is not None:
            state.probing.cancel()

    async def _refresh(self, state: _State) -> None:
        state.read_at = time.monotonic()
        try:
            sources = await read_sources(self.client, state.key, state.spec, state.sources)
        except SecretUnavailable as exc:
            state.unavailable = str(exc)
            log.warning("provider.sources_unavailable", provider=_name(state.key), error=str(exc))
            return  # keep what was read last time, if anything
        state.unavailable = ""
        if state.sources is not None and state.sources.versions == sources.versions:
            return
        first = state.sources is None
        state.sources = sources
        state.epoch += 1
        state.probe_due = True
        if not first:
            # New credentials: what was proven about the old ones no longer holds.
            state.readable = Verdict("Unknown", c.PROBING, "Credentials changed; probing again")
            state.writable = Evidence("Unknown", c.PROBING, "Credentials changed; probing again")
        log.info(
            "provider.sources_read",
            provider=_name(state.key),
            problem=sources.problem.reason if sources.problem else None,
            signing=bool(sources.signer),
        )

    def _start_probe(self, state: _State) -> None:
        state.probe_due = False
        state.probing = asyncio.get_running_loop().create_task(
            self._probe(state, state.epoch), name=f"probe {_name(state.key)}"
        )

    async def _probe(self, state: _State, epoch: int) -> None:
        assert state.sources is not None
        creds = state.sources.creds
        loop = asyncio.get_running_loop()
        try:
            result = await loop.run_in_executor(
                self._executor,
                lambda: probe_remote(
                    state.spec.url, creds, self._scratch, allow_file=self.allow_file_urls
                ),
            )
        except Exception as exc:  # a bug, not a verdict on the remote
            log.exception("provider.probe_failed", provider=_name(state.key))
            result = RemoteProbe(
                Verdict("Unknown", c.PROBE_FAILED, f"The probe failed: {type(exc).__name__}"),
                Verdict("Unknown", c.PROBE_FAILED, "Not probed"),
            )
        finally:
            state.probing = None
            state.probed_at = time.monotonic()
        if self._states.get(state.key) is not state or state.epoch != epoch:
            return
        metrics.PROBES.labels("read", result.read.reason).inc()
        metrics.PROBES.labels("write", result.write.reason).inc()
        state.readable = result.read
        probe = Evidence(
            result.write.status, result.write.reason, result.write.message, "probe", time.time()
        )
        state.writable = combine(state.writable, probe)
        log.info(
            "provider.probed",
            provider=_name(state.key),
            readable=result.read.status,
            read_reason=result.read.reason,
            writable=state.writable.status,
            write_reason=state.writable.reason,
        )
        if self._on_change is not None:
            self._on_change()

    def _write_known_hosts(self) -> None:
        """libssh2 offers the host key types listed in libgit2's homedir known_hosts: list
        every provider's keys there (trust is still decided per provider)."""
        entries = [
            entry
            for state in self._states.values()
            if state.sources is not None
            for entry in state.sources.creds.known_hosts
        ]
        fingerprint = tuple(sorted(f"{e.hosts} {e.key.hex()}" for e in entries))
        if fingerprint == self._known_hosts:
            return
        write_host_key_preferences(self._home, entries)
        self._known_hosts = fingerprint


def _name(key: ObjKey) -> str:
    return f"{key[0]}/{key[1]}"
