"""A kustomize root that disappears (someone deletes the overlay's kustomization.yaml): the
target says so in status and writes nothing until the root is back; what changed meanwhile is
written through it then, not as plain files beside it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.manifests import CM_RULE, provider, target, watch_rule
from tests.support import Operator, manifest, wait_condition, wait_for, wait_ready

pytestmark = pytest.mark.controlplane

OVERLAY = "mirror/overlays/prod"
ROOT = f"{OVERLAY}/kustomization.yaml"


def named(remote: BareRemote, name: str) -> list[str]:
    return [f for f in remote.files() if f.endswith(f"/{name}.yaml")]


def test_a_missing_kustomize_root_holds_the_target_until_it_is_back(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    remote.commit_foreign(ROOT, "resources: []\n", "The overlay")
    operator()
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror", kustomize={"root": "overlays/prod"}),
            watch_rule("rule", ns, "mirror", CM_RULE),
        )
    )
    cp.kubectl("create", "configmap", "first", "-n", ns, "--from-literal=a=1")
    wait_for(lambda: "first.yaml" in remote.read(ROOT), what="first written through the root")
    wait_ready(cp, ns)
    listed = remote.read(ROOT)

    remote.remove_foreign(ROOT, "Remove the overlay's kustomization")
    removed = remote.tip()
    cp.kubectl("create", "configmap", "second", "-n", ns, "--from-literal=b=2")
    cond = wait_condition(
        cp, "gittarget", "mirror", ns, "DocumentsWritten", "False", "KustomizationMissing"
    )
    assert f"{OVERLAY} holds no kustomization.yaml" in cond["message"]
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "False")
    cp.kubectl("delete", "configmap", "first", "-n", ns)
    assert remote.tip() == removed  # nothing written, no plain file beside the overlay
    assert named(remote, "second") == []

    remote.commit_foreign(ROOT, listed, "Restore the overlay's kustomization")
    cp.kubectl("create", "configmap", "third", "-n", ns, "--from-literal=c=3")
    wait_condition(cp, "gittarget", "mirror", ns, "DocumentsWritten", "True")

    def caught_up() -> bool:
        root = remote.read(ROOT)
        return "second.yaml" in root and "third.yaml" in root and "first.yaml" not in root

    wait_for(caught_up, what="what changed meanwhile written through the root")
    for name in ("second", "third"):
        assert [f.startswith(f"{OVERLAY}/") for f in named(remote, name)] == [True]
    assert named(remote, "first") == []
    wait_ready(cp, ns)
