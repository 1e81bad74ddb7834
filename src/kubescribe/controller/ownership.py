"""Secrets the operator reads and generates: their decoded data, how generated ones are marked,
and whether one is the operator's.

`generateWhenMissing` creates a Secret, or adds a key to one the operator created earlier; it
never writes into a Secret someone else made (a tenant who may create GitProviders but not edit
Secrets must not be able to make the operator change one for them).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = {MANAGED_BY_LABEL: "kubescribe"}


def secret_data(obj: Mapping[str, Any] | None) -> dict[str, bytes]:
    """The decoded `data` of a Secret; entries that are not base64 are left out."""
    if obj is None:
        return {}
    out: dict[str, bytes] = {}
    for name, value in (obj.get("data") or {}).items():
        try:
            out[name] = base64.b64decode(value or "", validate=True)
        except (binascii.Error, ValueError, TypeError):
            continue
    return out


def created_by_kubescribe(secret: Mapping[str, Any]) -> bool:
    labels = (secret.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(MANAGED_BY_LABEL) == MANAGED_BY[MANAGED_BY_LABEL])


def not_ours_message(name: str, what: str) -> str:
    return (
        f"Secret {name!r} exists and was not created by kubescribe: generateWhenMissing only "
        f"creates Secrets, it never writes into someone else's; add {what} to it or name "
        "another Secret"
    )
