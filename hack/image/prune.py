#!/usr/bin/env python3
"""Assemble the operator image's root file system: exactly the files `kubescribe run` needs.

Runs in the Dockerfile's `prune` stage (on the build machine's architecture) and writes OUT,
which the final stage copies onto an empty image (`FROM scratch`):

- the virtual environment VENV (the locked dependencies and kubescribe, installed for the
  target architecture), without activation scripts or other entry points;
- from RUNTIME (a Debian bookworm root of the target architecture: the same base image for
  the target platform, or an `mmdebstrap --variant=extract` root), the Python interpreter the
  environment names, its standard library (without tests, IDLE, tkinter, ensurepip, ...), and
  every shared library the interpreter, the extension modules and the extra programs need
  (their ELF `DT_NEEDED` entries, followed transitively, so foreign-architecture files are
  read as data and nothing runs under emulation), with the symbolic links on their paths;
- `unshare` (util-linux) when RUNTIME has it: the render check runs kustomize without a
  network route with it;
- a kustomize binary when given (`--kustomize`; it must be an ELF file of the target
  architecture);
- the CA bundle (from this stage: arch-independent, and an extract root has none), a passwd
  and group file with root and nonroot (65532), nsswitch.conf, os-release, a `/tmp`;
- bytecode for every Python file, compiled here (same Python version) in the `unchecked-hash`
  mode: the files never change in the image, and nothing is ever written next to them.

No shell, no package manager, no pip: the result is checked for them.

    prune.py --runtime /runtime --venv /opt/kubescribe --out /rootfs --arch arm64 [--kustomize F]
"""

from __future__ import annotations

import argparse
import compileall
import os
import py_compile
import shutil
import stat
import struct
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

MACHINES = {"amd64": (62, "x86_64-linux-gnu"), "arm64": (183, "aarch64-linux-gnu")}
PT_LOAD, PT_DYNAMIC, PT_INTERP = 1, 2, 3
DT_NULL, DT_NEEDED, DT_STRTAB, DT_RPATH, DT_RUNPATH = 0, 1, 5, 15, 29

# Standard library parts the operator never imports (top-level names).
STDLIB_EXCLUDED = {
    "test", "idlelib", "tkinter", "turtledemo", "turtle.py", "lib2to3", "ensurepip",
    "pydoc_data", "distutils", "sqlite3", "curses", "venv", "site-packages", "dist-packages",
    "__phello__", "LICENSE.txt",
}  # fmt: skip
# Extension modules left out (by module name): UIs, databases, test modules, and the deprecated
# nis (it links libnsl, libtirpc and Kerberos), crypt, spwd and ossaudiodev.
DYNLOAD_EXCLUDED = {
    "_tkinter", "_curses", "_curses_panel", "readline", "_dbm", "_gdbm", "_sqlite3",
    "nis", "_crypt", "spwd", "ossaudiodev",
    "_testcapi", "_testinternalcapi", "_testbuffer", "_testimportmultiple",
    "_testmultiphase", "_testclinic", "_ctypes_test", "_xxtestfuzz", "_xxsubinterpreters",
    "xxlimited", "xxlimited_35", "xxsubtype",
}  # fmt: skip
VENV_BIN_KEPT = {"kubescribe", "python", "python3"}
# Never in the result (checked at the end).
FORBIDDEN = (
    "bin/sh", "bin/bash", "bin/dash", "usr/bin/sh", "usr/bin/bash", "usr/bin/dash",
    "usr/bin/apt", "usr/bin/apt-get", "usr/bin/dpkg", "bin/dpkg", "usr/bin/pip", "usr/bin/pip3",
    "opt/kubescribe/bin/pip", "opt/kubescribe/bin/pip3",
)  # fmt: skip
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
NONROOT = 65532


class PruneError(Exception):
    """The runtime root or the environment cannot give what the image needs."""


@dataclass
class Elf:
    machine: int
    interp: str | None
    needed: list[str]
    runpath: list[str]


def read_elf(path: Path) -> Elf | None:
    """The ELF facts of a file (None when it is no ELF file): machine, program interpreter,
    needed libraries and library search path."""
    with path.open("rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF":
        return None
    if data[4] != 2 or data[5] != 1:
        raise PruneError(f"{path}: only 64-bit little-endian ELF files are supported")
    machine = struct.unpack_from("<H", data, 18)[0]
    phoff = struct.unpack_from("<Q", data, 32)[0]
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    loads: list[tuple[int, int, int]] = []
    interp = None
    dynamic: tuple[int, int] | None = None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from(
            "<IIQQQQ", data, phoff + i * phentsize
        )
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_INTERP:
            interp = data[p_offset : p_offset + p_filesz].split(b"\0", 1)[0].decode()
        elif p_type == PT_DYNAMIC:
            dynamic = (p_offset, p_filesz)
    needed_at: list[int] = []
    runpath_at: list[int] = []
    strtab = None
    if dynamic is not None:
        offset, size = dynamic
        for pos in range(offset, offset + size, 16):
            tag, value = struct.unpack_from("<qQ", data, pos)
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                needed_at.append(value)
            elif tag in (DT_RPATH, DT_RUNPATH):
                runpath_at.append(value)
            elif tag == DT_STRTAB:
                strtab = value
    if (needed_at or runpath_at) and strtab is None:
        raise PruneError(f"{path}: dynamic section without a string table")

    def string(at: int) -> str:
        assert strtab is not None
        for vaddr, off, size in loads:
            if vaddr <= strtab < vaddr + size:
                start = strtab - vaddr + off + at
                return data[start : data.index(b"\0", start)].decode()
        raise PruneError(f"{path}: string table outside the loaded segments")

    runpath = [d for at in runpath_at for d in string(at).split(":") if d]
    return Elf(machine, interp, [string(at) for at in needed_at], runpath)


@dataclass
class Tree:
    """Copies paths of a source root into OUT, reproducing the symbolic links on the way."""

    root: Path
    out: Path
    copied: set[str] = field(default_factory=set)

    def resolve(self, path: str, *, copy: bool) -> str:
        """The path inside the root that `path` names once every symbolic link is followed
        (as the kernel would in a chroot); with copy, the links and the file are copied."""
        todo = list(PurePosixPath(path).parts[1:])
        here = PurePosixPath("/")
        hops = 0
        while todo:
            name = todo.pop(0)
            if name in ("", "."):
                continue
            if name == "..":
                here = here.parent
                continue
            step = here / name
            src = self.root / step.relative_to("/")
            if src.is_symlink():
                hops += 1
                if hops > 40:
                    raise PruneError(f"{path}: too many symbolic links in {self.root}")
                target = os.readlink(src)
                if copy:
                    dst = self.out / step.relative_to("/")
                    if not dst.is_symlink():
                        self._parent(step)
                        if dst.exists():
                            raise PruneError(f"{step}: a link in the source, a file in the image")
                        dst.symlink_to(target)
                todo = list(PurePosixPath(target).parts) + todo
                if target.startswith("/"):
                    todo.pop(0)
                    here = PurePosixPath("/")
                continue
            if not src.exists():
                raise PruneError(f"{path}: not found in {self.root} (missing {step})")
            if todo and not src.is_dir():
                raise PruneError(f"{path}: {step} is not a folder in {self.root}")
            if copy and not todo:
                self._copy(step)
            here = step
        return str(here)

    def exists(self, path: str) -> bool:
        try:
            self.resolve(path, copy=False)
        except PruneError:
            return False
        return True

    def _parent(self, step: PurePosixPath) -> None:
        parent = self.out / step.parent.relative_to("/")
        if not parent.is_dir():
            # the parent was resolved already: real folders of the source root
            self._parent(step.parent)
            mode = stat.S_IMODE((self.root / step.parent.relative_to("/")).stat().st_mode)
            parent.mkdir(mode=mode)

    def _copy(self, step: PurePosixPath) -> None:
        src = self.root / step.relative_to("/")
        dst = self.out / step.relative_to("/")
        if str(step) in self.copied or dst.exists():
            return
        self._parent(step)
        if src.is_dir():
            dst.mkdir(mode=stat.S_IMODE(src.stat().st_mode))
        elif src.is_file():
            shutil.copy2(src, dst)
        else:
            raise PruneError(f"{step}: neither a file nor a folder in {self.root}")
        self.copied.add(str(step))


def elf_of(path: Path, machine: int, what: str) -> Elf:
    elf = read_elf(path)
    if elf is None:
        raise PruneError(f"{what} ({path}) is no ELF file")
    if elf.machine != machine:
        raise PruneError(f"{what} ({path}) is for ELF machine {elf.machine}, not {machine}")
    return elf


class Libraries:
    """Follows DT_NEEDED from the ELF files put into OUT, copying each library from RUNTIME."""

    def __init__(self, runtime: Tree, out: Path, machine: int, triplet: str) -> None:
        self.runtime = runtime
        self.out = out
        self.machine = machine
        self.default_dirs = [f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib", "/usr/lib"]
        # /etc/ld.so.cache (copied when present) also finds libraries in ld.so.conf folders
        # (e.g. /usr/local/lib, where python images keep libpython)
        if runtime.exists("/etc/ld.so.cache"):
            runtime.resolve("/etc/ld.so.cache", copy=True)
            self.default_dirs += self._conf_dirs("/etc/ld.so.conf")
        self.done: set[str] = set()

    def _conf_dirs(self, conf: str) -> list[str]:
        if not self.runtime.exists(conf):
            return []
        dirs: list[str] = []
        text = (self.runtime.root / self.runtime.resolve(conf, copy=False).lstrip("/")).read_text()
        for raw in text.splitlines():
            line = raw.split("#", 1)[0].strip()
            if line.startswith("include "):
                pattern = line.split(None, 1)[1]
                base = self.runtime.resolve(str(PurePosixPath(pattern).parent), copy=False)
                for inc in sorted((self.runtime.root / base.lstrip("/")).glob(Path(pattern).name)):
                    dirs += self._conf_dirs(f"{base}/{inc.name}")
            elif line.startswith("/"):
                dirs.append(line)
        return dirs

    def add(self, image_path: str, what: str) -> None:
        """The ELF file at image_path (already in OUT) and everything it needs."""
        todo = [(image_path, what)]
        while todo:
            path, what = todo.pop()
            if path in self.done:
                continue
            self.done.add(path)
            elf = elf_of(self.out / path.lstrip("/"), self.machine, what)
            origin = str(PurePosixPath(path).parent)
            dirs = [d.replace("$ORIGIN", origin).replace("${ORIGIN}", origin) for d in elf.runpath]
            if elf.interp:
                todo.append((self._install(elf.interp, what), f"the program interpreter of {path}"))
            for name in elf.needed:
                found = self._find(name, dirs)
                if found is None:
                    raise PruneError(
                        f"{path} needs {name}, found in none of {dirs + self.default_dirs} of "
                        f"{self.runtime.root} (add its package to the runtime root)"
                    )
                todo.append((found, f"{name} (needed by {path})"))

    def _find(self, name: str, dirs: list[str]) -> str | None:
        for d in [*dirs, *self.default_dirs]:
            candidate = f"{d}/{name}"
            # already in OUT (the environment's own libraries, e.g. pygit2.libs)
            if (self.out / candidate.lstrip("/")).is_file():
                return str(PurePosixPath(candidate))
            if self.runtime.exists(candidate):
                real = self.runtime.root / self.runtime.resolve(candidate, copy=False).lstrip("/")
                elf = read_elf(real)
                if elf is not None and elf.machine == self.machine:
                    return self._install(candidate, name)
        return None

    def _install(self, path: str, what: str) -> str:
        try:
            return self.runtime.resolve(path, copy=True)
        except PruneError as e:
            raise PruneError(f"{what}: {e}") from e


def copy_tree(tree: Tree, top: str, skip_top: set[str], skip: Iterable[str] = ()) -> None:
    """Every file under `top` (a folder of the source root), with the exclusions."""
    real = tree.resolve(top, copy=True)
    base = tree.root / real.lstrip("/")
    skipped = set(skip)
    for dirpath, dirnames, names in os.walk(base):
        rel = Path(dirpath).relative_to(base)
        filenames = [f for f in names if rel != Path(".") or f not in skip_top]
        if rel == Path("."):
            dirnames[:] = [d for d in dirnames if d not in skip_top]
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for d in list(dirnames):
            if (Path(dirpath) / d).is_symlink():
                dirnames.remove(d)
                filenames.append(d)
        for name in sorted(filenames):
            if name.endswith((".pyc", ".pyo")) or name in skipped:
                continue
            tree.resolve(f"{real}/{rel / name}".replace("/./", "/"), copy=True)


def write(out: Path, path: str, text: str, mode: int = 0o644) -> None:
    dst = out / path.lstrip("/")
    dst.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    dst.write_text(text)
    dst.chmod(mode)


def prune(args: argparse.Namespace) -> None:
    machine, triplet = MACHINES[args.arch]
    out: Path = args.out
    if out.exists() and any(out.iterdir()):
        raise PruneError(f"{out} is not empty")
    out.mkdir(parents=True, exist_ok=True, mode=0o755)
    out.chmod(0o755)
    runtime = Tree(args.runtime, out)
    build = Tree(Path("/"), out)
    venv = str(args.venv)

    # The environment, from this stage.
    cfg = dict(
        line.split("=", 1)
        for line in (Path(venv) / "pyvenv.cfg").read_text().splitlines()
        if "=" in line
    )
    cfg = {k.strip(): v.strip() for k, v in cfg.items()}
    version = ".".join(cfg.get("version_info", cfg.get("version", "")).split(".")[:2])
    if version != f"{sys.version_info[0]}.{sys.version_info[1]}":
        raise PruneError(f"{venv} is for Python {version!r}, this stage runs {sys.version}")
    for entry in sorted(Path(venv).iterdir()):
        if entry.name == "bin":
            for prog in sorted(entry.iterdir()):
                if prog.name not in VENV_BIN_KEPT and prog.name != f"python{version}":
                    continue
                if prog.is_symlink():  # to the interpreter of the runtime root
                    dst = out / str(prog).lstrip("/")
                    dst.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
                    dst.symlink_to(os.readlink(prog))
                else:
                    build.resolve(str(prog), copy=True)
        elif entry.is_symlink():
            dst = out / str(entry).lstrip("/")
            dst.symlink_to(os.readlink(entry))
        elif entry.is_dir():
            copy_tree(build, str(entry), set())
        else:
            build.resolve(str(entry), copy=True)
    link = Path(venv) / "bin" / "python3"
    for _ in range(8):  # python3 -> python -> /usr/bin/python3
        if not link.is_symlink():
            break
        interpreter = os.readlink(link)
        if interpreter.startswith("/"):
            break
        link = link.parent / interpreter
    else:
        raise PruneError(f"{venv}/bin/python3: too many symbolic links")
    if not interpreter.startswith("/"):
        raise PruneError(f"{venv}/bin/python3 leads to no interpreter outside the environment")

    # The interpreter and its standard library, from the runtime root.
    real = runtime.resolve(interpreter, copy=True)
    prefix = str(PurePosixPath(real).parent.parent)
    stdlib = f"{prefix}/lib/python{version}"
    if not runtime.exists(f"{stdlib}/os.py"):
        raise PruneError(f"no standard library at {stdlib} in {args.runtime}")
    copy_tree(runtime, stdlib, STDLIB_EXCLUDED)
    dynload = out / stdlib.lstrip("/") / "lib-dynload"
    for so in sorted(dynload.glob("*.so")):
        if so.name.split(".", 1)[0] in DYNLOAD_EXCLUDED:
            so.unlink()

    libs = Libraries(runtime, out, machine, triplet)
    libs.add(real, f"the interpreter {interpreter}")
    for so in sorted(out.rglob("*.so*")):
        if so.is_file() and not so.is_symlink() and read_elf(so) is not None:
            libs.add("/" + str(so.relative_to(out)), str(so.relative_to(out)))

    # unshare (util-linux): the render check's network isolation.
    if runtime.exists("/usr/bin/unshare"):
        libs.add(runtime.resolve("/usr/bin/unshare", copy=True), "unshare")
    if args.kustomize is not None:
        elf_of(args.kustomize, machine, f"the kustomize binary for {args.arch}")
        dst = out / "usr/local/bin/kustomize"
        dst.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        shutil.copyfile(args.kustomize, dst)
        dst.chmod(0o755)
        libs.add("/usr/local/bin/kustomize", "kustomize")

    # Data: CA bundle, users, name service, OS identification, /tmp.
    if not Path(CA_BUNDLE).is_file():
        raise PruneError(f"no CA bundle at {CA_BUNDLE} (install ca-certificates in the build base)")
    build.resolve(CA_BUNDLE, copy=True)
    for name, target in (("cert.pem", CA_BUNDLE), ("certs", "/etc/ssl/certs")):
        dst = out / "usr/lib/ssl" / name
        if not dst.is_symlink() and not dst.exists():
            dst.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
            dst.symlink_to(target)
    for name in ("/etc/os-release", "/usr/lib/os-release"):
        if runtime.exists(name):
            runtime.resolve(name, copy=True)
    write(out, "/etc/passwd", f"root:x:0:0:root:/root:/nonexistent\n"
          f"nonroot:x:{NONROOT}:{NONROOT}:nonroot:/nonexistent:/nonexistent\n")  # fmt: skip
    write(out, "/etc/group", f"root:x:0:\nnonroot:x:{NONROOT}:\n")
    write(out, "/etc/nsswitch.conf", "passwd: files\ngroup: files\nhosts: files dns\n")
    (out / "tmp").mkdir(exist_ok=True)
    (out / "tmp").chmod(0o1777)

    # Bytecode, compiled here for the paths of the image.
    failed = 0
    for top in (stdlib, venv):
        ok = compileall.compile_dir(
            out / top.lstrip("/"),
            quiet=2,
            stripdir=str(out),
            prependdir="/",
            workers=0,
            invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
        )
        failed += not ok
    found = [p for p in FORBIDDEN if (out / p).exists() or (out / p).is_symlink()]
    if found:
        raise PruneError(f"the image would carry {', '.join(found)}")
    size = sum(p.lstat().st_size for p in out.rglob("*"))
    print(
        f"prune: {args.arch} root {size / 1e6:.1f} MB, {len(libs.done)} ELF files"
        + (" (some Python files did not compile)" if failed else ""),
        file=sys.stderr,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runtime", type=Path, required=True, help="root of the target architecture")
    ap.add_argument("--venv", required=True, help="the environment (absolute path)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--arch", choices=sorted(MACHINES), required=True)
    ap.add_argument("--kustomize", type=Path, help="a kustomize binary for the target")
    args = ap.parse_args()
    try:
        prune(args)
    except (PruneError, OSError) as e:
        print(f"prune: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
