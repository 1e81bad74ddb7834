"""Adopting real clusters and repositories end to end: a real kube-apiserver, the operator
process, a real Git remote."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from kubescribe.devenv.controlplane import ControlPlane
from kubescribe.devenv.gitremote import BareRemote
from kubescribe.devenv.operator import OperatorProcess
from tests.e2e.mirror_objects import (
    cluster_watch_rule,
    configmap,
    provider,
    target,
    watch_rule,
)
from tests.e2e.test_mirror import CM_RULE, cm_path, setup_mirror, wait_ready
from tests.support import Operator, manifest, stays, wait_condition, wait_for

pytestmark = pytest.mark.controlplane

DEPLOY = Path(__file__).parents[2] / "deploy" / "kubescribe.yaml"
DEPLOY_RULE = {"apiGroups": ["apps"], "resources": ["deployments"]}


def deployment(name: str, ns: str, *finalizers: str) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "finalizers": list(finalizers)},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": "nginx:1.27"}]},
            },
        },
    }


def test_a_delete_held_by_finalizers_is_one_delete_commit(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator()
    setup_mirror(cp, ns, remote, CM_RULE, DEPLOY_RULE)
    cp.apply(manifest(deployment("web", ns, "example.com/one", "example.com/two")))
    path = f"mirror/{ns}/apps/deployments/web.yaml"
    wait_for(lambda: path in remote.files(), what="deployment file")
    wait_ready(cp, ns)
    before = len(remote.log())

    cp.kubectl("delete", "deployment", "web", "-n", ns, "--wait=false")
    wait_for(lambda: path not in remote.files(), what="deployment removed at deletion intent")
    for remaining in (["example.com/two"], []):
        patch = json.dumps({"metadata": {"finalizers": remaining}})
        cp.kubectl("patch", "deployment", "web", "-n", ns, "--type=merge", "-p", patch)
    wait_for(
        lambda: cp.kubectl("get", "deployment", "-n", ns, "-o", "name").stdout.strip() == "",
        what="deployment gone",
    )
    cp.kubectl("create", "configmap", "marker", "-n", ns, "--from-literal=m=1")
    wait_for(lambda: cm_path(ns, "marker") in remote.files(), what="marker file")
    messages = [c["message"] for c in remote.log()[: len(remote.log()) - before]]
    assert messages == [f"CREATE ConfigMap {ns}/marker", f"DELETE Deployment {ns}/web"]


def test_flux_and_argo_bookkeeping_is_not_mirrored_unless_a_target_keeps_it(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    flux = configmap("flux", ns, {"a": "1"}, app="web")
    flux["metadata"]["labels"] |= {
        "kustomize.toolkit.fluxcd.io/name": "apps",
        "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
    }
    argo = configmap("argo", ns, {"b": "2"})
    argo["metadata"]["annotations"] = {
        "argocd.argoproj.io/tracking-id": f"web:/ConfigMap:{ns}/argo",
        "team": "a",
    }
    cp.apply(manifest(flux, argo))
    operator()
    setup_mirror(cp, ns, remote)
    keep = {"keep": [{"key": "argocd.argoproj.io/tracking-id", "on": "annotations"}]}
    cp.apply(
        manifest(
            target("kept", ns, "git", "kept", noise=keep),
            watch_rule("kept", ns, "kept", CM_RULE),
        )
    )
    kept = f"kept/{ns}/core/configmaps/argo.yaml"
    wait_for(
        lambda: {cm_path(ns, "flux"), cm_path(ns, "argo"), kept} <= set(remote.files()),
        what="both targets backfilled",
    )
    flux_doc = yaml.safe_load(remote.read(cm_path(ns, "flux")))
    assert flux_doc["metadata"]["labels"] == {"app": "web"}
    argo_doc = yaml.safe_load(remote.read(cm_path(ns, "argo")))
    assert argo_doc["metadata"]["annotations"] == {"team": "a"}
    assert (
        yaml.safe_load(remote.read(kept))["metadata"]["annotations"]
        == argo["metadata"]["annotations"]
    )
    wait_ready(cp, ns, "kept")


@pytest.mark.parametrize("prune", ["Always", "OnEvent"])
def test_a_cluster_watch_rule_mirrors_the_namespaces_it_selects(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    prune: str,
) -> None:
    cp, ns = crds, namespace
    label = f"mirror-{ns[-6:]}"
    spaces = [f"{ns}-{i}" for i in range(6)]
    for i, space in enumerate(spaces[:5]):
        cp.kubectl("create", "namespace", space)
        if i < 3:
            cp.kubectl("label", "namespace", space, f"{label}=yes")
        cp.apply(manifest(configmap("settings", space, {"i": str(i)})))
    operator()
    rule = {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "namespaces": {"labelSelector": {"matchLabels": {label: "yes"}}},
    }
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror", prune={"mode": prune}),
            cluster_watch_rule(f"{ns}-all", "mirror", ns, rule),
        )
    )
    try:
        wanted = {cm_path(space, "settings") for space in spaces[:3]}
        wait_for(lambda: set(remote.files()) == wanted, what="the 3 selected namespaces")
        wait_ready(cp, ns)

        cp.kubectl("create", "namespace", spaces[5])
        cp.kubectl("label", "namespace", spaces[5], f"{label}=yes")
        cp.apply(manifest(configmap("settings", spaces[5], {"i": "5"})))
        wait_for(lambda: cm_path(spaces[5], "settings") in remote.files(), what="a new namespace")

        cp.kubectl("label", "namespace", spaces[0], f"{label}-")
        cp.apply(manifest(configmap("marker", spaces[1], {"m": "1"})))
        wait_for(lambda: cm_path(spaces[1], "marker") in remote.files(), what="marker")
        if prune == "Always":
            wait_for(
                lambda: cm_path(spaces[0], "settings") not in remote.files(),
                what="the unlabelled namespace swept",
            )
        else:
            stays(
                lambda: cm_path(spaces[0], "settings") in remote.files(),
                seconds=2.0,
                what="the unlabelled namespace retained",
            )
        assert not any(f"/{spaces[3]}/" in f or f"/{spaces[4]}/" in f for f in remote.files())
    finally:
        cp.kubectl("delete", "clusterwatchrule", f"{ns}-all")


def test_a_type_the_operator_may_not_watch_is_watch_forbidden_on_the_rule_and_target(
    crds: ControlPlane, namespace: str, remote: BareRemote, tmp_path: Path
) -> None:
    cp, ns = crds, namespace
    user = f"limited-{ns[-6:]}"
    base = next(
        d
        for d in yaml.safe_load_all(DEPLOY.read_text())
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "kubescribe"
    )
    rules = [
        *base["rules"],
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
    ]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": user},
        "rules": rules,
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    cp.apply(manifest(role, binding))
    op = OperatorProcess(cp.user_kubeconfig(user), tmp_path / "operator").start()
    try:
        services = {"apiGroups": [""], "resources": ["services"]}
        cp.apply(
            manifest(
                provider("git", ns, remote.url),
                target("mirror", ns, "git", "mirror"),
                watch_rule("cms", ns, "mirror", CM_RULE),
                watch_rule("svcs", ns, "mirror", services),
                configmap("granted", ns, {"a": "1"}),
            )
        )
        wait_for(lambda: cm_path(ns, "granted") in remote.files(), what="the granted type")
        cond = wait_condition(
            cp, "watchrule", "svcs", ns, "StreamsRunning", "False", "WatchForbidden"
        )
        assert f"core/v1/services in {ns}" in cond["message"]
        wait_condition(cp, "watchrule", "svcs", ns, "Ready", "False", "WatchForbidden")
        wait_condition(cp, "watchrule", "cms", ns, "StreamsRunning", "True", "StreamsRunning")
        wait_condition(cp, "watchrule", "cms", ns, "Ready", "True")
        wait_condition(cp, "gittarget", "mirror", ns, "StreamsRunning", "False", "WatchForbidden")
    finally:
        op.stop()
        cp.kubectl("delete", "clusterrolebinding,clusterrole", user, check=False)
        cp.kubectl("delete", "gitproviders,gittargets,watchrules", "--all", "-n", ns, check=False)
