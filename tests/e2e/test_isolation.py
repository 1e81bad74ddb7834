"""Failure isolation end to end: two GitTargets on one branch; what one of them cannot write
turns only that GitTarget red, and object names never make a path Git refuses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kubescribe.mirror.layout import file_name
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.manifests import (
    CM_RULE,
    cluster_watch_rule,
    configmap,
    provider,
    target,
    watch_rule,
)
from tests.support import Operator, condition_state, manifest, wait_for

pytestmark = pytest.mark.controlplane

ROLE_RULE = {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"]}
# Names the API server accepts for a ClusterRole that spell `.git` on some file system.
ROLE_NAMES = (".git", "GIT~1", ".gitmodules")


def _role(name: str, label: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": {"kubescribe-test": label}},
        "rules": [],
    }


def test_a_target_that_cannot_write_a_document_is_red_and_the_branch_keeps_flowing(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    taken = f"blocked/{ns}/core/configmaps/taken.yaml"
    remote.commit_foreign(taken, "someone's file: true\n", "A file in the way")
    label = ns[-6:]
    roles = ROLE_RULE | {"labelSelector": {"matchLabels": {"kubescribe-test": label}}}
    cp.apply(manifest(configmap("taken", ns, {"k": "v"}), *(_role(n, label) for n in ROLE_NAMES)))
    try:
        _check(cp, ns, remote, operator, roles)
    finally:
        cp.kubectl("delete", "clusterroles", "-l", f"kubescribe-test={label}", check=False)


def _check(
    cp: ControlPlane,
    ns: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    roles: dict[str, Any],
) -> None:
    taken = f"blocked/{ns}/core/configmaps/taken.yaml"
    operator()
    by_name = {
        "group": "rbac.authorization.k8s.io",
        "resource": "clusterroles",
        "template": "{name}/{kind}.yaml",
    }
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("ok", ns, "git", "ok", placement={"types": [by_name]}),
            target("blocked", ns, "git", "blocked"),
            watch_rule("ok", ns, "ok", CM_RULE),
            watch_rule("blocked", ns, "blocked", CM_RULE),
            cluster_watch_rule(f"{ns}-roles", "ok", ns, roles),
        )
    )
    ok_file = f"ok/{ns}/core/configmaps/taken.yaml"
    # `.git` spellings get a `_` prefix; `GIT~1` is mapped like any upper-case name
    role_files = {"ok/_.git/ClusterRole.yaml", "ok/_.gitmodules/ClusterRole.yaml"}
    role_files.add(f"ok/{file_name('GIT~1')}/ClusterRole.yaml")
    wait_for(lambda: {ok_file, *role_files} <= set(remote.files()), what="the ok target's files")
    wait_for(
        lambda: (
            condition_state(cp, "gittarget", "blocked", ns, "DocumentsWritten")
            == ("False", "PathConflict")
        ),
        what="blocked: DocumentsWritten=False (PathConflict)",
    )
    assert condition_state(cp, "gittarget", "blocked", ns, "Ready") == ("False", "PathConflict")
    assert remote.read(taken) == "someone's file: true\n"
    wait_for(
        lambda: condition_state(cp, "gittarget", "ok", ns, "Ready") == ("True", "Ready"),
        what="ok: Ready",
    )
    assert condition_state(cp, "gittarget", "ok", ns, "DocumentsWritten") == (
        "True",
        "DocumentsWritten",
    )

    cp.apply(manifest(configmap("later", ns, {"n": "1"})))  # both keep committing
    wait_for(
        lambda: (
            {f"ok/{ns}/core/configmaps/later.yaml", f"blocked/{ns}/core/configmaps/later.yaml"}
            <= set(remote.files())
        ),
        what="a later change in both folders",
    )
    cp.kubectl("delete", "configmap", "taken", "-n", ns)  # nothing left that fails
    wait_for(
        lambda: (
            condition_state(cp, "gittarget", "blocked", ns, "DocumentsWritten")
            == ("True", "DocumentsWritten")
        ),
        what="blocked: DocumentsWritten=True",
    )
