"""The `promtool` binary for the alert rules' tests: built from its Go module by
`hack/build-promtool.sh` (cached per machine)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from kubescribe_devenv.controlplane import REPO_ROOT

BUILD_SCRIPT = REPO_ROOT / "hack" / "build-promtool.sh"


class PromtoolMissing(RuntimeError):
    pass


def binary() -> Path:
    """The promtool binary: `$PROMTOOL`, else built (or found cached) by the hack script."""
    override = os.environ.get("PROMTOOL")
    if override:
        return Path(override)
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise PromtoolMissing(f"promtool build failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1]) / "promtool"
