"""Strip what the cluster wrote into an object, keep what a user declared.

Everything here is a deny-list: a field not named below survives, so unknown fields of
custom resources and meaningful empty values (`emptyDir: {}`, `data: {}`, `""`) are kept.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kubescribe.mirror.owned import owns

# Set by the API server, plus ownerReferences (see `sanitize`). finalizers are kept.
SERVER_METADATA = frozenset(
    {
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
        "selfLink",
        "ownerReferences",
    }
)

# Bookkeeping annotations written by tools and controllers. Annotations not listed, such
# as meta.helm.sh/*, are kept.
BOOKKEEPING_ANNOTATIONS = frozenset(
    {
        "kubectl.kubernetes.io/last-applied-configuration",
        "deployment.kubernetes.io/revision",
        "deprecated.daemonset.template.generation",
        "control-plane.alpha.kubernetes.io/leader",
        "pv.kubernetes.io/bind-completed",
        "pv.kubernetes.io/bound-by-controller",
        "pv.kubernetes.io/provisioned-by",
        "volume.kubernetes.io/selected-node",
        "volume.beta.kubernetes.io/storage-provisioner",
        "volume.kubernetes.io/storage-provisioner",
        "endpoints.kubernetes.io/last-change-trigger-time",
        # HPA autoscaling/v1 keeps v2 status in these; .../metrics and .../behavior are spec.
        "autoscaling.alpha.kubernetes.io/conditions",
        "autoscaling.alpha.kubernetes.io/current-metrics",
    }
)

Predicate = Callable[[Mapping[str, Any], Any], bool]
"""Called with the original document and the candidate value."""


def _always(doc: Mapping[str, Any], value: Any) -> bool:
    return True


@dataclass(frozen=True)
class Strip:
    """Remove the value at `path` (map keys from the document root) when `when` holds.

    With `each`, the value must be a list, and only the items for which `each` holds are
    removed; with `each` and `key`, only that key of those items. A map or list that becomes
    empty only because of a removal is removed as well.
    """

    path: tuple[str, ...]
    when: Predicate = _always
    each: Predicate | None = None
    key: str = ""


def _not_headless(doc: Mapping[str, Any], value: Any) -> bool:
    return value not in ("None", ["None"])


def _bound_by_controller(doc: Mapping[str, Any], value: Any) -> bool:
    # A user may pre-bind a claim to a volume; keep volumeName then.
    annotations = _get(doc, ("metadata", "annotations"))
    return isinstance(annotations, Mapping) and (
        annotations.get("pv.kubernetes.io/bound-by-controller") == "yes"
    )


def _token_secret(doc: Mapping[str, Any], item: Any) -> bool:
    name = _get(doc, ("metadata", "name"))
    return (
        isinstance(name, str)
        and isinstance(item, Mapping)
        and str(item.get("name", "")).startswith(f"{name}-token-")
    )


def _generated_selector(doc: Mapping[str, Any], value: Any) -> bool:
    return _get(doc, ("spec", "manualSelector")) is not True


def _only_kubernetes_finalizer(doc: Mapping[str, Any], value: Any) -> bool:
    return isinstance(value, list) and value == ["kubernetes"]


def _allocated_health_port(doc: Mapping[str, Any], value: Any) -> bool:
    # Allocated unless a manager owns it; without managedFields, allocated as well.
    return owns(doc, ("spec", "healthCheckNodePort")) is not True


def _allocated_node_port(doc: Mapping[str, Any], port: Any) -> bool:
    # Allocated when no manager owns it; without managedFields nobody can tell: kept. The
    # port is found in the object by its node port (unique), as a copy may lack its key fields.
    ports = _get(doc, ("spec", "ports"))
    live = None
    for candidate in ports if isinstance(ports, list) else ():
        if isinstance(candidate, Mapping) and candidate.get("nodePort") == port.get("nodePort"):
            live = candidate
            break
    return live is not None and owns(doc, ("spec", "ports"), live, "nodePort") is False


_JOB_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")

# Fields the cluster fills in at runtime, keyed by (API group, kind); "" is the core group.
RUNTIME_FIELDS: Mapping[tuple[str, str], tuple[Strip, ...]] = {
    ("", "Service"): (
        Strip(("spec", "clusterIP"), when=_not_headless),
        Strip(("spec", "clusterIPs"), when=_not_headless),
        Strip(("spec", "healthCheckNodePort"), when=_allocated_health_port),
        Strip(("spec", "ports"), each=_allocated_node_port, key="nodePort"),
    ),
    ("", "Pod"): (Strip(("spec", "nodeName")),),
    ("", "PersistentVolumeClaim"): (Strip(("spec", "volumeName"), when=_bound_by_controller),),
    ("", "PersistentVolume"): (
        Strip(("spec", "claimRef", "uid")),
        Strip(("spec", "claimRef", "resourceVersion")),
    ),
    ("", "ServiceAccount"): (Strip(("secrets",), each=_token_secret),),
    ("", "Namespace"): (Strip(("spec", "finalizers"), when=_only_kubernetes_finalizer),),
    ("batch", "Job"): (
        Strip(("spec", "selector"), when=_generated_selector),
        *(
            Strip((*where, "labels", label), when=_generated_selector)
            for where in (("metadata",), ("spec", "template", "metadata"))
            for label in _JOB_UID_LABELS
        ),
    ),
}


def _get(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, Mapping):
            return None
        obj = obj.get(key)
    return obj


def _plain_copy(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain_copy(v) for v in value]
    return value


def _apply(doc: dict[str, Any], original: Mapping[str, Any], strip: Strip) -> None:
    parents = _parents(doc, strip.path[:-1])
    last = strip.path[-1]
    if parents is None or last not in parents[-1]:
        return
    value = parents[-1][last]
    if not strip.when(original, value):
        return
    if strip.each is not None and strip.key:
        for item in value if isinstance(value, list) else ():
            if isinstance(item, dict) and strip.key in item and strip.each(original, item):
                del item[strip.key]
        return
    if strip.each is not None:
        if not isinstance(value, list):
            return
        kept = [item for item in value if not strip.each(original, item)]
        if len(kept) == len(value):
            return
        if kept:
            parents[-1][last] = kept
            return
    del parents[-1][last]
    # Prune the maps this removal emptied, but never the document itself.
    for depth in range(len(parents) - 1, 0, -1):
        if parents[depth]:
            break
        del parents[depth - 1][strip.path[depth - 1]]


def _parents(doc: dict[str, Any], path: tuple[str, ...]) -> list[dict[str, Any]] | None:
    """The maps along `path`, the document first (None: one is missing or not a map)."""
    parents = [doc]
    for key in path:
        child = parents[-1].get(key)
        if not isinstance(child, dict):
            return None
        parents.append(child)
    return parents


def _api_group(doc: Mapping[str, Any]) -> str:
    api_version = doc.get("apiVersion")
    if not isinstance(api_version, str) or "/" not in api_version:
        return ""
    return api_version.split("/", 1)[0]


def _clean_metadata(metadata: dict[str, Any]) -> None:
    for key in SERVER_METADATA:
        metadata.pop(key, None)
    if metadata.get("name"):
        metadata.pop("generateName", None)
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict):
        for key in BOOKKEEPING_ANNOTATIONS:
            annotations.pop(key, None)
    for key in ("labels", "annotations"):
        if metadata.get(key) == {}:
            del metadata[key]


def sanitize(obj: Mapping[str, Any], owned: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A copy of `obj` without status, server-set metadata and per-kind runtime fields; with
    `owned` (the part of `obj` people wrote, `owned.keep_owned`), that document instead,
    cleaned in place.

    Idempotent; `obj` is not modified. Empty `labels`/`annotations` maps are dropped.
    `metadata.ownerReferences` are dropped: they name owner uids, which mean nothing outside
    this cluster, so a copy applied elsewhere would point at nothing and be garbage-collected.
    `metadata.finalizers` are kept: they are user intent.
    """
    doc: dict[str, Any] = _plain_copy(obj) if owned is None else dict(owned)
    doc.pop("status", None)
    metadata = doc.get("metadata")
    if isinstance(metadata, dict):
        _clean_metadata(metadata)
    kind = doc.get("kind")
    if isinstance(kind, str):
        for strip in RUNTIME_FIELDS.get((_api_group(doc), kind), ()):
            _apply(doc, obj, strip)
    return doc
