"""The `kustomize` binary for tests and the demo: built from its Go module by
`hack/build-kustomize.sh` (cached per machine), and `kustomize build` of a Git tree."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from kubescribe_devenv.cachedtool import cached_tool
from kubescribe_devenv.controlplane import REPO_ROOT

BUILD_SCRIPT = REPO_ROOT / "hack" / "build-kustomize.sh"


class KustomizeMissing(RuntimeError):
    pass


def binary() -> Path:
    """The kustomize binary: `$KUSTOMIZE`, else built (or found cached) by the hack script."""
    return cached_tool(BUILD_SCRIPT, "kustomize", "KUSTOMIZE", KustomizeMissing)


def build(kustomize: Path, directory: Path) -> list[dict[str, Any]]:
    """`kustomize build directory`, parsed (raises with kustomize's error on failure)."""
    done = subprocess.run(
        [str(kustomize), "build", str(directory)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise AssertionError(f"kustomize build {directory} failed: {done.stderr.strip()}")
    return [d for d in yaml.safe_load_all(done.stdout) if d is not None]


def build_remote(
    kustomize: Path, remote: Path, folder: str, ref: str = "main"
) -> list[dict[str, Any]]:
    """`kustomize build` of `folder` in the tree of `ref` of the bare repository `remote`."""
    with tempfile.TemporaryDirectory(prefix="kustomize-") as scratch:
        tar = subprocess.run(
            ["git", "-C", str(remote), "archive", "--format=tar", ref],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", scratch], input=tar.stdout, check=True)
        return build(kustomize, Path(scratch) / folder)
