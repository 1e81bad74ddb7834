"""`--kustomize` must name a binary that runs: a wrong path stops the operator at start,
instead of every render check failing later as if the folder did not render."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kubescribe import cli


@pytest.mark.parametrize("what", ["missing", "not executable", "a folder"])
def test_the_flag_refuses_a_path_that_is_no_executable_file(tmp_path: Path, what: str) -> None:
    binary = tmp_path / "kustomize"
    if what == "not executable":
        binary.write_text("#!/bin/sh\n")
    elif what == "a folder":
        binary.mkdir(mode=0o755)
    result = CliRunner().invoke(cli.main, ["run", f"--kustomize={binary}"])
    assert result.exit_code == 2
    assert "--kustomize" in result.output
    assert "not an executable file" in result.output
