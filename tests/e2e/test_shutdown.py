"""SIGTERM as a Pod sees it: a replica that writes branches exits 0 after pushing what it holds
and releasing its Leases. The stop is bounded by --shutdown-timeout: a stop that overran exits
with kubescribe.stopping.EXIT_OVERRAN instead, so the exit code is the check (the time goes to
the closing notes, not to an assertion)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.manifests import provider, target, watch_rule
from tests.support import Operator, manifest, wait_for

pytestmark = pytest.mark.controlplane


def test_sigterm_pushes_releases_and_exits_zero(
    crds: ControlPlane, namespace: str, operator: Callable[..., Operator], tmp_path: Path
) -> None:
    cp, ns = crds, namespace
    remote = BareRemote.create(tmp_path / "remote.git")
    op = operator(f"--replica-id={ns}-r1", f"--lease-namespace={ns}")  # in-memory cursors
    cp.apply(
        manifest(
            provider("repo", ns, remote.url, push={"commitWindow": "3s"}),
            target("mirror", ns, "repo", "mirror"),
            watch_rule("rule", ns, "mirror", {"apiGroups": [""], "resources": ["configmaps"]}),
        )
    )
    cp.kubectl("create", "configmap", "first", "-n", ns, "--from-literal=a=1")
    path = f"mirror/{ns}/core/configmaps/first.yaml"
    wait_for(lambda: path in remote.files(), timeout=60, what="first write")
    opened = window_count(op)
    # a change in an open commit window at SIGTERM: written, pushed, its cursor saved
    cp.kubectl("create", "configmap", "late", "-n", ns, "--from-literal=a=1")
    wait_for(lambda: window_count(op) > opened, timeout=30, what="a window open")
    op.stop()
    assert op.proc is not None
    assert op.proc.returncode == 0
    logs = op.logs()
    assert "lease.released" in logs
    assert "operator.stop_overran" not in logs
    # nothing was left for the exit to wait for (idle Git threads held each exit for its margin)
    assert "operator.threads_abandoned" not in logs
    assert f"mirror/{ns}/core/configmaps/late.yaml" in remote.files()


def window_count(op: Operator) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in op.metrics().splitlines()
        if line.startswith("kubescribe_windows_opened_total")
    )
