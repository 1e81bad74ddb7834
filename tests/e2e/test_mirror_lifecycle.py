"""Custom resources, wildcard rules and restarts: the mirror converges from cluster state."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.manifests import (
    CM_RULE,
    cluster_watch_rule,
    cm_path,
    configmap,
    provider,
    target,
    watch_rule,
)
from tests.support import Operator, condition, manifest, setup_mirror, stays, wait_for, wait_ready

pytestmark = pytest.mark.controlplane


def crd(plural: str, group: str) -> dict[str, object]:
    kind = plural.rstrip("s").capitalize()
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural.rstrip("s"), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-preserve-unknown-fields": True,
                                }
                            },
                        }
                    },
                }
            ],
        },
    }


def apply_when_served(cp: ControlPlane, doc: str) -> None:
    """kubectl's discovery cache may lag a new CRD by a moment."""
    wait_for(
        lambda: cp.kubectl("apply", "-f", "-", input=doc, check=False).returncode == 0, what="apply"
    )


def test_crd_and_custom_resources_are_mirrored(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    group = f"{ns}.example.io"
    operator()
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror"),
            watch_rule("gadgets", ns, "mirror", {"apiGroups": [group], "resources": ["gadgets"]}),
            cluster_watch_rule(
                f"{ns}-crds",
                "mirror",
                ns,
                {
                    "apiGroups": ["apiextensions.k8s.io"],
                    "resources": ["customresourcedefinitions"],
                    "labelSelector": {"matchLabels": {"suite": ns}},
                },
            ),
        )
    )
    definition = crd("gadgets", group)
    definition["metadata"]["labels"] = {"suite": ns}  # type: ignore[index]
    cp.apply(manifest(definition))
    crd_file = (
        f"mirror/_cluster/apiextensions.k8s.io/customresourcedefinitions/gadgets.{group}.yaml"
    )
    wait_for(lambda: crd_file in remote.files(), what="CRD file")

    gadget = {
        "apiVersion": f"{group}/v1",
        "kind": "Gadget",
        "metadata": {"name": "g1", "namespace": ns},
        "spec": {"size": 1},
    }
    apply_when_served(cp, manifest(gadget))
    path = f"mirror/{ns}/{group}/gadgets/g1.yaml"
    wait_for(lambda: path in remote.files(), timeout=60, what="custom resource file")
    cp.kubectl(
        "patch", f"gadgets.{group}", "g1", "-n", ns, "--type=merge", "-p", '{"spec":{"size":5}}'
    )
    wait_for(lambda: "size: 5" in remote.read(path), what="custom resource update")
    cp.kubectl("delete", f"gadgets.{group}", "g1", "-n", ns)
    wait_for(lambda: path not in remote.files(), what="custom resource delete")
    cp.kubectl("delete", "crd", f"gadgets.{group}")
    wait_for(lambda: crd_file not in remote.files(), what="CRD file removed")


def test_wildcard_resources_cover_core_and_custom_types(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    group = f"{ns}.wild.io"
    cp.apply(manifest(crd("widgets", group)))
    cp.wait_established(f"widgets.{group}")
    apply_when_served(
        cp,
        manifest(
            configmap("plain", ns, {"a": "1"}),
            {
                "apiVersion": f"{group}/v1",
                "kind": "Widget",
                "metadata": {"name": "w", "namespace": ns},
                "spec": {},
            },
        ),
    )
    cp.kubectl("create", "serviceaccount", "robot", "-n", ns)
    operator()
    setup_mirror(cp, ns, remote, {"apiGroups": ["*"], "resources": ["*"]})
    expected = {
        cm_path(ns, "plain"),
        f"mirror/{ns}/{group}/widgets/w.yaml",
        f"mirror/{ns}/core/serviceaccounts/robot.yaml",
    }
    wait_for(lambda: expected <= set(remote.files()), timeout=60, what="core and custom files")
    resolved = cp.get_json("watchrule", "rule", "-n", ns)["status"]["resolvedResources"]
    assert "v1/configmaps" in resolved or "core/v1/configmaps" in resolved
    assert f"{group}/v1/widgets" in resolved
    assert not any("events" in r or "leases" in r for r in resolved)
    assert not [f for f in remote.files() if "kube-root-ca.crt" in f]


@pytest.mark.parametrize(("mode", "swept"), [("Always", True), ("OnEvent", False)])
def test_restart_converges_on_changes_made_while_down(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    mode: str,
    swept: bool,
) -> None:
    cp, ns = crds, namespace
    first = operator()
    setup_mirror(cp, ns, remote, CM_RULE, prune={"mode": mode})
    cp.apply(manifest(configmap("keep", ns, {"v": "1"}), configmap("doomed", ns, {"v": "1"})))
    wait_for(
        lambda: {cm_path(ns, "keep"), cm_path(ns, "doomed")} <= set(remote.files()), what="files"
    )
    wait_ready(cp, ns)

    first.stop()
    tip = remote.tip()
    second = operator()  # a plain restart with nothing changed: no commit, nothing wiped
    wait_for(
        lambda: "watch" in second.metrics() and "kubescribe_commits_total" in second.metrics(),
        what="metrics",
    )
    wait_for(
        lambda: "kubescribe_target_documents{target=" in second.metrics(),
        timeout=30,
        what="first write report",
    )
    assert remote.tip() == tip
    second.stop()

    cp.kubectl("delete", "configmap", "doomed", "-n", ns)
    cp.kubectl("patch", "configmap", "keep", "-n", ns, "-p", '{"data":{"v":"2"}}')
    operator()
    wait_for(lambda: "v: '2'" in remote.read(cm_path(ns, "keep")), what="change made while down")
    if swept:
        wait_for(lambda: cm_path(ns, "doomed") not in remote.files(), what="delete made while down")
    else:
        status = wait_for(
            lambda: (
                (s := cp.get_json("gittarget", "mirror", "-n", ns)["status"]).get(
                    "retainedDocuments"
                )
                == 1
                and s
            ),
            what="retained count",
        )
        assert status["documents"] == 2
        assert cm_path(ns, "doomed") in remote.files()


def test_suspend_stops_writes_and_resume_catches_up(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator()
    setup_mirror(cp, ns, remote)
    cp.kubectl("create", "configmap", "a", "-n", ns, "--from-literal=v=1")
    wait_for(lambda: cm_path(ns, "a") in remote.files(), what="first file")
    cp.kubectl(
        "patch", "gittarget", "mirror", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":true}}'
    )
    wait_for(
        lambda: (
            (condition(cp, "gittarget", "mirror", ns, "Ready") or {}).get("reason") == "Suspended"
        ),
        what="Suspended",
    )
    tip = remote.tip()
    cp.kubectl("create", "configmap", "b", "-n", ns, "--from-literal=v=1")
    stays(lambda: remote.tip() == tip, seconds=1.0, what="no write while suspended")
    cp.kubectl(
        "patch", "gittarget", "mirror", "-n", ns, "--type=merge", "-p", '{"spec":{"suspend":false}}'
    )
    wait_for(lambda: cm_path(ns, "b") in remote.files(), what="caught up after resume")
