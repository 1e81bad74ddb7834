"""The wheel built from the project ships the operator and nothing of the test bench."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

from kubescribe_devenv.controlplane import REPO_ROOT


def test_the_wheel_carries_the_operator_and_no_test_bench(tmp_path: Path) -> None:
    subprocess.run(
        ["uv", "build", "--wheel", "--quiet", "--out-dir", str(tmp_path), str(REPO_ROOT)],
        check=True, capture_output=True, timeout=170,
    )  # fmt: skip
    [wheel] = tmp_path.glob("kubescribe-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "kubescribe/cli.py" in names
    assert "kubescribe/git/worker.py" in names
    assert [n for n in names if "devenv" in n] == []
    assert {n.split("/", 1)[0] for n in names if n.endswith(".py")} == {"kubescribe"}
