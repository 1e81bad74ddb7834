"""The `promtool` binary for the alert rules' tests: built from its Go module by
`hack/build-promtool.sh` (cached per machine)."""

from __future__ import annotations

from pathlib import Path

from kubescribe_devenv.cachedtool import cached_tool
from kubescribe_devenv.controlplane import REPO_ROOT

BUILD_SCRIPT = REPO_ROOT / "hack" / "build-promtool.sh"


class PromtoolMissing(RuntimeError):
    pass


def binary() -> Path:
    """The promtool binary: `$PROMTOOL`, else built (or found cached) by the hack script."""
    return cached_tool(BUILD_SCRIPT, "promtool", "PROMTOOL", PromtoolMissing)
