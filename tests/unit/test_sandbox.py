"""The sandbox of what a repository writer controls, with real libgit2 and real processes:
tree entry names never leave the scratch folder, a planted `.gitconfig` is not read, children
start isolated and kustomize gets no network route."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest
from pygit2.enums import ObjectType

from kubescribe.git import repack, sandbox
from kubescribe.git.pending import PendingObjects
from kubescribe.git.sandbox import UnsafeTree, export_tree

GOOD = "https://git.example.com/team/config.git"
EVIL = "https://attacker.example.net/loot.git"


def raw_tree(repo: pygit2.Repository, entries: list[tuple[bytes, bytes, pygit2.Oid]]) -> pygit2.Oid:
    """A tree object written as bytes: libgit2's TreeBuilder refuses such names, a remote
    that does not fsck serves them."""
    data = b"".join(mode + b" " + name + b"\0" + oid.raw for mode, name, oid in entries)
    return repo.odb.write(ObjectType.TREE, data)


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "repo.git"), bare=True)


@pytest.mark.parametrize(
    "name",
    [b"../escaped.yaml", b"..", b".", b"", b"sub/file.yaml", b"a\\b.yaml", b"ABSOLUTE"],
)
def test_an_entry_that_is_not_a_plain_name_is_refused_and_nothing_leaves_the_folder(
    repo: pygit2.Repository, tmp_path: Path, name: bytes
) -> None:
    blob = repo.create_blob(b"planted\n")
    if name == b"ABSOLUTE":
        name = str(tmp_path / "planted.yaml").encode()
    inner = raw_tree(repo, [(b"100644", b"ok.yaml", blob), (b"100644", name, blob)])
    top = raw_tree(repo, [(b"40000", b"dir", inner)])
    before = set(tmp_path.rglob("*"))
    with sandbox.scratch("test-") as directory:
        with pytest.raises(UnsafeTree):
            export_tree(repo, top, directory)
        inside = {p for p in directory.rglob("*")}
    assert set(tmp_path.rglob("*")) == before  # nothing written next to the repository
    assert all(p.is_relative_to(directory) for p in inside)
    assert not directory.exists()  # the scratch folder is gone


def test_a_name_held_twice_is_refused(repo: pygit2.Repository, tmp_path: Path) -> None:
    blob = repo.create_blob(b"x\n")
    sub = raw_tree(repo, [(b"100644", b"f", blob)])
    top = raw_tree(repo, [(b"40000", b"a", sub), (b"100644", b"a", blob)])
    with sandbox.scratch("test-") as directory, pytest.raises(UnsafeTree):
        export_tree(repo, top, directory)


def test_plain_trees_are_exported_without_symlinks(repo: pygit2.Repository) -> None:
    blob = repo.create_blob(b"data\n")
    link = repo.create_blob(b"/etc/passwd")
    sub = raw_tree(repo, [(b"100644", b"b.yaml", blob)])
    top = raw_tree(
        repo, [(b"100644", b"a.yaml", blob), (b"120000", b"link", link), (b"40000", b"s", sub)]
    )
    with sandbox.scratch("test-") as directory:
        assert sorted(export_tree(repo, top, directory)) == ["a.yaml", "s/b.yaml"]
        assert (directory / "s" / "b.yaml").read_bytes() == b"data\n"
        assert not (directory / "link").exists()


def test_the_private_directory_is_the_processes_own() -> None:
    info = sandbox.private_dir().lstat()
    assert stat.S_ISDIR(info.st_mode)
    assert info.st_uid == os.geteuid()
    assert stat.S_IMODE(info.st_mode) & 0o077 == 0
    assert list(sandbox.empty_dir().iterdir()) == []


CHILD = """
import json, sys
import pygit2
from kubescribe.git import sandbox
if sys.argv[1] == "confined":
    sandbox.confine_libgit2()
repo = pygit2.init_repository(sys.argv[2], bare=True)
print(json.dumps(repo.remotes.create_anonymous(sys.argv[3]).url))
"""


def remote_url_seen(home: Path, tmp_path: Path, mode: str) -> str:
    """The URL libgit2 gives a remote in a fresh process whose HOME is `home`."""
    env = {"HOME": str(home), "PATH": os.defpath, "XDG_CONFIG_HOME": str(home / ".config")}
    done = subprocess.run(
        [sys.executable, "-I", "-c", CHILD, mode, str(tmp_path / f"{mode}.git"), GOOD],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=True,
    )
    url = json.loads(done.stdout)
    assert isinstance(url, str)
    return url


def test_a_planted_gitconfig_does_not_redirect_a_remote(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    planted = f'[url "{EVIL}"]\n\tinsteadOf = {GOOD}\n'
    (home / ".gitconfig").write_text(planted)
    (home / ".config" / "git" / "config").write_text(planted)
    assert remote_url_seen(home, tmp_path, "default") == EVIL  # what the plant does
    assert remote_url_seen(home, tmp_path, "confined") == GOOD


def test_a_python_child_starts_isolated(tmp_path: Path) -> None:
    # A module planted in the current folder or on PYTHONPATH is not what the child runs.
    (tmp_path / "kubescribe").mkdir()
    (tmp_path / "kubescribe" / "__init__.py").write_text("raise SystemExit('planted')\n")
    argv = sandbox.python_child("kubescribe.gitnames")
    env = sandbox.child_env() | {"PYTHONPATH": str(tmp_path)}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert "-I" in argv
    assert done.returncode == 0, done.stderr
    assert sandbox.child_env()["HOME"] == str(sandbox.empty_dir())


@pytest.mark.skipif(not sandbox.network_isolation(), reason="no unprivileged network namespace")
def test_a_confined_program_reaches_no_listening_socket(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        probe = (
            "import socket, sys\n"
            f"try: socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
            "except OSError: sys.exit(3)\n"
        )
        done = sandbox.run_confined([sys.executable, "-I", "-c", probe], cwd=tmp_path, timeout=30)
        assert done.returncode == 3, done.stderr
        with pytest.raises(BlockingIOError):
            server.accept()


def test_the_tidy_child_runs_no_module_planted_in_the_current_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A tree entry that once landed in the shared folder as kubescribe/__init__.py ran as
    # the operator at the next tidy: `python -m` puts the current folder first on sys.path.
    shared = tmp_path / "shared"
    (shared / "kubescribe").mkdir(parents=True)
    marker = tmp_path / "ran"
    (shared / "kubescribe" / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(shared)
    monkeypatch.setenv("PYTHONPATH", str(shared))
    monkeypatch.setattr(repack, "CHILD_FROM", 1)
    repo = pygit2.init_repository(str(tmp_path / "c.git"), bare=True)
    pending = PendingObjects(repo)
    signature = pygit2.Signature("t", "t@example.invalid", 0, 0)
    parents: list[pygit2.Oid] = []
    for data in (b"one", b"two"):  # two packs of one size: the tidy merges them
        tree = repo.TreeBuilder()
        tree.insert("f", repo.create_blob(data), pygit2.enums.FileMode.BLOB)
        parents = [repo.create_commit(None, signature, signature, "m", tree.write(), parents)]
        pending.flush()
    repo.references.create("refs/heads/main", parents[0])
    assert repack.tidy(repo).kind == "repack"  # done by the child
    assert not marker.exists()
