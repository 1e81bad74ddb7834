"""`promtool check rules` accepts the alert rules and `promtool test rules` passes the unit tests
of every alert (tests/promtool/), with promtool built from its Go module
(hack/build-promtool.sh)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kubescribe_devenv import promtool
from kubescribe_devenv.controlplane import REPO_ROOT

RULES = REPO_ROOT / "charts" / "kubescribe" / "files" / "prometheus-rules.yaml"
TESTS = REPO_ROOT / "tests" / "promtool"


@pytest.fixture(scope="module")
def binary() -> Path:
    try:
        return promtool.binary()
    except promtool.PromtoolMissing as exc:
        pytest.skip(f"promtool could not be built (Go missing?): {exc}")


def run(binary: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binary), *args], capture_output=True, text=True, check=False, cwd=REPO_ROOT
    )


def test_the_rules_pass_promtools_checks(binary: Path) -> None:
    done = run(binary, "check", "rules", "--lint=all", "--lint-fatal", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 9 rules found" in done.stdout + done.stderr


def test_every_alert_passes_its_unit_tests(binary: Path) -> None:
    files = sorted(TESTS.glob("*.test.yaml"))
    assert files
    done = run(binary, "test", "rules", *map(str, files))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_a_wrong_expectation_fails(binary: Path, tmp_path: Path) -> None:
    """The unit tests can fail: the same cases with one alert expected where none fires."""
    text = (TESTS / "alerts.test.yaml").read_text()
    text = text.replace("../../charts/kubescribe/files/prometheus-rules.yaml", str(RULES))
    at = "      - eval_time: 10m\n        alertname: KubescribeTargetNotReady\n"
    labels = "{severity: warning, target: team/mirror, reason: RemoteUnreachable}"
    broken = text.replace(
        f"{at}        exp_alerts: []", f"{at}        exp_alerts:\n          - exp_labels: {labels}"
    )
    assert broken != text
    (tmp_path / "broken.test.yaml").write_text(broken)
    done = run(binary, "test", "rules", str(tmp_path / "broken.test.yaml"))
    assert done.returncode != 0
    assert "KubescribeTargetNotReady" in done.stdout + done.stderr
