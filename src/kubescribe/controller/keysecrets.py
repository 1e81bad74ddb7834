"""Secrets (and ConfigMaps) that hold what the operator signs, encrypts and authenticates with:
read by a direct GET, and generated keys written (`generateWhenMissing`).

Shared by the GitProvider sources (credentials, known hosts, signing keys) and the encryption
resolver (age keys). Nothing read here is cached as an object or logged; messages name objects
and keys, never values.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from kubescribe.controller.ownership import MANAGED_BY
from kubescribe.kube.client import ApiError, KubeClient

BACKUP_ANNOTATION = "kubescribe.io/backup"


class SecretUnavailable(Exception):
    """The API server could not be asked, or refused (not a 404); the message is safe."""


async def read_object(
    client: KubeClient, plural: str, namespace: str, name: str
) -> dict[str, Any] | None:
    """The Secret or ConfigMap (`plural`), or None when there is none."""
    kind = "Secret" if plural == "secrets" else "ConfigMap"
    try:
        found: dict[str, Any] = await client.get(f"/api/v1/namespaces/{namespace}/{plural}/{name}")
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise SecretUnavailable(f"cannot read {kind} {name!r}: {exc.status} {exc.reason}") from None
    except Exception as exc:  # connection trouble: try again next time
        raise SecretUnavailable(f"cannot read {kind} {name!r}: {type(exc).__name__}") from None
    return found


async def write_generated(
    client: KubeClient,
    namespace: str,
    name: str,
    data: Mapping[str, bytes],
    *,
    backup_note: str,
    existing: Mapping[str, Any] | None,
    precondition: bool,
) -> dict[str, Any]:
    """Store generated key material: create the Secret, or add `data` to the `existing` one
    (which must be the operator's: `ownership.created_by_kubescribe`). With `precondition`
    the patch names the resourceVersion read, so two writers cannot both add a key (a 409
    is `SecretUnavailable`; the Secret is read again next time). Returns the written Secret."""
    encoded = {key: base64.b64encode(value).decode() for key, value in data.items()}
    meta: dict[str, Any] = {"labels": MANAGED_BY, "annotations": {BACKUP_ANNOTATION: backup_note}}
    try:
        if existing is None:
            written: dict[str, Any] = await client.request(
                "POST",
                f"/api/v1/namespaces/{namespace}/secrets",
                body={
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": name, "namespace": namespace, **meta},
                    "type": "Opaque",
                    "data": encoded,
                },
            )
        else:
            if precondition:
                meta["resourceVersion"] = existing["metadata"]["resourceVersion"]
            written = await client.merge_patch(
                f"/api/v1/namespaces/{namespace}/secrets/{name}",
                {"metadata": meta, "data": encoded},
            )
    except ApiError as exc:
        raise SecretUnavailable(
            f"cannot write Secret {name!r}: {exc.status} {exc.reason}"
        ) from None
    except Exception as exc:
        raise SecretUnavailable(f"cannot write Secret {name!r}: {type(exc).__name__}") from None
    return written
