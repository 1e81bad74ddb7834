"""Owned content end to end: what people wrote, on a real kube-apiserver, the operator process
and a real Git remote; the mirrored folder re-applied to a fresh control plane."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote, git
from tests.e2e.content_corpus import CLUSTER_SCOPED, LABEL, NAMESPACED, corpus, crd, group
from tests.manifests import cluster_watch_rule, cm_path, configmap, provider, target, watch_rule
from tests.support import Operator, manifest, wait_for, wait_ready

pytestmark = pytest.mark.controlplane

METHODS = {
    "create": ("create", "-f", "-"),
    "csa": ("apply", "-f", "-"),
    "ssa": ("apply", "--server-side", "-f", "-"),
}
# CRD schema defaults are not in kubescribe's table of built-in defaults: `kubectl create` (an
# Update without a manifest to read) records them as owned (docs/content.md).
CRD_DEFAULTS = {("create", "Widget"): [".spec.color"]}
# Allocated by the API server on every create: never equal on two control planes.
ALLOCATED = (("spec", "clusterIP"), ("spec", "clusterIPs"), ("spec", "healthCheckNodePort"))


def rule(group_: str, resource: str, selector: str) -> dict[str, Any]:
    return {
        "apiGroups": [group_],
        "resources": [resource],
        "labelSelector": {"matchLabels": {LABEL: selector}},
    }


def documents(remote: BareRemote, folder: str = "mirror") -> dict[tuple[str, str, str], Any]:
    """(kind, namespace, name) -> parsed document, of every YAML file under `folder`."""
    out = {}
    for path in remote.files():
        if path.startswith(f"{folder}/") and path.endswith(".yaml"):
            doc = yaml.safe_load(remote.read(path))
            meta = doc["metadata"]
            out[(doc["kind"], meta.get("namespace", ""), meta["name"])] = doc
    return out


def extra_fields(doc: Any, written: Any, path: str = "") -> list[str]:
    """Paths in `doc` that `written` does not have (list items compared in order)."""
    found: list[str] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            if not isinstance(written, dict) or key not in written:
                found.append(f"{path}.{key}")
            else:
                found += extra_fields(value, written[key], f"{path}.{key}")
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            other = written[i] if isinstance(written, list) and i < len(written) else None
            found += extra_fields(value, other, f"{path}[{i}]")
    return found


def normalized(obj: dict[str, Any]) -> dict[str, Any]:
    """A live or dry-run object without what differs between two control planes or two
    requests: server metadata, status, allocated addresses and ports, the Job's uid labels."""
    obj = json.loads(json.dumps(obj))
    obj.pop("status", None)
    meta = obj["metadata"]
    for key in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
        meta.pop(key, None)
    annotations = meta.get("annotations") or {}
    annotations.pop("kubectl.kubernetes.io/last-applied-configuration", None)
    if not annotations:
        meta.pop("annotations", None)
    spec = obj.get("spec") or {}
    for path in ALLOCATED:
        spec.pop(path[1], None)
    if obj["kind"] == "Service" and obj["metadata"]["name"].startswith(("web-np", "web-lb")):
        for port in spec.get("ports") or []:
            port.pop("nodePort", None)  # allocated; web-fixed keeps the one it asked for
    if obj["kind"] == "Job":
        spec.pop("selector", None)
        for labels in (meta.get("labels"), spec["template"]["metadata"].get("labels")):
            for key in ("controller-uid", "batch.kubernetes.io/controller-uid"):
                (labels or {}).pop(key, None)
    return obj


@pytest.fixture
def fresh_controlplane(tmp_path: Path) -> Iterator[ControlPlane]:
    """A second, empty control plane to apply the mirrored folder to."""
    workdir = tmp_path / "fresh"
    workdir.mkdir()
    cp = ControlPlane(workdir=workdir)
    cp.start()
    try:
        yield cp
    finally:
        cp.stop()


def test_owned_documents_hold_what_people_wrote_and_apply_back_to_the_live_objects(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    fresh_controlplane: ControlPlane,
) -> None:
    cp, ns = crds, namespace
    written: dict[tuple[str, str, str], tuple[str, dict[str, Any]]] = {}
    crd_rules = []
    for method, args in METHODS.items():
        definition = crd(ns, method)
        cp.kubectl(*args, input=json.dumps(definition))
        cp.wait_established(definition["metadata"]["name"])
        written[("CustomResourceDefinition", "", definition["metadata"]["name"])] = (
            method,
            definition,
        )
        crd_rules.append(rule(group(ns, method), "widgets", ns))
        docs = corpus(ns, method)
        cp.kubectl(*args, input="\n---\n".join(json.dumps(d) for d in docs))
        for doc in docs:
            meta = doc["metadata"]
            written[(doc["kind"], meta.get("namespace", ""), meta["name"])] = (method, doc)
    assert len({kind for kind, _, _ in written}) >= 20

    operator()
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror"),  # content: the default (Owned)
            watch_rule(
                "corpus", ns, "mirror", *(rule(g, r, ns) for g, r in NAMESPACED), *crd_rules
            ),
            cluster_watch_rule(
                f"{ns}-corpus", "mirror", ns, *(rule(g, r, ns) for g, r in CLUSTER_SCOPED)
            ),
        )
    )

    def all_mirrored() -> bool:
        missing = set(written) - set(documents(remote))
        assert not missing, sorted(missing)
        return True

    wait_for(all_mirrored, timeout=120, what="every document")
    wait_ready(cp, ns)
    mirrored = documents(remote)

    # Each document holds nothing its author did not write.
    extras = {
        f"{method} {kind} {name}": found
        for (kind, _, name), (method, doc) in written.items()
        if (found := extra_fields(mirrored[(kind, _, name)], doc))
        and found != CRD_DEFAULTS.get((method, kind))
    }
    assert extras == {}
    # The noise the content mode does not see is gone in any case.
    for (kind, _, name), doc in mirrored.items():
        assert "finalizers" not in doc["metadata"], (kind, name)
    np_service = mirrored[("Service", ns, "web-np-ssa")]
    assert "nodePort" not in np_service["spec"]["ports"][0]
    assert mirrored[("Service", ns, "web-fixed-ssa")]["spec"]["ports"][0]["nodePort"] == 30003

    # Applied to a fresh control plane, the folder gives back the live objects.
    fresh = fresh_controlplane
    fresh.kubectl("create", "namespace", ns)
    for key in written:
        if key[0] == "CustomResourceDefinition":
            fresh.kubectl("create", "-f", "-", input=json.dumps(mirrored[key]))
            fresh.wait_established(key[2])
    differences = {}
    for key in written:
        kind, _, name = key
        if kind == "CustomResourceDefinition":
            again = fresh.get_json("crd", name)
        else:
            done = fresh.kubectl(
                "create",
                "--dry-run=server",
                "-o",
                "json",
                "-f",
                "-",
                input=json.dumps(mirrored[key]),
            )
            again = json.loads(done.stdout)
        resource = cp.kubectl("get", "-o", "json", "-f", "-", input=json.dumps(mirrored[key]))
        live = json.loads(resource.stdout)
        if live.get("kind") == "List":
            (live,) = live["items"]
        if normalized(again) != normalized(live):
            differences[f"{kind} {name}"] = (normalized(live), normalized(again))
    assert differences == {}


def deployment(name: str, ns: str, replicas: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": name}},
        "template": {
            "metadata": {"labels": {"app": name}},
            "spec": {"containers": [{"name": name, "image": "nginx:1.27"}]},
        },
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


DEPLOY_RULE = {"apiGroups": ["apps"], "resources": ["deployments"]}
CM_RULE = {"apiGroups": [""], "resources": ["configmaps"]}


def scale(cp: ControlPlane, ns: str, name: str, replicas: int) -> None:
    """What a HorizontalPodAutoscaler does (there is no controller-manager here): write the
    scale subresource as its field manager."""
    cp.kubectl(
        "patch",
        "deployment",
        name,
        "-n",
        ns,
        "--subresource=scale",
        "--type=merge",
        "--field-manager=horizontal-pod-autoscaler",
        "-p",
        json.dumps({"spec": {"replicas": replicas}}),
    )


def test_replicas_only_an_autoscaler_writes_make_no_commit(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    for doc in (deployment("web", ns), deployment("api", ns, replicas=2)):
        cp.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(doc))
    operator()
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror"),
            watch_rule("rule", ns, "mirror", DEPLOY_RULE, CM_RULE),
        )
    )
    web, api = (f"mirror/{ns}/apps/deployments/{n}.yaml" for n in ("web", "api"))
    wait_for(lambda: {web, api} <= set(remote.files()), what="both deployments")
    wait_ready(cp, ns)
    assert "replicas" not in yaml.safe_load(remote.read(web))["spec"]
    assert yaml.safe_load(remote.read(api))["spec"]["replicas"] == 2
    before = len(remote.log())

    scale(cp, ns, "web", 3)  # nobody but the autoscaler ever wrote web's replicas
    scale(cp, ns, "api", 4)  # the autoscaler takes api's replicas over from its author
    cp.kubectl("create", "configmap", "marker-1", "-n", ns, "--from-literal=m=1")
    wait_for(lambda: cm_path(ns, "marker-1") in remote.files(), what="first marker")
    assert "replicas" not in yaml.safe_load(remote.read(api))["spec"]
    scale(cp, ns, "web", 5)
    scale(cp, ns, "api", 5)
    cp.kubectl("create", "configmap", "marker-2", "-n", ns, "--from-literal=m=2")
    wait_for(lambda: cm_path(ns, "marker-2") in remote.files(), what="second marker")

    messages = [c["message"] for c in remote.log()[: len(remote.log()) - before]]
    assert messages == [
        f"CREATE ConfigMap {ns}/marker-2",
        f"CREATE ConfigMap {ns}/marker-1",
        f"UPDATE Deployment {ns}/api",  # its author's replicas: 2 leaves the document
    ]


def changes_per_file(remote: BareRemote, since: str) -> dict[str, int]:
    out = git("log", "--format=", "--name-only", f"{since}..main", cwd=remote.path)
    counts: dict[str, int] = {}
    for path in out.split():
        counts[path] = counts.get(path, 0) + 1
    return counts


def test_switching_a_target_from_full_to_owned_rewrites_each_file_once(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    cp.kubectl(
        "create",
        "-f",
        "-",
        input="\n---\n".join(json.dumps(deployment(f"web-{i}", ns, replicas=2)) for i in range(3)),
    )
    cp.apply(manifest(configmap("settings", ns, {"a": "1"})))
    untracked = configmap("legacy", ns, {"b": "2"})
    cp.apply(manifest(untracked))
    # An object without managedFields (made before they existed, or reset): written in Full.
    cp.kubectl(
        "patch",
        "configmap",
        "legacy",
        "-n",
        ns,
        "--type=merge",
        "-p",
        '{"metadata":{"managedFields":[{}]}}',
    )
    op = operator()
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror", content={"mode": "Full"}),
            watch_rule("rule", ns, "mirror", DEPLOY_RULE),
        )
    )
    paths = [f"mirror/{ns}/apps/deployments/web-{i}.yaml" for i in range(3)]
    wait_for(lambda: set(paths) <= set(remote.files()), what="Full documents")
    wait_ready(cp, ns)
    assert "dnsPolicy: ClusterFirst" in remote.read(paths[0])
    full = remote.tip()
    assert full is not None

    cp.kubectl(
        "patch",
        "gittarget",
        "mirror",
        "-n",
        ns,
        "--type=merge",
        "-p",
        json.dumps({"spec": {"content": {"mode": "Owned"}}}),
    )
    wait_for(lambda: all("dnsPolicy" not in remote.read(p) for p in paths), what="Owned documents")
    owned = remote.tip()
    assert owned is not None
    assert changes_per_file(remote, full) == dict.fromkeys(paths, 1)
    assert len(remote.log()) - len(remote.log(full)) == 1  # one stream: one commit
    assert yaml.safe_load(remote.read(paths[0]))["spec"] == deployment("web-0", ns, 2)["spec"]

    # No churn afterwards: a marker change is the only commit.
    watch = watch_rule("rule", ns, "mirror", DEPLOY_RULE, CM_RULE)
    cp.apply(manifest(watch))
    legacy, settings = cm_path(ns, "legacy"), cm_path(ns, "settings")
    wait_for(lambda: {legacy, settings} <= set(remote.files()), what="configmaps")
    assert changes_per_file(remote, owned) == {legacy: 1, settings: 1}
    fallbacks = op.metrics()
    assert 'kubescribe_content_fallbacks_total{reason="missing"} 1.0' in fallbacks
