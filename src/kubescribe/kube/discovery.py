"""Aggregated discovery (apidiscovery.k8s.io/v2): every served resource in two requests."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubescribe.kube.client import KubeClient
from kubescribe.mirror.identity import ResourceType

AGGREGATED = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,"
    "application/json"
)


@dataclass(frozen=True)
class Discovered:
    """A watchable resource and whether its version is the group's preferred one."""

    rtype: ResourceType
    preferred: bool


def parse_aggregated(doc: Mapping[str, Any]) -> list[Discovered]:
    """Resources that can be listed and watched, from an APIGroupDiscoveryList."""
    found: list[Discovered] = []
    for group in doc.get("items") or []:
        group_name = (group.get("metadata") or {}).get("name", "")
        for index, version in enumerate(group.get("versions") or []):
            if version.get("freshness") == "Stale":
                continue
            for res in version.get("resources") or []:
                verbs = set(res.get("verbs") or [])
                if not {"list", "watch"} <= verbs:
                    continue
                kind = (res.get("responseKind") or {}).get("kind", "")
                found.append(
                    Discovered(
                        ResourceType(
                            group=group_name,
                            version=version["version"],
                            resource=res["resource"],
                            kind=kind,
                            namespaced=res.get("scope") == "Namespaced",
                        ),
                        preferred=index == 0,
                    )
                )
    return found


async def discover(client: KubeClient) -> list[Discovered]:
    """All list+watch resources of the core group and every API group (subresources excluded:
    aggregated discovery lists them separately under `subresources`)."""
    found: list[Discovered] = []
    for path in ("/api", "/apis"):
        doc = await client.get(path, accept=AGGREGATED)
        if doc.get("kind") != "APIGroupDiscoveryList":
            raise RuntimeError(f"{path}: the API server does not serve aggregated discovery")
        found.extend(parse_aggregated(doc))
    return found


def index_by_group_resource(found: Iterable[Discovered]) -> dict[tuple[str, str], list[Discovered]]:
    by_gr: dict[tuple[str, str], list[Discovered]] = {}
    for item in found:
        by_gr.setdefault((item.rtype.group, item.rtype.resource), []).append(item)
    return by_gr
