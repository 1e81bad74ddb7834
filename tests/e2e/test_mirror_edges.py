"""Edges of the mirror a user of the reference operator relies on: a repository without a single
commit, and a rule's operation filter, end to end on a real control plane and remote."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote, git
from tests.manifests import cm_path
from tests.support import Operator, setup_mirror, wait_for, wait_ready

pytestmark = pytest.mark.controlplane


def test_an_empty_repository_gets_its_branch_from_the_first_snapshot(
    crds: ControlPlane, namespace: str, tmp_path: Path, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    path = tmp_path / "empty.git"
    git("init", "--quiet", "--bare", "--initial-branch=main", str(path))
    empty = BareRemote(path)
    assert empty.tip() is None  # not a single commit
    cp.kubectl("create", "configmap", "first", "-n", ns, "--from-literal=a=1")
    operator()
    setup_mirror(cp, ns, empty)
    wait_for(lambda: empty.tip() is not None, what="the branch created")
    wait_for(lambda: cm_path(ns, "first") in empty.files(), what="the snapshot's file")
    log = empty.log()
    assert [c["message"] for c in log] == [
        f"Snapshot configmaps in {ns}: 1 added, 0 updated, 0 removed"
    ]
    assert git("rev-list", "--max-parents=0", "main", cwd=path).split() == [log[0]["sha"]]
    wait_ready(cp, ns)
    cp.kubectl("create", "configmap", "second", "-n", ns, "--from-literal=b=2")
    wait_for(lambda: cm_path(ns, "second") in empty.files(), what="a change after the snapshot")
    assert empty.log()[0]["message"] == f"CREATE ConfigMap {ns}/second"


def test_the_operation_filter_commits_only_the_operations_it_names(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator()
    rule = {"apiGroups": [""], "resources": ["configmaps"], "operations": ["CREATE", "DELETE"]}
    setup_mirror(cp, ns, remote, rule)
    wait_ready(cp, ns)
    cp.kubectl("create", "configmap", "app", "-n", ns, "--from-literal=level=info")
    wait_for(lambda: cm_path(ns, "app") in remote.files(), what="the created file")
    cp.kubectl("patch", "configmap", "app", "-n", ns, "-p", '{"data":{"level":"debug"}}')
    # A marker created after the update: once it is in Git, the update was seen and passed over.
    cp.kubectl("create", "configmap", "marker", "-n", ns, "--from-literal=m=1")
    wait_for(lambda: cm_path(ns, "marker") in remote.files(), what="the marker's file")
    assert "level: info" in remote.read(cm_path(ns, "app"))
    cp.kubectl("delete", "configmap", "app", "-n", ns)
    wait_for(lambda: cm_path(ns, "app") not in remote.files(), what="the deleted file")
    subjects = [c["message"].splitlines()[0] for c in remote.log()]
    assert subjects[:3] == [
        f"DELETE ConfigMap {ns}/app",
        f"CREATE ConfigMap {ns}/marker",
        f"CREATE ConfigMap {ns}/app",
    ]
    assert not [s for s in subjects if s.startswith("UPDATE")]


def probes(op: Operator) -> float:
    """Read probes of remotes so far (whatever their result)."""
    lines = op.metrics().splitlines()
    prefix = 'kubescribe_remote_probes_total{probe="read"'
    return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(prefix))


def test_reconcile_at_probes_a_provider_and_lists_a_target_afresh(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    cp.kubectl("create", "configmap", "app", "-n", ns, "--from-literal=level=info")
    op = operator()
    setup_mirror(cp, ns, remote)
    wait_for(lambda: cm_path(ns, "app") in remote.files(), what="the snapshot")
    wait_ready(cp, ns)
    # Someone edits the mirrored file by hand: nothing watched changed, so nothing rewrites it.
    edited = remote.read(cm_path(ns, "app")).replace("level: info", "level: hand-edited")
    remote.commit_foreign(cm_path(ns, "app"), edited, "Hand edit")
    probed = wait_for(lambda: probes(op), what="the first probe")

    cp.kubectl("annotate", "gitprovider", "git", "-n", ns, "kubescribe.io/reconcile-at=now-1")
    wait_for(lambda: probes(op) > probed, what="a probe asked for by the annotation")
    wait_for(
        lambda: (
            cp.get_json("gitprovider", "git", "-n", ns)["status"].get("lastHandledReconcileAt")
            == "now-1"
        ),
        what="the provider's lastHandledReconcileAt",
    )
    assert remote.read(cm_path(ns, "app")) == edited

    cp.kubectl("annotate", "gittarget", "mirror", "-n", ns, "kubescribe.io/reconcile-at=now-2")
    wait_for(
        lambda: (
            cp.get_json("gittarget", "mirror", "-n", ns)["status"].get("lastHandledReconcileAt")
            == "now-2"
        ),
        what="the target's lastHandledReconcileAt",
    )
    wait_for(lambda: "level: info" in remote.read(cm_path(ns, "app")), what="the file listed back")
    assert remote.log()[0]["message"].startswith(f"Snapshot configmaps in {ns}: 0 added, 1 updated")


def test_widening_prune_to_always_sweeps_the_orphans_at_once(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    cp.kubectl("create", "configmap", "app", "-n", ns, "--from-literal=level=info")
    operator()
    setup_mirror(cp, ns, remote, prune={"mode": "OnEvent"})
    wait_for(lambda: cm_path(ns, "app") in remote.files(), what="the snapshot")
    wait_ready(cp, ns)
    # An orphan: the document of an object that does not exist, pushed by someone else.
    ghost = remote.read(cm_path(ns, "app")).replace("name: app", "name: ghost")
    remote.commit_foreign(cm_path(ns, "ghost"), ghost, "A stale document")
    cp.kubectl("annotate", "gittarget", "mirror", "-n", ns, "kubescribe.io/reconcile-at=1")

    def retained() -> int:
        status = cp.get_json("gittarget", "mirror", "-n", ns).get("status") or {}
        return int(status.get("retainedDocuments") or 0)

    wait_for(lambda: retained() == 1, what="the orphan retained under OnEvent")
    assert cm_path(ns, "ghost") in remote.files()
    cp.kubectl("patch", "gittarget", "mirror", "-n", ns, "--type=merge",
               "-p", '{"spec":{"prune":{"mode":"Always"}}}')  # fmt: skip
    wait_for(lambda: cm_path(ns, "ghost") not in remote.files(), what="the orphan swept")
    assert remote.log()[0]["message"].startswith(
        f"Snapshot configmaps in {ns}: 0 added, 0 updated, 1 removed"
    )
    assert cm_path(ns, "app") in remote.files()
    wait_for(lambda: retained() == 0, what="nothing retained")
