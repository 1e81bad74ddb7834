"""The cluster side of `diff --to live` and `restore`: the object as served now (in the form
the mirror writes it) and a server-side apply of an old version under its own field manager."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubescribe.history.index import HistoryError
from kubescribe.history.restoring import FIELD_MANAGER
from kubescribe.kube.client import ApiError, KubeClient
from kubescribe.kube.discovery import discover
from kubescribe.mirror.identity import Identity, ResourceType, split_api_version
from kubescribe.mirror.owned import Content, keep_owned
from kubescribe.mirror.sanitize import sanitize

APPLY_PATCH = "application/apply-patch+yaml"


async def resource_of(client: KubeClient, identity: Identity, api_version: str) -> ResourceType:
    """The served resource of `identity` at `api_version` (refused when no longer served)."""
    served = [d.rtype for d in await discover(client)]
    kinds = [r for r in served if r.group == identity.group and r.kind == identity.kind]
    if not kinds:
        raise HistoryError(f"the cluster does not serve {identity.kind} ({api_version}) now")
    version = split_api_version(api_version)[1]
    exact = [r for r in kinds if r.version == version]
    if not exact:
        others = ", ".join(sorted(r.api_version for r in kinds))
        raise HistoryError(
            f"{api_version} is no longer served (the cluster serves {others}); convert the "
            "old version to a served one first"
        )
    return exact[0]


def object_path(rtype: ResourceType, identity: Identity) -> str:
    base = f"/apis/{rtype.group}/{rtype.version}" if rtype.group else f"/api/{rtype.version}"
    scope = f"/namespaces/{identity.namespace}" if rtype.namespaced else ""
    return f"{base}{scope}/{rtype.resource}/{identity.name}"


async def read_live(client: KubeClient, path: str) -> dict[str, Any] | None:
    """The object as served, or None when it does not exist."""
    try:
        found = await client.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return dict(found)


def as_mirrored(live: Mapping[str, Any], content: Content) -> dict[str, Any]:
    """The live object as a GitTarget with this content writes it."""
    owned = keep_owned(live, content).document if content.owned else None
    return sanitize(live, owned)


async def apply(
    client: KubeClient, path: str, doc: Mapping[str, Any], *, dry_run: bool, force: bool
) -> dict[str, Any]:
    """Server-side apply of `doc` under the `kubescribe-restore` field manager."""
    params = {"fieldManager": FIELD_MANAGER}
    if force:
        params["force"] = "true"
    if dry_run:
        params["dryRun"] = "All"
    result = await client.request(
        "PATCH", path, params=params, body=dict(doc), content_type=APPLY_PATCH
    )
    return dict(result)
