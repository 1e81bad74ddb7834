"""`bash hack/demo.sh` sets up only what the demo uses (the control plane), the test command
everything. The real scripts run in a copy of `hack/` whose build steps, package queries and
tools are stubs that record what was asked of them."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kubescribe_devenv.controlplane import REPO_ROOT

STEPS = (
    "build-controlplane.sh",
    "build-kustomize.sh",
    "build-promtool.sh",
    "build-alertmanager.sh",
    "build-cluster.sh",
    "build-image.sh",
    "build-registry.sh",
    "build-cosign.sh",
)


@dataclass(frozen=True)
class Run:
    steps: list[str]  # the build scripts called, in order
    packages: set[str]  # the Debian packages looked up
    uv: list[str]  # uv's commands


def run(tmp_path: Path, script: str, *args: str) -> Run:
    """Run `hack/<script>` in a copy of the repository's scripts, as root (`id -u` is 0)."""
    root, stubs, log = tmp_path / "repo", tmp_path / "bin", tmp_path / "log"
    (root / "hack").mkdir(parents=True)
    (root / ".venv" / "bin").mkdir(parents=True)
    stubs.mkdir()
    for name in ("setup.sh", "setup-cluster.sh", "demo.sh"):
        shutil.copy(REPO_ROOT / "hack" / name, root / "hack" / name)
    for step in STEPS:
        (root / "hack" / step).write_text(f'echo "step {step}" >> "{log}"\necho "{tmp_path}"\n')
    uv_version = next(
        line.split("=", 1)[1]
        for line in (REPO_ROOT / "hack" / "setup.sh").read_text().splitlines()
        if line.startswith("UV_VERSION=")
    )
    tools = {
        "dpkg-query": f'echo "package $3" >> "{log}"; echo "install ok installed"',
        "uv": f'[ "$1" = --version ] && echo "uv {uv_version}" || echo "uv $*" >> "{log}"',
        "go": "true",
        "id": "echo 0",
    }
    for name, body in tools.items():
        (stubs / name).write_text(f"#!/bin/sh\n{body}\n")
        (stubs / name).chmod(0o755)
    (root / ".venv" / "bin" / "python").write_text("#!/bin/sh\ntrue\n")
    (root / ".venv" / "bin" / "python").chmod(0o755)
    env = {**os.environ, "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}"}
    subprocess.run(
        ["bash", str(root / "hack" / script), *args],
        check=True,
        env=env,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    lines = log.read_text().splitlines()
    return Run(
        steps=[line.split(" ", 1)[1] for line in lines if line.startswith("step ")],
        packages={line.split(" ", 1)[1] for line in lines if line.startswith("package ")},
        uv=[line.split(" ", 1)[1] for line in lines if line.startswith("uv ")],
    )


def test_the_demo_builds_the_control_plane_and_nothing_else(tmp_path: Path) -> None:
    demo = run(tmp_path, "demo.sh")
    assert demo.steps == ["build-controlplane.sh"]
    assert demo.packages == {"git"}  # no Redis, SSH, nginx, container runtime or image tools
    assert demo.uv[-1] == "run --frozen python -m kubescribe_devenv.demo"


def test_the_test_command_set_up_builds_everything(tmp_path: Path) -> None:
    full = run(tmp_path, "setup.sh")
    # kustomize, promtool and Alertmanager are built beside the control plane (that order among
    # themselves); the rest after it, in order.
    assert sorted(full.steps[:4]) == sorted(STEPS[:4])
    assert [s for s in full.steps if s in STEPS[1:4]] == list(STEPS[1:4])
    assert full.steps[4:] == list(STEPS[4:])
    assert {"git", "redis-server", "containerd", "buildah"} <= full.packages


def test_the_whole_suite_defers_the_cluster_set_up(tmp_path: Path) -> None:
    """hack/test.sh builds the cluster's tools beside the other tests (hack/setup-cluster.sh)."""
    first = run(tmp_path, "setup.sh", "--no-cluster")
    assert sorted(first.steps) == sorted(STEPS[:4])
    assert {"containerd", "buildah"} <= first.packages  # the packages are all installed up front
