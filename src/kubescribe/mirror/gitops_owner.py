"""Which GitOps object manages a Kubernetes object, from the labels and annotations the API
server holds for it, read before the mirror strips them as bookkeeping (docs/alerts.md, "GitOps
ownership"). Pure; never raises on hostile metadata.

- Flux: the labels `kustomize.toolkit.fluxcd.io/name` and `/namespace` (a Kustomization) or
  `helm.toolkit.fluxcd.io/name` and `/namespace` (a HelmRelease; the nearer owner when both
  are present, as a HelmRelease's own objects may also carry its Kustomization's labels).
- Argo CD: the annotation `argocd.argoproj.io/tracking-id`
  (`<app>:<group>/<kind>:<namespace>/<name>`, `<app>` possibly `<app-namespace>_<app>`),
  counted only when it names the object itself (a copied annotation does not); else the label
  `app.kubernetes.io/instance`, only beside another `argocd.argoproj.io/` label or annotation:
  alone it is the Kubernetes recommended label that Helm charts and kustomize bases set to
  their release or instance name, and would blame Argo CD for objects it never saw.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_VALUE = 253  # characters of a name or namespace kept (a longer value is cut)

FLUX_KUSTOMIZE = "kustomize.toolkit.fluxcd.io/"
FLUX_HELM = "helm.toolkit.fluxcd.io/"
ARGO_PREFIX = "argocd.argoproj.io/"
ARGO_TRACKING = "argocd.argoproj.io/tracking-id"
INSTANCE_LABEL = "app.kubernetes.io/instance"

# <app>:<group>/<kind>:<namespace>/<name>; group and namespace may be empty
_TRACKING = re.compile(r"\A([^:/\s]+):([^:/\s]*)/([^:/\s]+):([^:/\s]*)/([^:/\s]+)\Z")


@dataclass(frozen=True)
class GitOpsOwner:
    """The GitOps object that applies a Kubernetes object. `namespace` '' when unknown (an
    Argo CD Application named by its label, in the namespace Argo CD runs in)."""

    tool: str  # Flux, Argo CD
    kind: str  # Kustomization, HelmRelease, Application
    namespace: str
    name: str

    def as_json(self) -> dict[str, str | None]:
        return {
            "tool": self.tool,
            "kind": self.kind,
            "namespace": self.namespace or None,
            "name": self.name,
        }

    @property
    def line(self) -> str:
        """`changed outside Flux: kustomization flux-system/apps`."""
        ref = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"changed outside {self.tool}: {self.kind.lower()} {ref}"


def _strings(value: Any) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def _cut(value: str) -> str:
    return value.strip()[:MAX_VALUE]


def _flux(labels: Mapping[str, str]) -> GitOpsOwner | None:
    for prefix, kind in ((FLUX_HELM, "HelmRelease"), (FLUX_KUSTOMIZE, "Kustomization")):
        name, namespace = labels.get(f"{prefix}name"), labels.get(f"{prefix}namespace")
        if name and namespace and _cut(name) and _cut(namespace):
            return GitOpsOwner("Flux", kind, _cut(namespace), _cut(name))
    return None


def _argo(document: Mapping[str, Any], metadata: Mapping[str, Any]) -> GitOpsOwner | None:
    labels = _strings(metadata.get("labels"))
    annotations = _strings(metadata.get("annotations"))
    tracking = annotations.get(ARGO_TRACKING)
    if tracking is not None:
        found = _TRACKING.match(tracking[: 4 * MAX_VALUE + 8])
        if found is None:
            return None
        app, _group, kind, namespace, name = found.groups()
        if document.get("kind") not in (None, kind) or metadata.get("name") not in (None, name):
            return None  # copied from another object: not this one's tracking
        if metadata.get("namespace") not in (None, namespace) and namespace:
            return None
        app_namespace, _, app_name = app.rpartition("_")
        return GitOpsOwner("Argo CD", "Application", _cut(app_namespace), _cut(app_name))
    instance = labels.get(INSTANCE_LABEL, "")
    marked = any(k.startswith(ARGO_PREFIX) for k in (*labels, *annotations))
    if instance.strip() and marked:
        return GitOpsOwner("Argo CD", "Application", "", _cut(instance))
    return None


def gitops_owner(document: Mapping[str, Any] | None) -> GitOpsOwner | None:
    """The Flux or Argo CD object managing `document` (None: none, or a delete)."""
    if not isinstance(document, Mapping):
        return None
    metadata = document.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    return _flux(_strings(metadata.get("labels"))) or _argo(document, metadata)
