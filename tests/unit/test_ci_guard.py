"""Under CI=true a skipped test fails the run; outside CI it stays a skip. Every run reports its
tests per suite and marker, and its skips."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SAMPLE = """
import pytest

def test_runs():
    pass

def test_needs_a_tool():
    pytest.skip("nginx is not installed")

@pytest.mark.skipif(True, reason="no sshd")
def test_marked():
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    raise AssertionError
"""


def run_sample(tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k not in {"CI", "PYTEST_ADDOPTS"}}
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "tests.ci_guard", "-p", "no:cacheprovider",
         "-n", "0", "--no-cov", "-q", "--rootdir", str(tmp_path), "-c", os.devnull,
         str(tmp_path / "test_sample.py")],
        capture_output=True, text=True, cwd=REPO, env=env, check=False, timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_skip_fails_under_ci(tmp_path: Path, ci: str) -> None:
    done = run_sample(tmp_path, ci)
    assert done.returncode == 1, done.stdout
    # a skip in a test fails it; a skip while setting it up (a marker, a fixture) is an error
    assert "1 failed, 1 passed, 1 xfailed, 1 error" in done.stdout, done.stdout
    assert "skipped under CI=true, where every test must run: nginx is not installed" in done.stdout
    assert "where every test must run: no sshd" in done.stdout
    assert "tests per suite: other 4;" in done.stdout  # the failed set-up counts too


def test_a_skip_is_a_skip_outside_ci(tmp_path: Path) -> None:
    done = run_sample(tmp_path, None)
    assert done.returncode == 0, done.stdout
    assert "1 passed, 2 skipped, 1 xfailed" in done.stdout, done.stdout
    assert (
        "tests per suite: other 4; per marker: controlplane 0, cluster 0; skipped 2" in done.stdout
    )
