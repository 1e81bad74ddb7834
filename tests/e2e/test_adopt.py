"""Adopting real clusters and repositories end to end: a real kube-apiserver, the operator
process, a real Git remote."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.operator import OperatorProcess
from tests.manifests import (
    CM_RULE,
    cluster_watch_rule,
    cm_path,
    configmap,
    provider,
    target,
    watch_rule,
)
from tests.support import (
    Operator,
    manifest,
    setup_mirror,
    stays,
    wait_condition,
    wait_for,
    wait_ready,
)

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


def hand_kept(ns: str) -> dict[str, str]:
    """Files a team keeps by hand: a commented two-document file, a .yml file, and a file
    formatted unlike the operator's output."""
    return {
        f"mirror/{ns}/settings.yaml": (
            "# Team settings, kept by hand.\n"
            f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a   # the first\n"
            f'  namespace: {ns}\ndata:\n  # size in MiB\n  size: "10"\n  mode: fast\n'
            "---\n# the second\n"
            f"apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: b, namespace: {ns}}}\n"
            "data:\n    k: v\n"
        ),
        f"mirror/{ns}/c.yml": (
            f"kind: ConfigMap\napiVersion: v1\nmetadata:\n  namespace: {ns}\n  name: c\n"
            'data: {x: "1"}\n'
        ),
        f"mirror/{ns}/d.yaml": (
            f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  namespace: {ns}\n  name: d\n"
            'data:\n  z: "last"\n  a: "first"   # keep me\n'
        ),
    }


def test_an_adopted_repository_is_edited_in_place_with_minimal_diffs(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    files = hand_kept(ns)
    for path, text in files.items():
        remote.commit_foreign(path, text, f"add {path}")
    seeded = remote.tip()
    assert seeded is not None
    cp.apply(
        manifest(
            configmap("a", ns, {"size": "10", "mode": "fast"}),
            configmap("b", ns, {"k": "v"}),
            configmap("c", ns, {"x": "1"}),
            configmap("d", ns, {"z": "last", "a": "first"}),
        )
    )
    operator()
    setup_mirror(cp, ns, remote)
    wait_ready(cp, ns)
    wait_for(
        lambda: cp.get_json("gittarget", "mirror", "-n", ns)["status"].get("documents") == 4,
        what="4 documents indexed",
    )
    assert remote.tip() == seeded  # the first snapshot made no commit
    settings = f"mirror/{ns}/settings.yaml"

    cp.kubectl("patch", "configmap", "a", "-n", ns, "-p", '{"data":{"size":"20"}}')
    wait_for(lambda: remote.tip() != seeded, what="the change committed")
    assert remote.read(settings) == files[settings].replace('size: "10"', 'size: "20"')
    diff = git("diff", "-U0", seeded, remote.branch, "--", settings, cwd=remote.path)
    assert [
        line for line in diff.splitlines() if line[:1] in "+-" and line[:3] not in "+++---"
    ] == [
        '-  size: "10"',
        '+  size: "20"',
    ]
    cp.kubectl("delete", "configmap", "b", "-n", ns)
    wait_for(lambda: "name: b" not in remote.read(settings), what="b's document removed")
    assert (
        remote.read(settings)
        == files[settings].replace('size: "10"', 'size: "20"').split("---\n")[0]
    )
    assert sorted(remote.files()) == sorted(files)


def test_a_new_branch_starts_from_the_default_branch_tip(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    remote.commit_foreign("README.md", "the team's repository\n", "readme")
    main_tip = remote.tip()
    cp.apply(manifest(configmap("a", ns, {"k": "v"})))
    operator()
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror", branch="kubescribe/mirror"),
            watch_rule("rule", ns, "mirror", CM_RULE),
        )
    )
    wait_for(lambda: remote.tip("kubescribe/mirror") is not None, what="the new branch")
    first = remote.log("kubescribe/mirror")[0]["sha"]
    parents = git("rev-list", "--parents", "-n", "1", first, cwd=remote.path).split()[1:]
    assert parents == [main_tip]
    assert "README.md" in remote.files("kubescribe/mirror")
    assert remote.tip() == main_tip


def test_every_clone_checks_out_long_and_case_colliding_names(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    tmp_path: Path,
) -> None:
    cp, ns = crds, namespace
    long_name = "x" * 253
    roles = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name, "labels": {"test": ns}},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": [verb]}],
        }
        for name, verb in (("Admin:x", "get"), ("admin:x", "list"))
    ]
    cp.apply(manifest(configmap(long_name, ns, {"k": "v"}), *roles))
    rbac = {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["clusterroles"],
        "labelSelector": {"matchLabels": {"test": ns}},
    }
    operator()
    setup_mirror(cp, ns, remote)
    cp.apply(manifest(cluster_watch_rule(f"{ns}-roles", "mirror", ns, rbac)))
    try:
        wait_for(lambda: len(remote.files()) == 3, what="three files")
        files = remote.files()
        assert len({f.lower() for f in files}) == 3
        for ignorecase in ("false", "true"):
            clone = tmp_path / f"clone-{ignorecase}"
            git("-c", f"core.ignorecase={ignorecase}", "clone", "-q", remote.url, str(clone))
            assert git("status", "--porcelain", cwd=clone) == ""
            held = [yaml.safe_load((clone / f).read_text()) for f in files]
            assert sorted(d["metadata"]["name"] for d in held) == sorted(
                [long_name, "Admin:x", "admin:x"]
            )
        verbs = {
            d["metadata"]["name"]: d["rules"][0]["verbs"]
            for d in (yaml.safe_load(remote.read(f)) for f in files if "clusterroles" in f)
        }
        assert verbs == {"Admin:x": ["get"], "admin:x": ["list"]}
    finally:
        cp.kubectl("delete", "clusterwatchrule", f"{ns}-roles", check=False)
        cp.kubectl("delete", "clusterrole", "Admin:x", "admin:x", check=False)
