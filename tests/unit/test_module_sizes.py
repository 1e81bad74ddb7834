"""`hack/module_sizes.py` (a step of hack/check.sh): no module under src/ past 600 lines, and
the ones already past it never grow past their ceiling."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "module_sizes.py"
DESIRED = "src/kubescribe/controller/desired.py"
CEILING: int = runpy.run_path(str(SCRIPT))["CEILINGS"][DESIRED]  # moves down as it shrinks


def sizes(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(root)],
        capture_output=True, text=True, check=False, timeout=30,
    )  # fmt: skip


def tree(tmp_path: Path, **modules: int) -> Path:
    """A tree holding src/kubescribe/<name>.py files of the given line counts."""
    for name, lines in modules.items():
        path = tmp_path / "src" / "kubescribe" / f"{name.replace('__', '/')}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n" * lines)
    return tmp_path


def test_the_repository_passes() -> None:
    result = sizes(ROOT)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("modules", "message"),
    [
        ({"big": 601}, "src/kubescribe/big.py: 601 lines, the limit is 600: split it"),
        (
            {"controller__desired": CEILING + 1},
            f"{DESIRED}: {CEILING + 1} lines, its ceiling is {CEILING}: split it",
        ),
    ],
)
def test_a_module_past_its_limit_fails(
    tmp_path: Path, modules: dict[str, int], message: str
) -> None:
    result = sizes(tree(tmp_path, small=10, **modules))
    assert result.returncode == 1
    assert message in result.stderr


def test_modules_within_their_limits_pass_and_a_shrunk_ceiling_is_named(tmp_path: Path) -> None:
    result = sizes(tree(tmp_path, exact=600, controller__desired=CEILING - 10))
    assert result.returncode == 0, result.stderr
    assert f"may come down: {DESIRED}: {CEILING - 10} lines" in result.stderr
    assert "exact.py" not in result.stderr
