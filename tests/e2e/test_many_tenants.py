"""Many tenants on one operator (issue #35): one watch connection per type, not per namespace,
where the operator may read the type everywhere; per-namespace streams where RBAC grants it
per namespace only. Counted by the operator's own metrics."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubescribe.api.crds import render_crds
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.manifests import CM_RULE, cm_path, configmap, provider, target, watch_rule
from tests.support import Operator, manifest, metric, operators, stays, wait_for

# The 100 tenants issue #35 asks for (KUBESCRIBE_TENANTS=30 for a quicker run).
TENANTS = int(os.environ.get("KUBESCRIBE_TENANTS", "100"))
# Threads beside the Git pool's: the event loop's, its default executor's, the probes' pool.
OTHER_THREADS = 16
CONFIGMAPS = 'resource="core/v1/configmaps"'
DEPLOY = Path(__file__).parents[2] / "deploy" / "kubescribe.yaml"


@pytest.fixture(scope="module")
def crds(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A control plane of this module's own: the tests count every stream and thread of the
    operator, so no other test's GitTargets may be on it."""
    cp = ControlPlane(workdir=tmp_path_factory.mktemp("tenants-cp"), keep_workdir=True)
    cp.start()
    try:
        cp.apply(render_crds())
        cp.wait_established(
            *(f"{p}.kubescribe.io" for p in ("gitproviders", "gittargets", "watchrules"))
        )
        yield cp
    finally:
        cp.stop()


def _tenants(cp: ControlPlane, tmp_path: Path, count: int) -> dict[str, BareRemote]:
    """`count` namespaces, each with its own remote, GitProvider, GitTarget, WatchRule and two
    ConfigMaps."""
    run = uuid.uuid4().hex[:6]
    remotes = {
        f"tenant-{run}-{i:03d}": BareRemote.create(tmp_path / f"tenant-{i:03d}.git")
        for i in range(count)
    }
    cp.apply(
        manifest(
            *({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}} for ns in remotes)
        )
    )
    docs: list[dict[str, Any]] = []
    for ns, remote in remotes.items():
        docs += [
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror"),
            watch_rule("cms", ns, "mirror", CM_RULE),
            configmap("a", ns, {"tenant": ns}),
            configmap("b", ns, {"tenant": ns}),
        ]
    cp.apply(manifest(*docs))
    return remotes


def _mirrored(remotes: dict[str, BareRemote], *names: str) -> None:
    """Every tenant's remote holds exactly its own ConfigMaps `names`, nothing of another's."""
    for ns, remote in remotes.items():
        wanted = {cm_path(ns, name) for name in names}
        wait_for(
            lambda r=remote, w=wanted: set(r.files()) == w,  # type: ignore[misc]
            timeout=120,
            what=f"{ns} mirrored",
        )


def _delete_all(cp: ControlPlane, namespaces: list[str]) -> None:
    for ns in namespaces:
        cp.kubectl(
            "delete",
            "gitproviders,gittargets,watchrules",
            "--all",
            "-n",
            ns,
            "--wait=false",
            check=False,
        )


def test_many_tenants_share_one_watch_per_type_and_join_and_leave_without_a_new_one(
    crds: ControlPlane, tmp_path: Path
) -> None:
    cp = crds
    remotes = _tenants(cp, tmp_path, TENANTS)
    joined: dict[str, BareRemote] = {}
    with operators(cp, tmp_path / "operator", serving=True) as start:
        op: Operator = start()
        try:
            _mirrored(remotes, "a", "b")
            assert metric(op, "kubescribe_watch_streams", CONFIGMAPS) == 1
            assert metric(op, "kubescribe_target_streams") == TENANTS
            pool = metric(op, "kubescribe_git_pool_threads")
            threads = metric(op, "kubescribe_threads")
            assert 0 < pool < TENANTS
            assert threads <= pool + OTHER_THREADS < TENANTS, f"{threads} threads"
            # A change in one tenant reaches its remote only.
            first, second = list(remotes)[:2]
            cp.apply(manifest(configmap("c", first, {"late": "1"})))
            wait_for(lambda: cm_path(first, "c") in remotes[first].files(), what="a live change")
            assert cm_path(first, "c") not in remotes[second].files()

            # A tenant joining: its namespace is listed once, the watch stays one.
            joined.update(_tenants(cp, tmp_path / "joined", 1))
            _mirrored(joined, "a", "b")
            ((ns, remote),) = joined.items()
            cp.apply(manifest(configmap("d", ns, {"after": "join"})))
            wait_for(lambda: cm_path(ns, "d") in remote.files(), what="a change after joining")
            assert metric(op, "kubescribe_watch_streams", CONFIGMAPS) == 1
            assert metric(op, "kubescribe_target_streams") == TENANTS + 1

            # A tenant leaving: nothing more of its namespace is written, the others go on.
            cp.kubectl("delete", "watchrule", "cms", "-n", second)
            wait_for(
                lambda: metric(op, "kubescribe_target_streams") == TENANTS,
                what="the rule's stream gone",
            )
            cp.apply(manifest(configmap("gone", second, {"x": "1"})))
            cp.apply(manifest(configmap("e", first, {"x": "1"})))
            wait_for(lambda: cm_path(first, "e") in remotes[first].files(), what="the others")
            stays(
                lambda: cm_path(second, "gone") not in remotes[second].files(),
                seconds=1.0,
                what="the tenant that left is not written",
            )
            assert metric(op, "kubescribe_watch_streams", CONFIGMAPS) == 1
        finally:
            op.stop()
            _delete_all(cp, [*remotes, *joined])


def test_types_granted_per_namespace_only_are_watched_per_namespace(
    crds: ControlPlane, tmp_path: Path
) -> None:
    """`watch: selected`: the operator may read ConfigMaps only in the tenants' namespaces (a
    Role in each): a stream per namespace, and every tenant still mirrored."""
    cp = crds
    user = f"selected-{uuid.uuid4().hex[:6]}"
    base = next(
        d
        for d in yaml.safe_load_all(DEPLOY.read_text())
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "kubescribe"
    )
    remotes = _tenants(cp, tmp_path, 3)
    grants: list[dict[str, Any]] = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": user},
            "rules": base["rules"],
        },
        _binding("ClusterRoleBinding", user, "ClusterRole", user, None),
    ]
    for ns in remotes:
        grants += [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": user, "namespace": ns},
                "rules": [
                    {
                        "apiGroups": [""],
                        "resources": ["configmaps"],
                        "verbs": ["get", "list", "watch"],
                    }
                ],
            },
            _binding("RoleBinding", user, "Role", user, ns),
        ]
    cp.apply(manifest(*grants))
    op = Operator(cp, tmp_path / "operator")
    op.kubeconfig = cp.user_kubeconfig(user)  # the restricted identity
    op.start()
    try:
        _mirrored(remotes, "a", "b")
        wait_for(op.metrics, timeout=30, what="the metrics endpoint")
        assert metric(op, "kubescribe_watch_streams", CONFIGMAPS) == len(remotes)
        first = next(iter(remotes))
        cp.apply(manifest(configmap("c", first, {"late": "1"})))
        wait_for(lambda: cm_path(first, "c") in remotes[first].files(), what="a live change")
    finally:
        op.stop()
        cp.kubectl("delete", "clusterrolebinding,clusterrole", user, check=False)
        _delete_all(cp, list(remotes))


def _binding(kind: str, name: str, role_kind: str, role: str, ns: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if ns is not None:
        meta["namespace"] = ns
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}],
    }
