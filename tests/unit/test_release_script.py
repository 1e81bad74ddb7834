"""`hack/release.sh` refuses what would make a wrong or partial release before it builds or
pushes anything (the release itself is tested in tests/cluster/test_release.py). The real
script runs in a copy holding only its inputs: pyproject.toml and CHANGELOG.md."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from kubescribe_devenv.controlplane import REPO_ROOT

CHANGELOG = "# Changelog\n\n## Unreleased\n\n- next\n\n## 0.2.0 — 2026-12-01\n\n- a feature\n"


def release(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    root = tmp_path / "repo"
    (root / "hack").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO_ROOT / "hack" / "release.sh", root / "hack" / "release.sh")
    (root / "pyproject.toml").write_text('[project]\nname = "kubescribe"\nversion = "0.2.0"\n')
    if not (root / "CHANGELOG.md").exists():
        (root / "CHANGELOG.md").write_text(CHANGELOG)
    key = tmp_path / "cosign.key"
    key.write_text("not used: every case stops before signing\n")
    base = {"REGISTRY": "127.0.0.1:5000/ks", "COSIGN_KEY": str(key), "COSIGN_PASSWORD": ""}
    environ = {k: v for k, v in os.environ.items() if k not in base and k != "ARCHES"}
    environ.update({k: v for k, v in {**base, **env}.items() if v != "<unset>"})
    return subprocess.run(
        ["bash", str(root / "hack" / "release.sh"), *args],
        capture_output=True, text=True, env=environ, check=False, timeout=30,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ((), {}, "usage: hack/release.sh X.Y.Z"),
        (("0.2",), {}, "version '0.2' is not semantic"),
        (("0.2.0",), {"REGISTRY": "<unset>"}, "set REGISTRY"),
        (("0.2.0",), {"REGISTRY": "a b/c"}, "REGISTRY 'a b/c' is not host[:port][/path]"),
        (("0.2.0",), {"REGISTRY": "host/Upper"}, "is not host[:port][/path]"),
        (("0.2.0",), {"COSIGN_KEY": "<unset>"}, "set COSIGN_KEY"),
        (("0.2.0",), {"COSIGN_KEY": "/nonexistent/cosign.key"}, "COSIGN_KEY: no such file"),
        (("0.2.0",), {"COSIGN_PASSWORD": "<unset>"}, "set COSIGN_PASSWORD"),
        (("0.2.0",), {"ARCHES": "amd64 s390x"}, "unsupported architecture 's390x'"),
        (("0.2.0",), {"ARCHES": " "}, "ARCHES is empty"),
        (("0.3.0",), {}, "pyproject.toml says 0.2.0, not 0.3.0"),
    ],
)
def test_refuses_before_building(
    tmp_path: Path, args: tuple[str, ...], env: dict[str, str], message: str
) -> None:
    done = release(tmp_path, *args, **env)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
    assert not (tmp_path / "repo" / "dist").exists()


def test_refuses_a_version_without_its_changelog_section(tmp_path: Path) -> None:
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "CHANGELOG.md").write_text(
        "# Changelog\n\n## Unreleased\n\n- 0.2.0 is mentioned, not cut\n\n## 0.1.0 — 2026-11-30\n"
    )
    done = release(tmp_path, "0.2.0")
    assert done.returncode != 0
    assert "CHANGELOG.md has no '## 0.2.0 — YYYY-MM-DD' section" in done.stderr
    assert not (tmp_path / "repo" / "dist").exists()
