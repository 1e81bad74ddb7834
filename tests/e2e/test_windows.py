"""Commit windows end to end: a real kube-apiserver, the operator process, a real Git remote."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from kubescribe.mirror.authors import UNRESOLVED
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.manifests import CM_RULE, cm_path, configmap, provider, target, watch_rule
from tests.support import Operator, manifest, metric, stays, wait_for, wait_ready

pytestmark = pytest.mark.controlplane


def setup(cp: ControlPlane, ns: str, remote: BareRemote, **provider_spec: object) -> None:
    cp.apply(
        manifest(
            provider("git", ns, remote.url, **provider_spec),
            target("mirror", ns, "git", "mirror"),
            watch_rule("rule", ns, "mirror", CM_RULE),
        )
    )
    wait_ready(cp, ns)


def subjects(remote: BareRemote, n: int) -> list[str]:
    return [c["message"].split("\n")[0] for c in remote.log()[:n]]


def provider_seen(cp: ControlPlane, ns: str) -> bool:
    obj = cp.get_json("gitprovider", "git", "-n", ns)
    return bool(obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"])


def test_a_burst_within_the_window_is_one_commit_and_one_push(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    op = operator()
    setup(cp, ns, remote, push={"commitWindow": "3s"})
    tip, commits = remote.tip(), len(remote.log())
    pushes = metric(op, "kubescribe_pushes_total", 'result="ok"')
    silence = metric(op, "kubescribe_windows_closed_total", 'reason="silence"')

    cp.apply(manifest(*(configmap(f"burst-{i}", ns, {"i": str(i)}) for i in range(5))))
    stays(lambda: remote.tip() == tip, 1.0, what="nothing pushed while the window is open")
    names = [cm_path(ns, f"burst-{i}") for i in range(5)]
    wait_for(lambda: set(names) <= set(remote.files()), timeout=30, what="the burst in Git")

    log = remote.log()
    assert len(log) == commits + 1
    assert log[0]["message"] == "5 changes: 5 created (ConfigMap)\n\n" + "\n".join(
        f"CREATE ConfigMap {ns}/burst-{i}" for i in range(5)
    )
    # The metric counts right after the push returns, a moment after the files are visible.
    ok = wait_for(
        lambda: metric(op, "kubescribe_pushes_total", 'result="ok"') - pushes, what="the push"
    )
    assert ok == 1
    assert metric(op, "kubescribe_windows_closed_total", 'reason="silence"') == silence + 1

    cp.kubectl("create", "configmap", "after", "-n", ns, "--from-literal=a=1")
    wait_for(lambda: cm_path(ns, "after") in remote.files(), timeout=30, what="the later change")
    assert len(remote.log()) == commits + 2
    assert subjects(remote, 1) == [f"CREATE ConfigMap {ns}/after"]


def test_the_window_changes_without_a_restart(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    op = operator()
    setup(cp, ns, remote, push={"commitWindow": "0s"})
    assert op.proc is not None
    pid = op.proc.pid

    def burst(*names: str) -> None:
        commits = len(remote.log())
        cp.apply(manifest(*(configmap(n, ns, {"n": n}) for n in names)))
        wait_for(
            lambda: {cm_path(ns, n) for n in names} <= set(remote.files()),
            timeout=30,
            what=f"{names} in Git",
        )
        wait_for(lambda: len(remote.log()) > commits, what="the commits")
        self_commits.append(len(remote.log()) - commits)

    def set_window(window: str) -> None:
        patch = json.dumps({"spec": {"push": {"commitWindow": window}}})
        cp.kubectl("patch", "gitprovider", "git", "-n", ns, "--type=merge", "-p", patch)
        wait_for(lambda: provider_seen(cp, ns), what=f"the operator to see {window}")

    self_commits: list[int] = []
    burst("zero-a", "zero-b")
    set_window("3s")
    burst("window-a", "window-b", "window-c")
    assert subjects(remote, 1) == ["3 changes: 3 created (ConfigMap)"]
    set_window("0s")
    burst("again-a", "again-b")

    assert self_commits == [2, 1, 2]
    assert subjects(remote, 2) == [
        f"CREATE ConfigMap {ns}/again-b",
        f"CREATE ConfigMap {ns}/again-a",
    ]
    assert op.proc.poll() is None
    assert op.proc.pid == pid


def test_attributed_author_without_audit_is_the_unresolved_sentinel(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    cp.apply(manifest(configmap("before", ns, {"a": "1"})))
    operator()
    setup(cp, ns, remote, push={"commitWindow": "0s"}, attribution={"mode": "attributed-author"})
    cp.kubectl("create", "configmap", "live", "-n", ns, "--from-literal=a=1")
    wait_for(lambda: cm_path(ns, "live") in remote.files(), timeout=30, what="the live change")

    live, snapshot = remote.log()[:2]
    assert (live["author"], live["author_email"]) == (UNRESOLVED.name, UNRESOLVED.email)
    assert (live["committer"], live["committer_email"]) == (
        "kubescribe",
        "kubescribe@users.noreply.local",
    )
    assert snapshot["message"].startswith("Snapshot configmaps")
    assert snapshot["author"] == "kubescribe"  # snapshots are the committer's
