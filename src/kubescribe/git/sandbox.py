"""Where the operator handles what a repository writer controls: files of a fetched tree, and
the processes that read them or that tidy the shared cache.

- Files of a tree go only into a scratch folder inside the process's private directory
  (created with mode 0700 by this process); an entry name that is not one plain path segment
  is refused, never joined (`export_tree`).
- libgit2 reads no global, XDG or system Git configuration: its search paths point at an
  empty directory of the process (`confine_libgit2`), so a planted `.gitconfig` (e.g.
  `url.<attacker>.insteadOf`) cannot redirect a remote.
- Child processes start isolated: Python with `-I` (no current folder or environment on
  `sys.path`), their current folder the private directory, a minimal environment whose
  `HOME` is the empty directory (`python_child`, `child_env`).
- `kustomize` runs without `git` on its `PATH`, loading files only under the folder it
  builds, and, where the kernel allows an unprivileged network namespace (`unshare -rn`),
  with no network route at all (`run_confined`).
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pygit2
from pygit2.enums import ConfigLevel, FileMode

# The configuration levels libgit2 looks for outside a repository.
_OUTSIDE_LEVELS = (
    ConfigLevel.GLOBAL,
    ConfigLevel.XDG,
    ConfigLevel.SYSTEM,
    ConfigLevel.PROGRAMDATA,
)
_REFUSED_CHARACTERS = frozenset(b"/\\\0")


class UnsafeTree(ValueError):
    """A tree whose files cannot be written as they are named (the detail is for the log)."""


@functools.cache
def private_dir() -> Path:
    """This process's own directory (mode 0700, removed at exit)."""
    path = Path(tempfile.mkdtemp(prefix="kubescribe-private-"))
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


@functools.cache
def empty_dir() -> Path:
    """An empty directory nobody writes to (not even this process: mode 0500)."""
    path = private_dir() / "empty"
    path.mkdir(mode=0o500)
    return path


def confine_libgit2(directory: Path | None = None) -> None:
    """Point libgit2's global, XDG and system configuration search paths at `directory`
    (default: `empty_dir()`); call at start-up, before a repository opens."""
    where = str(directory or empty_dir())
    for level in _OUTSIDE_LEVELS:
        pygit2.settings.search_path[level] = where


@contextmanager
def scratch(prefix: str) -> Iterator[Path]:
    """A fresh folder in the private directory, removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=private_dir()))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _checked_name(raw: bytes | None) -> str:
    if raw is None or raw in (b"", b".", b"..") or not _REFUSED_CHARACTERS.isdisjoint(raw):
        raise UnsafeTree(f"tree entry {raw!r} is not a plain file name")
    return os.fsdecode(raw)


def export_tree(repo: pygit2.Repository, tree_id: pygit2.Oid, directory: Path) -> list[str]:
    """Write the files of a tree under `directory` (an empty folder from `scratch`), walking
    it with an explicit stack; symlinks and submodules are skipped. Returns the paths
    written, relative to `directory`. Raises `UnsafeTree` (having written only inside
    `directory`) for an entry name that is not one plain segment, or a name held twice."""
    written: list[str] = []
    stack: list[tuple[pygit2.Oid, str]] = [(tree_id, "")]
    while stack:
        oid, relative = stack.pop()
        try:
            tree = repo[oid]
        except (pygit2.GitError, KeyError) as exc:  # e.g. an empty entry name
            raise UnsafeTree(f"{relative or '.'}: {exc}") from exc
        if not isinstance(tree, pygit2.Tree):
            raise UnsafeTree(f"{relative or '.'} is not a tree")
        for entry in tree:
            name = _checked_name(entry.raw_name)
            inner = f"{relative}/{name}" if relative else name
            path = directory / inner
            try:
                if entry.filemode == FileMode.TREE:
                    path.mkdir(mode=0o700)
                    stack.append((entry.id, inner))
                elif entry.filemode in (FileMode.BLOB, FileMode.BLOB_EXECUTABLE):
                    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                    fd = os.open(path, flags, 0o600)
                    with os.fdopen(fd, "wb") as f:
                        f.write(repo[entry.id].read_raw())
                    written.append(inner)
            except FileExistsError as exc:
                raise UnsafeTree(f"tree entry {inner!r} is held twice") from exc
    return written


def child_env() -> dict[str, str]:
    """The environment of a child process: nothing inherited but the locale."""
    env = {"HOME": str(empty_dir()), "PATH": os.defpath}
    for name in ("LANG", "LC_ALL", "TZ"):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def python_child(module: str, *args: str) -> list[str]:
    """The command line of an isolated Python child running `module` (`python -I -m`)."""
    return [sys.executable, "-I", "-m", module, *args]


@functools.cache
def network_isolation() -> tuple[str, ...]:
    """The command prefix that runs a program with no network route (an empty network
    namespace), or () when the kernel or the Pod's seccomp profile refuses one."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    prefix = (unshare, "--map-root-user", "--net")
    try:
        # the probe is this interpreter: the image carries no `true` (nor any shell tool)
        done = subprocess.run(
            [*prefix, sys.executable, "-I", "-c", ""],
            capture_output=True,
            stdin=subprocess.DEVNULL,
            env=child_env(),
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    return prefix if done.returncode == 0 else ()


def run_confined(
    argv: Sequence[str], *, cwd: Path, timeout: float
) -> subprocess.CompletedProcess[bytes]:
    """Run an external program on files of a tree: no network route where one can be taken
    away, an empty `PATH` (so no `git`), `HOME` the empty directory. `argv[0]` is an
    absolute path."""
    if not os.path.isabs(argv[0]):
        raise ValueError(f"not an absolute path: {argv[0]}")
    env = child_env()
    env["PATH"] = str(empty_dir())
    env["TMPDIR"] = str(cwd)
    return subprocess.run(
        [*network_isolation(), *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=timeout,
        check=False,
    )
