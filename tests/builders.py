"""Builders of what a branch worker is handed and reads back: documents, changes, snapshots,
target configurations, paths in the mirror, and the remote's documents and commits."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from typing import Any

import yaml

from kubescribe.git.targets import Committer, PlainRenderer, TargetConfig
from kubescribe.mirror.changes import Change, Cursor, Operation, PruneMode, Snapshot, TargetKey
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.layout import Layout
from kubescribe_devenv.gitremote import BareRemote, git

CONFIGMAPS = ResourceType("", "v1", "configmaps", "ConfigMap", True)
SECRETS = ResourceType("", "v1", "secrets", "Secret", True)
SERVICES = ResourceType("", "v1", "services", "Service", True)
TARGET = TargetKey("team", "mirror")
FOLDER = "clusters/dev"
COMMITTER = Committer("kubescribe", "kubescribe@example.invalid")


def ident(name: str, ns: str = "ns1", rtype: ResourceType = CONFIGMAPS) -> Identity:
    return Identity(rtype.group, rtype.kind, ns, name)


def document(
    name: str, ns: str = "ns1", rtype: ResourceType = CONFIGMAPS, **data: str
) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": rtype.api_version,
        "kind": rtype.kind,
        "metadata": {"name": name, "namespace": ns},
    }
    if data:
        doc["data"] = data
    return doc


def path_of(
    name: str, ns: str = "ns1", rtype: ResourceType = CONFIGMAPS, folder: str = FOLDER
) -> str:
    return f"{folder}/{ns}/core/{rtype.resource}/{name}.yaml"


_versions = itertools.count(1)


def cursor() -> Cursor:
    return Cursor("stream", str(next(_versions)))


def upsert(
    name: str,
    ns: str = "ns1",
    rtype: ResourceType = CONFIGMAPS,
    op: Operation = Operation.CREATE,
    target: TargetKey = TARGET,
    **data: str,
) -> Change:
    return Change(
        target,
        op,
        ident(name, ns, rtype),
        rtype,
        document(name, ns, rtype, **data),
        time.monotonic(),
        cursor(),
    )


def delete(name: str, ns: str = "ns1", rtype: ResourceType = CONFIGMAPS) -> Change:
    return Change(
        TARGET, Operation.DELETE, ident(name, ns, rtype), rtype, None, time.monotonic(), cursor()
    )


def snapshot(
    docs: Mapping[Identity, Mapping[str, Any]],
    ns: str = "ns1",
    rtype: ResourceType = CONFIGMAPS,
    deleted: frozenset[Identity] = frozenset(),
    target: TargetKey = TARGET,
) -> Snapshot:
    return Snapshot(target, rtype, ns, docs, time.monotonic(), deleted, cursor())


def target(
    prune: PruneMode = PruneMode.ALWAYS,
    *,
    key: TargetKey = TARGET,
    folder: str = FOLDER,
    renderer: Any = None,
    **kw: Any,
) -> TargetConfig:
    return TargetConfig(key, folder, Layout(), prune, renderer or PlainRenderer(), **kw)


def read_doc(remote: BareRemote, path: str) -> Any:
    return yaml.safe_load(remote.read(path))


def parents(remote: BareRemote, sha: str) -> list[str]:
    return git("rev-list", "--parents", "-n", "1", sha, cwd=remote.path).split()[1:]
