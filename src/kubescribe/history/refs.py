"""`TYPE/NAME` as kubectl takes it (`deployment/web`, `deploy/web`, `deployments.apps/web`,
`Secret/db`), matched against the identities found in the history. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from kubescribe.mirror.identity import CORE_GROUP, Identity

SHORT_NAMES = {
    "cm": "configmap",
    "cj": "cronjob",
    "crd": "customresourcedefinition",
    "deploy": "deployment",
    "ds": "daemonset",
    "ep": "endpoints",
    "hpa": "horizontalpodautoscaler",
    "ing": "ingress",
    "netpol": "networkpolicy",
    "ns": "namespace",
    "pdb": "poddisruptionbudget",
    "po": "pod",
    "pv": "persistentvolume",
    "pvc": "persistentvolumeclaim",
    "rs": "replicaset",
    "sa": "serviceaccount",
    "sc": "storageclass",
    "sts": "statefulset",
    "svc": "service",
}


class RefError(ValueError):
    """Not TYPE/NAME."""


@dataclass(frozen=True)
class ObjectRef:
    """What the user named: a type (kind, resource or short name, maybe `.group`) and a name."""

    type: str
    group: str | None
    name: str

    def matches_type(self, group: str, kind: str) -> bool:
        if self.group is not None and self.group != group:
            return False
        wanted, kind = self.type.lower(), kind.lower()
        wanted = SHORT_NAMES.get(wanted, wanted)
        plurals = {kind + "s", kind + "es", kind[:-1] + "ies" if kind.endswith("y") else kind}
        return wanted == kind or wanted in plurals

    def matches(self, identity: Identity) -> bool:
        return identity.name == self.name and self.matches_type(identity.group, identity.kind)


def parse_ref(text: str) -> ObjectRef:
    """`TYPE/NAME`, TYPE maybe `RESOURCE.GROUP` (`core` or nothing after the dot: the core
    group)."""
    kind, sep, name = text.partition("/")
    if not sep or not kind or not name or "/" in name:
        raise RefError(
            f"{text!r} is not TYPE/NAME (e.g. deployment/web, deployments.apps/web, secret/db)"
        )
    kind, dot, group = kind.partition(".")
    if not dot:
        return ObjectRef(kind, None, name)
    return ObjectRef(kind, "" if group in ("", CORE_GROUP) else group, name)
