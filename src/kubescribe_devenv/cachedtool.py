"""A tool built from its Go module by a `hack/build-*.sh` script into the per-machine cache:
the script prints the folder that holds the binary, building it only when it is missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def cached_tool(script: Path, name: str, override: str, missing: type[Exception]) -> Path:
    """The binary `name`: `$<override>` when set, else built (or found cached) by `script`;
    raises `missing` with the end of the build's output when the build fails."""
    given = os.environ.get(override)
    if given:
        return Path(given)
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise missing(f"{name} build failed:\n{done.stderr[-4000:]}")
    return Path(done.stdout.strip().splitlines()[-1]) / name
