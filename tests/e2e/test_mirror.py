"""The core mirror end to end: a real kube-apiserver, the operator process, a real Git remote."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import yaml

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.manifests import CM_RULE, cm_path, configmap, provider, target, watch_rule
from tests.support import Operator, condition, manifest, setup_mirror, wait_for, wait_ready

pytestmark = pytest.mark.controlplane


def test_backfill_then_one_commit_per_change(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    cp.apply(
        manifest(configmap("before", ns, {"k": "v"}), configmap("also-before", ns, {"n": "1"}))
    )
    operator()
    setup_mirror(cp, ns, remote)
    wait_for(lambda: cm_path(ns, "before") in remote.files(), what="backfilled file")
    assert cm_path(ns, "also-before") in remote.files()
    backfill = remote.log()[0]
    assert backfill["message"] == f"Snapshot configmaps in {ns}: 2 added, 0 updated, 0 removed"
    assert (backfill["committer"], backfill["committer_email"]) == (
        "kubescribe",
        "kubescribe@users.noreply.local",
    )
    wait_ready(cp, ns)
    before = len(remote.log())

    cp.kubectl("create", "configmap", "fresh", "-n", ns, "--from-literal=a=1")
    wait_for(lambda: cm_path(ns, "fresh") in remote.files(), what="created file")
    assert remote.read(cm_path(ns, "fresh")) == (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: fresh\n"
        f"  namespace: {ns}\ndata:\n  a: '1'\n"
    )
    cp.kubectl("patch", "configmap", "fresh", "-n", ns, "-p", '{"data":{"a":"2"}}')
    wait_for(lambda: "a: '2'" in remote.read(cm_path(ns, "fresh")), what="updated file")
    cp.kubectl("delete", "configmap", "fresh", "-n", ns)
    wait_for(lambda: cm_path(ns, "fresh") not in remote.files(), what="deleted file")

    messages = [c["message"] for c in remote.log()[: len(remote.log()) - before]]
    assert messages == [
        f"DELETE ConfigMap {ns}/fresh",
        f"UPDATE ConfigMap {ns}/fresh",
        f"CREATE ConfigMap {ns}/fresh",
    ]
    status = wait_for(
        lambda: (
            (s := cp.get_json("gittarget", "mirror", "-n", ns)["status"])
            and s.get("lastCommit") == remote.tip()
            and s
        ),
        what="status.lastCommit",
    )
    assert status["documents"] == 2
    assert status["lastPushTime"].endswith("Z")


def test_no_commit_for_status_noop_or_filtered_changes(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator()
    setup_mirror(cp, ns, remote, CM_RULE, {"apiGroups": ["apps"], "resources": ["deployments"]})
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }
    cp.apply(manifest(deploy, configmap("settings", ns, {"x": "1"})))
    path = f"mirror/{ns}/apps/deployments/web.yaml"
    wait_for(lambda: {path, cm_path(ns, "settings")} <= set(remote.files()), what="both files")
    wait_ready(cp, ns)
    tip = remote.tip()

    cp.kubectl(
        "patch",
        "deployment",
        "web",
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"observedGeneration":7,"replicas":3}}',
    )
    cp.apply(manifest(configmap("settings", ns, {"x": "1"})))  # no-op apply
    cp.kubectl(
        "annotate", "deployment", "web", "-n", ns, "deployment.kubernetes.io/revision=9"
    )  # a filtered field
    # A marker change proves the operator processed everything queued before it.
    cp.kubectl("create", "configmap", "marker", "-n", ns, "--from-literal=m=1")
    wait_for(lambda: cm_path(ns, "marker") in remote.files(), what="marker file")
    log = remote.log()
    assert log[1]["sha"] == tip, [c["message"] for c in log[:4]]
    assert log[0]["message"] == f"CREATE ConfigMap {ns}/marker"


def test_label_selector_limits_objects(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator()
    rule = {**CM_RULE, "labelSelector": {"matchLabels": {"mirror": "yes"}}}
    setup_mirror(cp, ns, remote, rule)
    cp.apply(
        manifest(configmap("in", ns, {"a": "1"}, mirror="yes"), configmap("out", ns, {"a": "1"}))
    )
    wait_for(lambda: cm_path(ns, "in") in remote.files(), what="selected object")
    cp.kubectl("create", "configmap", "marker", "-n", ns, "--from-literal=m=1")
    cp.kubectl("label", "configmap", "marker", "-n", ns, "mirror=yes")
    wait_for(lambda: cm_path(ns, "marker") in remote.files(), what="labelled marker")
    assert cm_path(ns, "out") not in remote.files()
    cp.kubectl("label", "configmap", "in", "-n", ns, "mirror-")
    wait_for(lambda: cm_path(ns, "in") not in remote.files(), what="unselected object removed")


def test_foreign_commit_is_kept_and_remote_outage_loses_nothing(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator()
    setup_mirror(cp, ns, remote)
    cp.kubectl("create", "configmap", "one", "-n", ns, "--from-literal=a=1")
    wait_for(lambda: cm_path(ns, "one") in remote.files(), what="first file")
    foreign = remote.commit_foreign("README.md", "hand-written\n", "Add a README by hand")
    cp.kubectl("create", "configmap", "two", "-n", ns, "--from-literal=a=2")
    wait_for(lambda: cm_path(ns, "two") in remote.files(), what="second file")
    log = remote.log()
    assert log[0]["message"] == f"CREATE ConfigMap {ns}/two"
    assert foreign in [c["sha"] for c in log]
    assert remote.read("README.md") == "hand-written\n"

    away = remote.path.with_name("remote-away.git")
    remote.path.rename(away)
    try:
        cp.kubectl("create", "configmap", "three", "-n", ns, "--from-literal=a=3")
        cp.kubectl("patch", "configmap", "one", "-n", ns, "-p", '{"data":{"a":"changed"}}')
        cp.kubectl("delete", "configmap", "two", "-n", ns)
        wait_for(
            lambda: (
                (condition(cp, "gittarget", "mirror", ns, "Ready") or {}).get("reason")
                == "RemoteUnreachable"
            ),
            what="RemoteUnreachable",
        )
    finally:
        away.rename(remote.path)
    wait_for(
        lambda: (
            cm_path(ns, "three") in remote.files()
            and cm_path(ns, "two") not in remote.files()
            and "changed" in remote.read(cm_path(ns, "one"))
        ),
        timeout=60,
        what="convergence after the outage",
    )
    wait_ready(cp, ns)


def test_two_targets_share_a_branch_and_overlap_is_refused(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator()
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("team-a", ns, "git", "teams/a"),
            target("team-b", ns, "git", "teams/b"),
            watch_rule(
                "a", ns, "team-a", {**CM_RULE, "labelSelector": {"matchLabels": {"team": "a"}}}
            ),
            watch_rule(
                "b", ns, "team-b", {**CM_RULE, "labelSelector": {"matchLabels": {"team": "b"}}}
            ),
        )
    )
    cp.apply(
        manifest(
            configmap("cfg-a", ns, {"a": "1"}, team="a"),
            configmap("cfg-b", ns, {"b": "1"}, team="b"),
        )
    )
    wait_for(
        lambda: (
            {cm_path(ns, "cfg-a", "teams/a"), cm_path(ns, "cfg-b", "teams/b")}
            <= set(remote.files())
        ),
        what="both teams' files",
    )
    cp.apply(
        manifest(
            target("greedy", ns, "git", "teams"),
            watch_rule("greedy", ns, "greedy", CM_RULE),
        )
    )
    wait_for(
        lambda: (
            (condition(cp, "gittarget", "greedy", ns, "Validated") or {}).get("reason")
            == "PathOverlap"
        ),
        what="PathOverlap",
    )
    ready = condition(cp, "gittarget", "greedy", ns, "Ready")
    assert ready is not None
    assert ready["status"] == "False"
    assert "overlaps GitTarget" in ready["message"]
    cp.apply(manifest(configmap("after", ns, {"a": "1"}, team="a")))
    wait_for(lambda: cm_path(ns, "after", "teams/a") in remote.files(), what="team a still mirrors")
    assert not [f for f in remote.files() if f.startswith(f"teams/{ns}/")]


def test_invalid_provider_template_is_reported(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator()
    bad = provider("git", ns, remote.url, commit={"message": {"change": "{nope} happened"}})
    cp.apply(
        manifest(
            bad, target("mirror", ns, "git", "mirror"), watch_rule("rule", ns, "mirror", CM_RULE)
        )
    )
    validated = wait_for(
        lambda: condition(cp, "gitprovider", "git", ns, "Validated"), what="provider Validated"
    )
    assert validated["status"] == "False"
    assert validated["reason"] == "InvalidTemplate"
    assert "{nope}" in validated["message"]
    ready = wait_for(lambda: condition(cp, "gittarget", "mirror", ns, "Ready"), what="target Ready")
    assert ready["status"] == "False"
    assert remote.files() == []


def test_document_found_by_identity_is_edited_in_place(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    custom = f"mirror/by-hand/{ns}-settings.yaml"
    existing = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": ns},
        "data": {"a": "old"},
    }
    remote.commit_foreign(custom, yaml.safe_dump(existing), "Place settings by hand")
    cp.apply(manifest(configmap("settings", ns, {"a": "new"})))
    operator()
    setup_mirror(cp, ns, remote)
    wait_for(lambda: "new" in remote.read(custom), what="in-place edit")
    assert cm_path(ns, "settings") not in remote.files()
    assert json.dumps(yaml.safe_load(remote.read(custom))["data"]) == '{"a": "new"}'
