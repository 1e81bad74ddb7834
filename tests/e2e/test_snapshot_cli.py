"""`kubescribe snapshot`: a one-shot export with the operator's sanitizer and layout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kubescribe.devenv.controlplane import ControlPlane
from kubescribe.devenv.gitremote import git
from tests.manifests import configmap
from tests.support import manifest

pytestmark = pytest.mark.controlplane


def snapshot(cp: ControlPlane, repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "kubescribe",
            "snapshot",
            "--kubeconfig",
            str(cp.kubeconfig),
            "--repo",
            str(repo),
            *args,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_snapshot_exports_into_a_working_copy(
    controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp, ns = controlplane, namespace
    cp.apply(
        manifest(configmap("app", ns, {"k": "v"}, tier="web"), configmap("other", ns, {"k": "v"}))
    )
    repo = tmp_path / "export"
    done = snapshot(
        cp, repo, "--namespace", ns, "--resource", "configmaps", "--selector", "tier=web"
    )
    assert done.returncode == 0, done.stderr
    exported = repo / ns / "core" / "configmaps" / "app.yaml"
    assert exported.read_text() == (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: app\n  namespace: {ns}\n"
        "  labels:\n    tier: web\ndata:\n  k: v\n"
    )
    assert not (repo / ns / "core" / "configmaps" / "other.yaml").exists()
    assert not (repo / ns / "core" / "configmaps" / "kube-root-ca.crt.yaml").exists()
    assert git("status", "--porcelain", cwd=repo) == ""
    head = git("rev-parse", "HEAD", cwd=repo)

    again = snapshot(
        cp, repo, "--namespace", ns, "--resource", "configmaps", "--selector", "tier=web"
    )
    assert again.returncode == 0, again.stderr
    assert git("rev-parse", "HEAD", cwd=repo) == head  # same cluster state: no new commit


def test_snapshot_refuses_a_dirty_checkout(
    controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    repo = tmp_path / "dirty"
    git("init", "--quiet", "--initial-branch=main", str(repo))
    (repo / "notes.txt").write_text("uncommitted\n")
    git("add", "notes.txt", cwd=repo)
    git("commit", "--quiet", "-m", "notes", cwd=repo)
    (repo / "notes.txt").write_text("changed\n")
    done = snapshot(controlplane, repo, "--namespace", namespace, "--resource", "configmaps")
    assert done.returncode != 0
    assert "local changes" in done.stderr
