"""Status conditions: stable types and reasons, and pure helpers that update condition lists.

Conditions are handled as camelCase dicts, ready to be patched into `.status.conditions`
(`models.Condition` is the typed form).
A True domain condition uses its own type as reason (e.g. `Pushed`/`Pushed`).
"""

from __future__ import annotations

import re
from typing import Any, Final

from kubescribe.api.schema import ConditionStatus

# The catalogue: every condition type and reason the operator writes, one line each, defined
# here only (other modules import them). A new reason is one line in the reasons below, a row in
# the README's troubleshooting table (tests/unit/test_condition_catalogue.py checks it) and, if
# only a user can fix it, an entry in STALLED_REASONS.

# kstatus condition types
READY: Final = "Ready"
RECONCILING: Final = "Reconciling"
STALLED: Final = "Stalled"

# domain condition types (a True one has its own type as reason, e.g. `Pushed`/`Pushed`)
VALIDATED: Final = "Validated"
STREAMS_RUNNING: Final = "StreamsRunning"
GIT_PATH_ACCEPTED: Final = "GitPathAccepted"
PUSHED: Final = "Pushed"
DOCUMENTS_WRITTEN: Final = "DocumentsWritten"
ENCRYPTION_CONFIGURED: Final = "EncryptionConfigured"
SOURCE_NAMESPACE_AUTHORIZED: Final = "SourceNamespaceAuthorized"
READ_AUTHORIZED: Final = "ReadAuthorized"  # WatchRule, with --tenant-service-account
SOURCE_CLUSTER_REACHABLE: Final = "SourceClusterReachable"
AUTHORS_ATTRIBUTED: Final = "AuthorsAttributed"
RENDER_MATCHES_LIVE: Final = "RenderMatchesLive"
READABLE: Final = "Readable"  # GitProvider
WRITABLE: Final = "Writable"  # GitProvider
SIGNING_KEY_LOADED: Final = "SigningKeyLoaded"  # GitProvider
AUTHOR_ATTRIBUTED: Final = "AuthorAttributed"  # CommitRequest
DELIVERY_FAILING: Final = "DeliveryFailing"  # Alert

CONDITION_TYPES: Final = frozenset(
    {
        READY,
        RECONCILING,
        STALLED,
        VALIDATED,
        STREAMS_RUNNING,
        GIT_PATH_ACCEPTED,
        PUSHED,
        DOCUMENTS_WRITTEN,
        ENCRYPTION_CONFIGURED,
        SOURCE_NAMESPACE_AUTHORIZED,
        READ_AUTHORIZED,
        SOURCE_CLUSTER_REACHABLE,
        AUTHORS_ATTRIBUTED,
        RENDER_MATCHES_LIVE,
        READABLE,
        WRITABLE,
        SIGNING_KEY_LOADED,
        AUTHOR_ATTRIBUTED,
        DELIVERY_FAILING,
    }
)

# reasons: in progress, or nothing wrong
OK: Final = "Ok"  # Reconciling or Stalled is False
PROGRESSING: Final = "Progressing"
SUSPENDED: Final = "Suspended"
PROBING: Final = "Probing"
CONNECTING: Final = "Connecting"
WAITING: Final = "Waiting"
COLLECTING: Final = "Collecting"
COMMITTING: Final = "Committing"
NOTHING_TO_COMMIT: Final = "NothingToCommit"
CONFIGURED_AUTHOR: Final = "ConfiguredAuthor"
# reasons: the spec and what it refers to (the plan compiler, controller/desired.py)
INVALID_SPEC: Final = "InvalidSpec"
PROVIDER_NOT_FOUND: Final = "ProviderNotFound"
PROVIDER_NOT_READY: Final = "ProviderNotReady"
TARGET_NOT_FOUND: Final = "TargetNotFound"
TARGET_NOT_READY: Final = "TargetNotReady"
SECRET_NOT_FOUND: Final = "SecretNotFound"
BRANCH_NOT_ALLOWED: Final = "BranchNotAllowed"
PATH_OVERLAP: Final = "PathOverlap"
INVALID_TEMPLATE: Final = "InvalidTemplate"
INVALID_PATH: Final = "InvalidPath"
INVALID_NOISE: Final = "InvalidNoise"
INVALID_IGNORE: Final = "InvalidIgnore"  # spec.ignore.changesBy
NO_MATCHING_RESOURCES: Final = "NoMatchingResources"
NAMESPACES_NOT_SUPPORTED: Final = "NamespacesNotSupported"
WATCH_FORBIDDEN: Final = "WatchForbidden"
SOURCE_NAMESPACE_NOT_AUTHORIZED: Final = "SourceNamespaceNotAuthorized"
CROSS_NAMESPACE_SOURCES_DISABLED: Final = "CrossNamespaceSourcesDisabled"
SPEC_NOT_EVALUATED: Final = "SpecNotEvaluated"  # evaluating the spec raised (a bug, logged)
RULE_NOT_AUTHORIZED: Final = "RuleNotAuthorized"
# reasons: encryption (controller/encryption.py) and documents refused by the build
ENCRYPTION_MISSING: Final = "EncryptionMissing"
ENCRYPTION_FAILED: Final = "EncryptionFailed"
REENCRYPT_FAILED: Final = "ReencryptFailed"
SECRET_UNAVAILABLE: Final = "SecretUnavailable"
INVALID_KEY: Final = "InvalidKey"
INVALID_SENSITIVE_TYPE: Final = "InvalidSensitiveType"
DUPLICATE_IDENTITY: Final = "DuplicateIdentity"  # a second document of one object
FILE_TOO_LARGE: Final = "FileTooLarge"  # a file in the folder too large to read (left alone)
PATH_CONFLICT: Final = "PathConflict"
RENDER_FAILED: Final = "RenderFailed"
KUSTOMIZE_UNSUPPORTED: Final = "KustomizeUnsupported"
KUSTOMIZATION_MISSING: Final = "KustomizationMissing"  # the kustomize root is gone: held
RENDER_MISMATCH: Final = "RenderMismatch"
RENDER_CHECK_UNAVAILABLE: Final = "RenderCheckUnavailable"  # renderCheck, but no kustomize
# reasons: writing and pushing (git/) and Git transport (`git.transport.errors.GitFailure`)
WRITE_FAILED: Final = "WriteFailed"
CACHE_UNWRITABLE: Final = "CacheUnwritable"  # the object cache's disk is full or read-only
CACHE_QUOTA_EXCEEDED: Final = "CacheQuotaExceeded"  # the namespace's clones outgrew its share
REMOTE_UNREACHABLE: Final = "RemoteUnreachable"  # only a remote that does not answer
PUSH_REJECTED: Final = "PushRejected"  # the branch moved meanwhile: a lost race, rebuilt
LOCAL_REF_MISSING: Final = "LocalRefMissing"  # a ref of the cache's bookkeeping vanished
CACHE_BUSY: Final = "CacheBusy"  # other writers' fetches held the shared cache too long
TARGET_NOT_WRITABLE: Final = "TargetNotWritable"
WORKER_STOPPED: Final = "WorkerStopped"
TRANSFER_FAILED: Final = "TransferFailed"
AUTHENTICATION_FAILED: Final = "AuthenticationFailed"
HOST_KEY_UNKNOWN: Final = "HostKeyUnknown"
HOST_KEY_MISMATCH: Final = "HostKeyMismatch"
CERTIFICATE_UNTRUSTED: Final = "CertificateUntrusted"
REPOSITORY_NOT_FOUND: Final = "RepositoryNotFound"
PERMISSION_DENIED: Final = "PermissionDenied"
URL_REFUSED: Final = "UrlRefused"
REDIRECT_REFUSED: Final = "RedirectRefused"
PROXY_UNREACHABLE: Final = "ProxyUnreachable"  # the HTTP(S) proxy did not answer
PROXY_REFUSED: Final = "ProxyRefused"  # the proxy answered with an error or wants credentials
# reasons: GitProvider credentials, probes and signing keys
INVALID_CREDENTIALS: Final = "InvalidCredentials"
KNOWN_HOSTS_NOT_FOUND: Final = "KnownHostsNotFound"
CREDENTIALS_UNAVAILABLE: Final = "CredentialsUnavailable"  # the API server could not be asked
PROBE_FAILED: Final = "ProbeFailed"
SIGNING_KEY_MISSING: Final = "SigningKeyMissing"
SIGNING_KEY_INVALID: Final = "SigningKeyInvalid"
# reasons: remote clusters
CLUSTER_PROVIDER_NOT_FOUND: Final = "ClusterProviderNotFound"
CLUSTER_NOT_ALLOWED: Final = "ClusterNotAllowed"
CLUSTER_NOT_READY: Final = "ClusterNotReady"
CLUSTER_CONFLICT: Final = "ClusterConflict"
CLUSTER_UNREACHABLE: Final = "ClusterUnreachable"
KUBECONFIG_NOT_FOUND: Final = "KubeconfigNotFound"
KUBECONFIG_REFUSED: Final = "KubeconfigRefused"
CLUSTER_ADDRESS_REFUSED: Final = "ClusterAddressRefused"  # the address policy, as for Git URLs
# reasons: the operator's webhook certificates (logs and kubescribe_webhook_certificate_errors)
SECRET_FORBIDDEN: Final = "SecretForbidden"
SECRET_INVALID: Final = "SecretInvalid"
WEBHOOK_CONFIGURATION_FORBIDDEN: Final = "WebhookConfigurationForbidden"
WEBHOOK_CONFIGURATION_UNAVAILABLE: Final = "WebhookConfigurationUnavailable"
APISERVER_CONFIG_FORBIDDEN: Final = "ApiserverConfigForbidden"
APISERVER_CONFIG_UNAVAILABLE: Final = "ApiserverConfigUnavailable"
# reasons: attribution and CommitRequests
NO_ATTRIBUTION_SOURCE: Final = "NoAttributionSource"
AUTHORS_UNRESOLVED: Final = "AuthorsUnresolved"
REQUESTER_UNKNOWN: Final = "RequesterUnknown"
AUTHOR_NOT_ALLOWED: Final = "AuthorNotAllowed"  # spec.author: the requester may not impersonate
INTERNAL_ERROR: Final = "InternalError"
# reasons: Alert delivery (controller/alerts.py)
RECEIVER_UNREACHABLE: Final = "ReceiverUnreachable"  # the webhook did not answer (retried)
RECEIVER_REJECTED: Final = "ReceiverRejected"  # the webhook answered with an error status
ALERT_QUEUE_FULL: Final = "AlertQueueFull"  # messages dropped: the delivery queue is full

STALLED_REASONS: Final = frozenset(
    {
        PROVIDER_NOT_FOUND,
        TARGET_NOT_FOUND,
        SECRET_NOT_FOUND,
        BRANCH_NOT_ALLOWED,
        PATH_OVERLAP,
        INVALID_TEMPLATE,
        INVALID_PATH,
        INVALID_IGNORE,
        ENCRYPTION_MISSING,
        INVALID_KEY,
        INVALID_SENSITIVE_TYPE,
        AUTHENTICATION_FAILED,
        HOST_KEY_UNKNOWN,
        HOST_KEY_MISMATCH,
        CERTIFICATE_UNTRUSTED,
        REPOSITORY_NOT_FOUND,
        PERMISSION_DENIED,
        URL_REFUSED,
        WATCH_FORBIDDEN,
        REDIRECT_REFUSED,
        PROXY_REFUSED,
        INVALID_CREDENTIALS,
        KNOWN_HOSTS_NOT_FOUND,
        SIGNING_KEY_MISSING,
        SIGNING_KEY_INVALID,
        SOURCE_NAMESPACE_NOT_AUTHORIZED,
        CROSS_NAMESPACE_SOURCES_DISABLED,
        RULE_NOT_AUTHORIZED,
        CLUSTER_PROVIDER_NOT_FOUND,
        CLUSTER_NOT_ALLOWED,
        CLUSTER_CONFLICT,
        KUBECONFIG_REFUSED,
        CLUSTER_ADDRESS_REFUSED,
        KUSTOMIZE_UNSUPPORTED,
        KUSTOMIZATION_MISSING,
        SPEC_NOT_EVALUATED,
        CACHE_QUOTA_EXCEEDED,
    }
)
"""Reasons that need a change by a user: a False condition with one makes the object Stalled."""

REASONS: Final = frozenset(
    value
    for name, value in dict(globals()).items()
    if name.isupper()
    and not name.startswith("_")
    and isinstance(value, str)
    and value not in CONDITION_TYPES
)
"""Every reason of the catalogue: the upper-case string constants above that are not types."""

RENDER_REASONS: Final = frozenset({KUSTOMIZE_UNSUPPORTED, RENDER_MISMATCH})
"""Refusals the render check reports (`RenderMatchesLive`), not `DocumentsWritten`."""

_KSTATUS = frozenset({READY, RECONCILING, STALLED})
_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
_MAX_MESSAGE = 32768


def set_condition(
    conditions: list[dict[str, Any]],
    type: str,
    status: ConditionStatus,
    reason: str,
    message: str,
    generation: int,
    now: str,
) -> list[dict[str, Any]]:
    """Return a copy of `conditions` with condition `type` set (appended when new).

    `lastTransitionTime` becomes `now` (RFC 3339) only when the status changes. Raises
    `ValueError` for a reason the API server would reject; over-long messages are cut.
    """
    if not _REASON.match(reason):
        raise ValueError(f"invalid condition reason {reason!r}")
    if len(message) > _MAX_MESSAGE:
        message = message[: _MAX_MESSAGE - 1] + "…"
    new = {
        "type": type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
        "observedGeneration": generation,
    }
    out: list[dict[str, Any]] = []
    for old in conditions:
        if old.get("type") != type:
            out.append(dict(old))
            continue
        if old.get("status") == status and old.get("lastTransitionTime"):
            new["lastTransitionTime"] = old["lastTransitionTime"]
        out.append(new)
    if not any(c is new for c in out):
        out.append(new)
    return out


def summarize(conditions: list[dict[str, Any]], generation: int, now: str) -> list[dict[str, Any]]:
    """Set Ready, Reconciling and Stalled (kstatus) from the domain conditions.

    The first domain condition in list order that is not True decides, by precedence:
    a False one with a reason in `STALLED_REASONS` -> Ready False, Stalled True;
    a False `Suspended` one -> Ready False, neither Reconciling nor Stalled;
    any other False one -> Ready False, Reconciling True (the operator retries);
    an Unknown one, one computed for an older generation, or none at all -> Ready Unknown,
    Reconciling True. Otherwise Ready is True. All three share the deciding reason and message.
    """
    domain = [c for c in conditions if c.get("type") not in _KSTATUS]
    false = [c for c in domain if c.get("status") == "False"]
    stalled = next((c for c in false if c.get("reason") in STALLED_REASONS), None)
    suspended = next((c for c in false if c.get("reason") == SUSPENDED), None)
    pending = next(
        (
            c
            for c in domain
            if c.get("status") != "True" or c.get("observedGeneration") != generation
        ),
        None,
    )
    ready: ConditionStatus
    flags: tuple[ConditionStatus, ConditionStatus]  # (Reconciling, Stalled)
    if stalled is not None:
        ready, flags, reason, message = (
            "False",
            ("False", "True"),
            stalled["reason"],
            stalled["message"],
        )
    elif suspended is not None:
        ready, flags = "False", ("False", "False")
        reason, message = SUSPENDED, suspended["message"]
    elif false:
        ready, flags, reason, message = (
            "False",
            ("True", "False"),
            false[0]["reason"],
            false[0]["message"],
        )
    elif pending is not None:
        ready, flags, reason = "Unknown", ("True", "False"), PROGRESSING
        message = f"{pending['type']}: {pending.get('message') or 'not yet observed'}"
    elif not domain:
        ready, flags, reason, message = "Unknown", ("True", "False"), PROGRESSING, "Reconciling"
    else:
        ready, flags, reason, message = "True", ("False", "False"), READY, "Up to date"
    out = conditions
    for type_, status in ((READY, ready), (RECONCILING, flags[0]), (STALLED, flags[1])):
        out = set_condition(out, type_, status, reason, message, generation=generation, now=now)
    return out
