"""Who a document is: the identity of a Kubernetes object, independent of where its file lives."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

CLUSTER_SCOPE = "_cluster"
CORE_GROUP = "core"


@dataclass(frozen=True, order=True)
class Identity:
    """(API group, kind, namespace, name). Versions are deliberately not part of it: the same
    object served at two versions is one document."""

    group: str
    kind: str
    namespace: str
    name: str

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


@dataclass(frozen=True, order=True)
class ResourceType:
    """A served resource: group, version, plural resource name, kind and scope."""

    group: str
    version: str
    resource: str
    kind: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def gvr(self) -> str:
        return f"{self.group or CORE_GROUP}/{self.version}/{self.resource}"


def split_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def identity_of(obj: Mapping[str, Any]) -> Identity | None:
    """The identity of a parsed document, or None when it is not a Kubernetes object."""
    api_version = obj.get("apiVersion")
    kind = obj.get("kind")
    meta = obj.get("metadata")
    if (
        not isinstance(api_version, str)
        or not isinstance(kind, str)
        or not isinstance(meta, Mapping)
    ):
        return None
    name = meta.get("name")
    namespace = meta.get("namespace") or ""
    if not isinstance(name, str) or not name or not isinstance(namespace, str):
        return None
    return Identity(split_api_version(api_version)[0], kind, namespace, name)


# The emitter writes `apiVersion`, `kind`, `metadata.name`, `metadata.namespace` first, each
# on a line of its own, so a file this project wrote is identified without a YAML parse.
_HEADER = re.compile(
    rb"\AapiVersion: (?P<api>[^\n'\"]+)\nkind: (?P<kind>[^\n'\"]+)\nmetadata:\n"
    rb"  name: (?P<name>[^\n'\"]+)\n(?:  namespace: (?P<ns>[^\n'\"]+)\n)?"
)


def identity_from_header(data: bytes) -> Identity | None:
    """Fast path for files in the canonical layout; None means "parse the YAML instead"."""
    match = _HEADER.match(data)
    if match is None:
        return None
    ns = match.group("ns")
    return Identity(
        split_api_version(match.group("api").decode())[0],
        match.group("kind").decode(),
        ns.decode() if ns else "",
        match.group("name").decode(),
    )


def listing_order(identity: Identity) -> tuple[str, str, str, str]:
    """How documents are ordered where they are listed (commits, status): by namespace,
    name, group and kind."""
    return (identity.namespace, identity.name, identity.group, identity.kind)
