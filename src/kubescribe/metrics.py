"""Prometheus metrics, on a private registry. Labels stay low-cardinality: object names only
for GitTargets (`target`, namespace/name), whose series the replica writing the target owns and
removes when it stops writing it (hand-over, deletion), so a sum over replicas never counts a
target twice."""

from __future__ import annotations

import contextlib
import platform
import threading
from collections.abc import Callable

import pygit2
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from kubescribe import __version__

REGISTRY = CollectorRegistry(auto_describe=True)
# process_* (CPU, resident memory, open files, start time), python_info and python_gc_*: the
# default registry's collectors, on ours.
ProcessCollector(registry=REGISTRY)
PlatformCollector(registry=REGISTRY)
GCCollector(registry=REGISTRY)

BUILD_INFO = Gauge(
    "kubescribe_build_info",
    "Always 1; the labels name the running build (kubescribe, Python and libgit2 versions).",
    ["version", "python", "libgit2"],
    registry=REGISTRY,
)
BUILD_INFO.labels(__version__, platform.python_version(), pygit2.LIBGIT2_VERSION).set(1)

WATCH_EVENTS = Counter(
    "kubescribe_watch_events_total", "Watch events received.", ["gvr", "type"], registry=REGISTRY
)
FILTERED = Counter(
    "kubescribe_filtered_objects_total",
    "Objects left out of Git by the noise policy or a rule, by reason.",
    ["reason"],
    registry=REGISTRY,
)
STRIPPED = Counter(
    "kubescribe_stripped_metadata_total",
    "Bookkeeping labels and annotations left out of mirrored documents, by noise rule reason.",
    ["reason"],
    registry=REGISTRY,
)
CONTENT_FALLBACKS = Counter(
    "kubescribe_content_fallbacks_total",
    "Documents written in Full although their target asks for Owned content (their"
    " managedFields were missing or unusable), by reason.",
    ["reason"],
    registry=REGISTRY,
)
DUPLICATES = Gauge(
    "kubescribe_duplicate_documents",
    "Documents in a target folder that repeat an identity held earlier in tree order"
    " (left alone; the first one is the document).",
    ["target"],
    registry=REGISTRY,
)
OVERSIZED = Gauge(
    "kubescribe_oversized_files",
    "Files in a target folder too large to read (over 4 MiB, or over 250,000 YAML nodes);"
    " left alone and never parsed.",
    ["target"],
    registry=REGISTRY,
)
REFUSED_FILES = Counter(
    "kubescribe_refused_files_total",
    "Files from Git refused before parsing, by reason (too_large, too_many_nodes, too_deep,"
    " aliases).",
    ["reason"],
    registry=REGISTRY,
)
WATCH_RESTARTS = Counter(
    "kubescribe_watch_restarts_total",
    "Watch streams restarted, by reason (timeout, dead, error, gone).",
    ["gvr", "reason"],
    registry=REGISTRY,
)
RELISTS = Counter(
    "kubescribe_relists_total", "Full re-lists after 410 Gone.", ["gvr"], registry=REGISTRY
)
BACKLOG_EVENTS = Counter(
    "kubescribe_resume_backlog_events_total",
    "Events a watch resumed from a saved cursor replayed up to its horizon, by result (applied:"
    " still the object's current state; stale: superseded, skipped so no commit echoes history).",
    ["gvr", "result"],
    registry=REGISTRY,
)
BACKLOG_LOOKUPS = Counter(
    "kubescribe_resume_backlog_lookups_total",
    "Reads of current states to check a resumed watch's backlog, by kind (object: a LIST of"
    " one name; list: the whole collection, once a backlog names many objects).",
    ["gvr", "kind"],
    registry=REGISTRY,
)
STREAMS = Gauge(
    "kubescribe_watch_streams",
    "Watch connections held for mirrored types, by resource (group/version/resource): one per"
    " type where the operator may read it in every namespace, else one per target and namespace.",
    ["resource"],
    registry=REGISTRY,
)
TARGET_STREAMS = Gauge(
    "kubescribe_target_streams",
    "Target streams (a target's type in a namespace, or cluster-wide) the watch streams feed.",
    registry=REGISTRY,
)
GIT_POOL_SIZE = Gauge(
    "kubescribe_git_pool_threads",
    "Threads of the pool that does the writers' Git work.",
    registry=REGISTRY,
)
GIT_POOL_BUSY = Gauge(
    "kubescribe_git_pool_busy", "Git pool threads doing a writer's work now.", registry=REGISTRY
)
GIT_POOL_WAITING = Gauge(
    "kubescribe_git_pool_waiting",
    "Writers' Git calls waiting for a pool thread (at most one per writer).",
    registry=REGISTRY,
)
WRITER_RELEASES = Counter(
    "kubescribe_writer_idle_releases_total",
    "Times an idle writer closed its clone and dropped its build cache (rebuilt at its next"
    " write).",
    registry=REGISTRY,
)
DISCOVERY_MISSING = Gauge(
    "kubescribe_discovery_missing_types",
    "Served types missing from discovery, still within the discovery grace.",
    registry=REGISTRY,
)
THREADS = Gauge(
    "kubescribe_threads",
    "Threads of the operator process (native ones included where /proc tells).",
    registry=REGISTRY,
)


def _threads() -> float:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Threads:"):
                    return float(line.split()[1])
    except OSError:
        pass
    return float(threading.active_count())


THREADS.set_function(_threads)
_STREAM_RESOURCES: set[str] = set()
COMMITS = Counter(
    "kubescribe_commits_total",
    "Commits created, by kind (change, snapshot).",
    ["kind"],
    registry=REGISTRY,
)
PUSHES = Counter(
    "kubescribe_pushes_total",
    "Push attempts, by result (ok, rejected, denied, failed).",
    ["result"],
    registry=REGISTRY,
)
CACHE_PACKS = Gauge(
    "kubescribe_cache_packs",
    "Pack files in a branch's object cache (each batch adds one; a tidy merges the small ones).",
    ["branch"],
    registry=REGISTRY,
)
CACHE_BYTES = Gauge(
    "kubescribe_cache_bytes",
    "Bytes a namespace's Git clones hold in the object cache (after each fetch, write and tidy).",
    ["namespace"],
    registry=REGISTRY,
)
CACHE_QUOTA_REFUSALS = Counter(
    "kubescribe_cache_quota_refusals_total",
    "Fetches and writes refused because the namespace's clones would exceed its cache quota.",
    ["namespace"],
    registry=REGISTRY,
)
LIBGIT2_CACHED = Gauge(
    "kubescribe_libgit2_cached_bytes",
    "Memory held by libgit2's object cache (bounded at 32 MiB), sampled after each batch.",
    registry=REGISTRY,
)
REPACKS = Counter(
    "kubescribe_cache_repacks_total",
    "Object cache tidies: small packs merged, or one pack of the reachable objects (a repack).",
    registry=REGISTRY,
)
REMOTE_PACK_MERGES = Counter(
    "kubescribe_remote_pack_merges_total",
    "Merges of a file:// remote's small packs (each push to it adds one).",
    registry=REGISTRY,
)
BACKPRESSURE = Counter(
    "kubescribe_backpressure_seconds_total",
    "Time watch readers waited for room in a branch worker's queue (the writer is behind or"
    " the remote is down; nothing is dropped, the watch resumes where it stopped).",
    ["branch"],
    registry=REGISTRY,
)
QUEUE_DEPTH = Gauge(
    "kubescribe_queue_depth", "Changes waiting in a branch worker.", ["branch"], registry=REGISTRY
)
LAG = Histogram(
    "kubescribe_event_to_push_seconds",
    "Time from a watch event to the push that carries it.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
REFUSED = Counter(
    "kubescribe_refused_documents_total",
    "Documents not written because their content was refused (e.g. no encryption).",
    ["reason"],
    registry=REGISTRY,
)
RENDER_CHECKS = Counter(
    "kubescribe_render_checks_total",
    "Objects compared with `kustomize build` of their GitTarget (spec.kustomize.renderCheck).",
    # match, mismatch, failed (the build itself failed), unavailable (no kustomize binary)
    ["result"],
    registry=REGISTRY,
)
RENDER_CHECK_SECONDS = Histogram(
    "kubescribe_render_check_seconds",
    "Time of one render check (export of the folder and `kustomize build`).",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
DOCUMENTS = Gauge(
    "kubescribe_target_documents",
    "Documents in a GitTarget's folder.",
    ["target"],
    registry=REGISTRY,
)
BASE_DESCENDS = Gauge(
    "kubescribe_write_branch_descends_from_base",
    "1 while a write branch descends from its base branch (as last fetched), else 0.",
    ["writer", "base"],
    registry=REGISTRY,
)
RETAINED = Gauge(
    "kubescribe_target_retained_documents",
    "Documents kept by the prune mode although gone from the cluster.",
    ["target"],
    registry=REGISTRY,
)
PROBES = Counter(
    "kubescribe_remote_probes_total",
    "GitProvider remote probes, by probe (read, write) and result (a condition reason).",
    ["probe", "result"],
    registry=REGISTRY,
)
PROVIDERS_BLOCKED = Gauge(
    "kubescribe_providers_blocked",
    "GitProviders whose GitTargets wait, by reason (no credentials, no signing key, ...).",
    ["reason"],
    registry=REGISTRY,
)

# -- alerts (controller/alerts.py) -------------------------------------------------------------
ALERT_MESSAGES = Counter(
    "kubescribe_alert_messages_total",
    "Alert messages by result: sent, failed (every attempt failed), dropped (queue full or the"
    " Alert gone), ratelimited (past spec.maxMessagesPerHour).",
    ["result"],
    registry=REGISTRY,
)
ALERT_QUEUE_DEPTH = Gauge(
    "kubescribe_alert_queue_depth", "Alert messages waiting for delivery.", registry=REGISTRY
)

# -- attribution (audit facts, admission records) ----------------------------------------------
CHANGES_IGNORED = Counter(
    "kubescribe_changes_ignored_total",
    "Changes dropped by a GitTarget's spec.ignore.changesBy, by the GitTarget's namespace and"
    " the list that matched (user, serviceaccount, fieldmanager).",
    ["target_namespace", "by"],
    registry=REGISTRY,
)
IGNORE_UNATTRIBUTED = Counter(
    "kubescribe_ignore_unattributed_total",
    "Changes recorded although spec.ignore.changesBy names users or service accounts, because"
    " no author was known (attribution not wired, or no fact within the grace).",
    ["target_namespace"],
    registry=REGISTRY,
)
ATTRIBUTION = Counter(
    "kubescribe_attribution_total",
    "Author lookups, by outcome (exact, delete, collection, named, ambiguous, unresolved).",
    ["outcome"],
    registry=REGISTRY,
)
ATTRIBUTION_WAIT = Histogram(
    "kubescribe_attribution_wait_seconds",
    "Time an author lookup waited for its audit fact (grace wait).",
    buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30),
    registry=REGISTRY,
)
AUDIT_EVENTS = Counter(
    "kubescribe_audit_events_total",
    "Audit events received, by outcome (fact, skipped_*).",
    ["outcome"],
    registry=REGISTRY,
)
AUDIT_LAST_EVENT = Gauge(
    "kubescribe_audit_last_event_timestamp_seconds",
    "Unix time of the last audit batch received on a route (0: none yet); absent without an "
    "audit receiver.",
    ["route"],
    registry=REGISTRY,
)
ROUTE_FACTS = Counter(
    "kubescribe_attribution_route_facts_total",
    "Facts indexed per route (an audit route, @admission for the change webhook, @commitrequests),"
    " also those other replicas received (through Redis).",
    ["route"],
    registry=REGISTRY,
)
ROUTE_LAST_FACT = Gauge(
    "kubescribe_attribution_route_last_record_timestamp_seconds",
    "Unix time a route's last record (a fact, or an audit batch's mark) reached the fact index.",
    ["route"],
    registry=REGISTRY,
)
ROUTE_TOLD_UNTIL = Gauge(
    "kubescribe_attribution_route_watermark_timestamp_seconds",
    "The latest completed request a route's records tell of (its watermark): a change observed"
    " well before it whose fact is missing waits no longer.",
    ["route"],
    registry=REGISTRY,
)
ROUTE_SILENT = Gauge(
    "kubescribe_attribution_route_silent",
    "1 while a route the resolver reads has had no record for --audit-silent-after.",
    ["route"],
    registry=REGISTRY,
)
ATTRIBUTION_SETTLED = Counter(
    "kubescribe_attribution_settled_early_total",
    "Author lookups that stopped waiting before the grace, by route and why (silent: the route"
    " has told nothing for --audit-silent-after; watermark: it has told what came later).",
    ["route", "why"],
    registry=REGISTRY,
)
REDIS_UP = Gauge(
    "kubescribe_redis_up",
    "1 while the last Redis operation of a store (facts) succeeded, 0 after a failure; "
    "absent without Redis.",
    ["store"],
    registry=REGISTRY,
)
AUDIT_REQUESTS = Counter(
    "kubescribe_audit_requests_total",
    "Audit webhook requests, by HTTP status code.",
    ["code"],
    registry=REGISTRY,
)
FACTS = Gauge(
    "kubescribe_attribution_facts",
    "Facts held in the local fact index, by source (an audit route, @commitrequests).",
    ["source"],
    registry=REGISTRY,
)
FACTS_EVICTED = Counter(
    "kubescribe_attribution_facts_evicted_total",
    "Facts dropped from the local fact index, by source and reason (capacity, expired).",
    ["source", "reason"],
    registry=REGISTRY,
)
REFUSED_REQUESTS = Counter(
    "kubescribe_webhook_refusals_total",
    "Audit and admission requests refused, by server (audit, admission) and reason.",
    ["server", "reason"],
    registry=REGISTRY,
)
FACT_STORE_ERRORS = Counter(
    "kubescribe_fact_store_errors_total",
    "Fact store backend errors, by operation (add, read).",
    ["op"],
    registry=REGISTRY,
)
ADMISSION_REVIEWS = Counter(
    "kubescribe_admission_reviews_total",
    "Admission reviews answered, by result (recorded, ignored, oversized, failed, invalid).",
    ["result"],
    registry=REGISTRY,
)
WINDOWS_OPENED = Counter(
    "kubescribe_windows_opened_total",
    "Commit windows opened (changes of one author to one target that become one commit).",
    registry=REGISTRY,
)
WINDOWS_CLOSED = Counter(
    "kubescribe_windows_closed_total",
    "Commit windows closed, by reason (silence, age, author, size, target, request, shutdown).",
    ["reason"],
    registry=REGISTRY,
)
COMMIT_REQUESTS = Counter(
    "kubescribe_commit_requests_total",
    "CommitRequests finished, by reason (Pushed, NothingToCommit, or why they failed).",
    ["reason"],
    registry=REGISTRY,
)
COMMIT_REQUESTS_EXPIRED = Counter(
    "kubescribe_commit_requests_expired_total",
    "Finished CommitRequests deleted once their spec.ttlAfterFinished had passed.",
    registry=REGISTRY,
)
REDIS_REJECTED = Counter(
    "kubescribe_redis_entries_rejected_total",
    "Entries read from Redis without a valid signature, ignored, by kind (fact, cursor,"
    " known: a member of a cursor's known-object set).",
    ["kind"],
    registry=REGISTRY,
)
TENANT_READ_REVIEWS = Counter(
    "kubescribe_tenant_read_reviews_total",
    "SubjectAccessReviews of a tenant ServiceAccount's reads (--tenant-service-account), by "
    "result (allowed, denied, failed).",
    ["result"],
    registry=REGISTRY,
)
CURSOR_SAVES = Counter(
    "kubescribe_cursor_saves_total",
    "Resume cursors saved after a push, by result (ok, error).",
    ["result"],
    registry=REGISTRY,
)
CURSOR_LAG = Histogram(
    "kubescribe_cursor_save_lag_seconds",
    "Time from a push to its resume cursor being saved (the journal lag).",
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30),
    registry=REGISTRY,
)
LEASE_TRANSITIONS = Counter(
    "kubescribe_writer_lease_transitions_total",
    "Branch writer Leases acquired, released (hand-over), or lost by this replica.",
    ["event"],
    registry=REGISTRY,
)
OWNED_WRITERS = Gauge(
    "kubescribe_owned_writers", "Branch writers this replica owns.", registry=REGISTRY
)
LIVE_REPLICAS = Gauge(
    "kubescribe_live_replicas", "Replicas with a live membership Lease.", registry=REGISTRY
)
HANDOVER = Histogram(
    "kubescribe_handover_seconds",
    "Time to hand a branch writer over: flush its batch, push, save cursors, release.",
    buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
ATTRIBUTION_SOURCES = Counter(
    "kubescribe_attribution_sources_total",
    "Author resolutions by source (audit, admission, none) and outcome.",
    ["source", "outcome"],
    registry=REGISTRY,
)
WEBHOOK_CERT_EXPIRY = Gauge(
    "kubescribe_webhook_certificate_expiry_timestamp_seconds",
    "When the operator-managed webhook certificates in use expire (Unix seconds), by "
    "certificate (serving, ca).",
    ["certificate"],
    registry=REGISTRY,
)
WEBHOOK_CERT_ROTATIONS = Counter(
    "kubescribe_webhook_certificate_rotations_total",
    "Changes this replica wrote to the webhook certificate Secret, by event (created, "
    "serving_expiring, serving_hosts_changed, ca_staged, ca_promoted, ca_dropped, ...).",
    ["event"],
    registry=REGISTRY,
)
WEBHOOK_CERT_ERRORS = Counter(
    "kubescribe_webhook_certificate_errors_total",
    "Failures of the webhook certificate upkeep, by reason (SecretForbidden, SecretInvalid, "
    "WebhookConfigurationForbidden, ApiserverConfigForbidden, ...Unavailable).",
    ["reason"],
    registry=REGISTRY,
)
RECONCILE_ERRORS = Counter(
    "kubescribe_reconcile_errors_total",
    "Reconcile passes that failed and were retried, by cause (api: the API server or the network;"
    " crashed: an unexpected error, logged as reconcile.crashed).",
    ["cause"],
    registry=REGISTRY,
)
PLAN_FAILURES = Gauge(
    "kubescribe_plan_failures",
    "Objects whose spec the plan compiler could not evaluate (SpecNotEvaluated), by kind.",
    ["kind"],
    registry=REGISTRY,
)

# -- per target: owned by the replica that writes the target, removed when it stops ----------
LAST_PUSH = Gauge(
    "kubescribe_target_last_push_timestamp_seconds",
    "When this replica last pushed a commit of a GitTarget (Unix seconds); absent until its first"
    " push of the target since it took the target's branch.",
    ["target"],
    registry=REGISTRY,
)
OLDEST_PENDING = Gauge(
    "kubescribe_target_oldest_pending_change_seconds",
    "Age of the oldest change of a GitTarget seen but not yet pushed (0: nothing pending);"
    " computed at scrape time, so it grows while the remote is down or the writer is stuck.",
    ["target"],
    registry=REGISTRY,
)
TARGET_REFUSED = Gauge(
    "kubescribe_target_refused_documents",
    "Documents of a GitTarget not written as of its last write (refused content, a path Git"
    " refuses, a conflict, a duplicate or oversized file; DocumentsWritten names them).",
    ["target"],
    registry=REGISTRY,
)
PER_TARGET = (DOCUMENTS, RETAINED, DUPLICATES, OVERSIZED, LAST_PUSH, OLDEST_PENDING, TARGET_REFUSED)
PER_BRANCH = (QUEUE_DEPTH, BACKPRESSURE, CACHE_PACKS)

_target_owners: dict[str, object] = {}


def claim_target(target: str, owner: object, pending_age: Callable[[], float]) -> None:
    """`owner` (a branch worker) writes `target` from now on: its series are the owner's, and
    the age of its oldest pending change is `pending_age()` at each scrape."""
    _target_owners[target] = owner
    OLDEST_PENDING.labels(target).set_function(pending_age)


def owns_target(target: str, owner: object) -> bool:
    return _target_owners.get(target) is owner


def forget_target(target: str, owner: object) -> None:
    """Remove `target`'s series if `owner` still owns them (not when another worker of this
    replica took the target meanwhile)."""
    if _target_owners.get(target) is not owner:
        return
    del _target_owners[target]
    for gauge in PER_TARGET:
        with contextlib.suppress(KeyError):
            gauge.remove(target)


def forget_branch(branch: str) -> None:
    """Remove a branch writer's series (`<url>#<branch>`) once it stopped here."""
    for family in PER_BRANCH:
        with contextlib.suppress(KeyError):
            family.remove(branch)


# -- set by the reconcile loop -----------------------------------------------------------------
TARGET_READY = Gauge(
    "kubescribe_target_ready",
    "1 while a GitTarget is Ready, 0 otherwise; `reason` is its Ready reason (see the README's"
    " troubleshooting table). Exported by the replica that writes the target's status.",
    ["target", "reason"],
    registry=REGISTRY,
)
CACHE_QUOTA = Gauge(
    "kubescribe_cache_quota_bytes",
    "Bytes each namespace's clones may hold in the object cache (--cache-quota-per-namespace;"
    " 0: no quota).",
    registry=REGISTRY,
)


def export_streams(connections: dict[str, int], target_streams: int) -> None:
    """The watch connections per resource now (a resource no longer watched leaves no series)."""
    for gone in _STREAM_RESOURCES - connections.keys():
        with contextlib.suppress(KeyError):
            STREAMS.remove(gone)
    for resource, count in connections.items():
        STREAMS.labels(resource).set(count)
    _STREAM_RESOURCES.clear()
    _STREAM_RESOURCES.update(connections)
    TARGET_STREAMS.set(target_streams)
