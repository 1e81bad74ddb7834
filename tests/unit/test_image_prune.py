"""hack/image/prune.py, the Dockerfile's prune stage: ELF facts read as data, symbolic links on
a path reproduced, and a kustomize binary of the wrong kind refused with a clear error."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from kubescribe_devenv.controlplane import REPO_ROOT

SCRIPT = REPO_ROOT / "hack" / "image" / "prune.py"


def _prune() -> ModuleType:
    spec = importlib.util.spec_from_file_location("prune", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["prune"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


prune = _prune()


def test_the_needed_libraries_and_interpreter_of_an_elf_file_are_read() -> None:
    elf = prune.read_elf(Path(sys.executable).resolve())
    assert elf is not None
    assert elf.machine in (62, 183)
    assert elf.interp is not None
    assert "ld-linux" in elf.interp
    assert "libc.so.6" in elf.needed or any("libpython" in n for n in elf.needed)
    assert prune.read_elf(SCRIPT) is None


def test_links_on_a_path_are_reproduced_and_a_missing_file_is_named(tmp_path: Path) -> None:
    root, out = tmp_path / "root", tmp_path / "out"
    (root / "usr/lib/x").mkdir(parents=True)
    (root / "usr/lib/x/libfoo.so.1.2").write_bytes(b"foo")
    (root / "usr/lib/x/libfoo.so.1").symlink_to("libfoo.so.1.2")
    (root / "lib").symlink_to("usr/lib")
    out.mkdir()
    tree = prune.Tree(root, out)
    assert tree.resolve("/lib/x/libfoo.so.1", copy=True) == "/usr/lib/x/libfoo.so.1.2"
    assert (out / "lib").readlink() == Path("usr/lib")
    assert (out / "usr/lib/x/libfoo.so.1").readlink() == Path("libfoo.so.1.2")
    assert (out / "lib/x/libfoo.so.1").read_bytes() == b"foo"
    with pytest.raises(prune.PruneError, match=r"missing /usr/lib/x/libbar\.so"):
        tree.resolve("/lib/x/libbar.so", copy=True)
    (root / "loop").symlink_to("loop")
    with pytest.raises(prune.PruneError, match="too many symbolic links"):
        tree.resolve("/loop/x", copy=False)


@pytest.mark.parametrize("kind", ["text", "other-machine"])
def test_a_kustomize_that_is_no_binary_of_the_target_is_refused(tmp_path: Path, kind: str) -> None:
    fake = tmp_path / "kustomize"
    if kind == "text":
        fake.write_text("#!/bin/sh\necho kustomize\n")
        match = "is no ELF file"
    else:
        shutil.copy(Path(sys.executable).resolve(), fake)  # the machine's, not arm64's
        match = "for ELF machine"
    with pytest.raises(prune.PruneError, match=match):
        prune.elf_of(fake, 183, "the kustomize binary for arm64")


def test_an_unknown_architecture_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--runtime", str(tmp_path), "--venv", str(tmp_path),
         "--out", str(tmp_path / "out"), "--arch", "s390x"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "invalid choice: 's390x'" in done.stderr
