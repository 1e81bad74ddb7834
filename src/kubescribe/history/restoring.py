"""What a restore applies: an old version without what the server sets, and the reasons a
version cannot be given back faithfully. Pure."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

SERVER_SET = (
    "creationTimestamp",
    "deletionGracePeriodSeconds",
    "deletionTimestamp",
    "generation",
    "managedFields",
    "ownerReferences",
    "resourceVersion",
    "selfLink",
    "uid",
)
FIELD_MANAGER = "kubescribe-restore"


def restorable(doc: Mapping[str, Any]) -> dict[str, Any]:
    """`doc` as an apply configuration: no status, SOPS block or server-set metadata."""
    out = copy.deepcopy({k: v for k, v in doc.items() if k not in ("status", "sops")})
    metadata = out.get("metadata")
    if isinstance(metadata, dict):
        for key in SERVER_SET:
            metadata.pop(key, None)
    return out


def refusal(doc: Mapping[str, Any]) -> str | None:
    """Why this version cannot be restored as it was, or None."""
    if doc.get("kind") == "Secret" and doc.get("type") == "kubernetes.io/service-account-token":
        return (
            "a service account token Secret: its token is issued by the cluster and was never "
            "written to Git; create the Secret anew and let the token controller fill it"
        )
    if doc.get("kind") == "Event" or doc.get("kind") == "Lease":
        return f"a {doc.get('kind')} records what happened; giving an old one back means nothing"
    return None


def controlled_by(live: Mapping[str, Any] | None) -> str | None:
    """`Kind/name` of the controller that owns the live object (it would undo a restore)."""
    if not live:
        return None
    for ref in (live.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('name')}"
    return None
