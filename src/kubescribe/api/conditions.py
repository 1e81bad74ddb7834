"""Status conditions: stable types and reasons, and pure helpers that update condition lists.

Conditions are handled as camelCase dicts, ready to be patched into `.status.conditions`
(`models.Condition` is the typed form).
A True domain condition uses its own type as reason (e.g. `Pushed`/`Pushed`).
"""

from __future__ import annotations

import re
from typing import Any, Final

from kubescribe.api.models import ConditionStatus

# kstatus condition types
READY: Final = "Ready"
RECONCILING: Final = "Reconciling"
STALLED: Final = "Stalled"

# domain condition types
VALIDATED: Final = "Validated"
STREAMS_RUNNING: Final = "StreamsRunning"
GIT_PATH_ACCEPTED: Final = "GitPathAccepted"
PUSHED: Final = "Pushed"
DOCUMENTS_WRITTEN: Final = "DocumentsWritten"
ENCRYPTION_CONFIGURED: Final = "EncryptionConfigured"
SOURCE_NAMESPACE_AUTHORIZED: Final = "SourceNamespaceAuthorized"
SOURCE_CLUSTER_REACHABLE: Final = "SourceClusterReachable"
AUTHORS_ATTRIBUTED: Final = "AuthorsAttributed"
RENDER_MATCHES_LIVE: Final = "RenderMatchesLive"

# reasons
PROGRESSING: Final = "Progressing"
WATCH_FORBIDDEN: Final = "WatchForbidden"
SUSPENDED: Final = "Suspended"
PROVIDER_NOT_FOUND: Final = "ProviderNotFound"
TARGET_NOT_FOUND: Final = "TargetNotFound"
SECRET_NOT_FOUND: Final = "SecretNotFound"
BRANCH_NOT_ALLOWED: Final = "BranchNotAllowed"
PATH_OVERLAP: Final = "PathOverlap"
INVALID_TEMPLATE: Final = "InvalidTemplate"
INVALID_PATH: Final = "InvalidPath"
ENCRYPTION_MISSING: Final = "EncryptionMissing"
INVALID_KEY: Final = "InvalidKey"
INVALID_SENSITIVE_TYPE: Final = "InvalidSensitiveType"
REMOTE_UNREACHABLE: Final = "RemoteUnreachable"
PUSH_REJECTED: Final = "PushRejected"
# Git transport and GitProvider reasons (values of `git.credentials.GitFailure` and friends).
AUTHENTICATION_FAILED: Final = "AuthenticationFailed"
HOST_KEY_UNKNOWN: Final = "HostKeyUnknown"
HOST_KEY_MISMATCH: Final = "HostKeyMismatch"
CERTIFICATE_UNTRUSTED: Final = "CertificateUntrusted"
REPOSITORY_NOT_FOUND: Final = "RepositoryNotFound"
PERMISSION_DENIED: Final = "PermissionDenied"
URL_REFUSED: Final = "UrlRefused"
REDIRECT_REFUSED: Final = "RedirectRefused"
INVALID_CREDENTIALS: Final = "InvalidCredentials"
KNOWN_HOSTS_NOT_FOUND: Final = "KnownHostsNotFound"
SIGNING_KEY_MISSING: Final = "SigningKeyMissing"
SIGNING_KEY_INVALID: Final = "SigningKeyInvalid"
SOURCE_NAMESPACE_NOT_AUTHORIZED: Final = "SourceNamespaceNotAuthorized"
CROSS_NAMESPACE_SOURCES_DISABLED: Final = "CrossNamespaceSourcesDisabled"
CLUSTER_PROVIDER_NOT_FOUND: Final = "ClusterProviderNotFound"
CLUSTER_NOT_ALLOWED: Final = "ClusterNotAllowed"
CLUSTER_NOT_READY: Final = "ClusterNotReady"
CLUSTER_CONFLICT: Final = "ClusterConflict"
KUBECONFIG_REFUSED: Final = "KubeconfigRefused"
NO_ATTRIBUTION_SOURCE: Final = "NoAttributionSource"
AUTHORS_UNRESOLVED: Final = "AuthorsUnresolved"
KUSTOMIZE_UNSUPPORTED: Final = "KustomizeUnsupported"
RENDER_MISMATCH: Final = "RenderMismatch"

STALLED_REASONS: Final = frozenset(
    {
        PROVIDER_NOT_FOUND,
        TARGET_NOT_FOUND,
        SECRET_NOT_FOUND,
        BRANCH_NOT_ALLOWED,
        PATH_OVERLAP,
        INVALID_TEMPLATE,
        INVALID_PATH,
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
        INVALID_CREDENTIALS,
        KNOWN_HOSTS_NOT_FOUND,
        SIGNING_KEY_MISSING,
        SIGNING_KEY_INVALID,
        SOURCE_NAMESPACE_NOT_AUTHORIZED,
        CROSS_NAMESPACE_SOURCES_DISABLED,
        CLUSTER_PROVIDER_NOT_FOUND,
        CLUSTER_NOT_ALLOWED,
        CLUSTER_CONFLICT,
        KUBECONFIG_REFUSED,
        KUSTOMIZE_UNSUPPORTED,
    }
)
"""Reasons that need a change by a user: a False condition with one makes the object Stalled."""

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
