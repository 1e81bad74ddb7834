"""How fast the history commands answer on a long mirror: `--commits` commits (one per minute,
the newest a minute ago) over `--objects` objects, written with pygit2 directly and packed as
a clone is. Prints one JSON object.

Figures: generating the repository; building the history index once (cold) and extending it
with 100 new commits; then, from a warm index, `kubescribe history` of one object,
`show --at`, `blame` and `timeline --since 1h` as whole processes (the command line's start-up
included), and the same questions asked in process. The baseline is plain
`git log -- PATH` for the object's file, without and with a commit-graph with changed-path
Bloom filters. Each figure is the median of `--samples` runs; shared 2-core machines are
noisy: compare within a run.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pygit2

from kubescribe.history import views
from kubescribe.history.index import History, index_file
from kubescribe.history.refs import parse_ref

SCRIPT = shutil.which("kubescribe", path=str(Path(sys.executable).parent)) or "kubescribe"
AUTHORS = [("alice", "audit"), ("bob", "audit"), ("carol", "admission"), ("ci-bot", "audit")]
SHM = "/dev/shm"  # a tmpfs: the default of --workdir when it exists
EXTRA = "dave"  # the author of the commits that extend the index
BLOB = pygit2.enums.FileMode.BLOB
TREE = pygit2.enums.FileMode.TREE


def deployment(ns: str, name: str, replicas: int, image: int) -> bytes:
    return (
        f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\n"
        f"  labels:\n    app: {name}\nspec:\n  replicas: {replicas}\n  selector:\n"
        f"    matchLabels:\n      app: {name}\n  template:\n    metadata:\n      labels:\n"
        f"        app: {name}\n    spec:\n      containers:\n      - name: app\n"
        f"        image: registry.example/{name}:1.{image}\n"
    ).encode()


def configmap(ns: str, name: str, value: int) -> bytes:
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {ns}\n"
        f"data:\n  LOG_LEVEL: level-{value}\n  SETTINGS: '{{\"retries\": {value % 7}}}'\n"
    ).encode()


class Writer:
    """Commits one file change at a time, writing only the trees on the changed path."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self.repo = repo
        self.dirs: dict[tuple[str, ...], dict[str, tuple[pygit2.Oid, int]]] = {(): {}}
        self.tip: pygit2.Oid | None = None
        self.last = ""

    def put(self, path: str, data: bytes, write: bool = True) -> None:
        *parents, name = path.split("/")
        for depth in range(len(parents)):
            self.dirs.setdefault(tuple(parents[: depth + 1]), {})
        self.dirs[tuple(parents)][name] = (self.repo.create_blob(data), BLOB)
        self.last = path
        if write:
            self._write(tuple(parents))

    def _write(self, folder: tuple[str, ...]) -> None:
        while True:
            builder = self.repo.TreeBuilder()
            for name, (oid, mode) in self.dirs[folder].items():
                builder.insert(name, oid, mode)
            oid = builder.write()
            if not folder:
                self.root = oid
                return
            self.dirs[folder[:-1]][folder[-1]] = (oid, TREE)
            folder = folder[:-1]

    def write_all(self) -> None:
        for folder in sorted(self.dirs, key=len, reverse=True):
            builder = self.repo.TreeBuilder()
            for name, (oid, mode) in self.dirs[folder].items():
                builder.insert(name, oid, mode)
            if folder:
                self.dirs[folder[:-1]][folder[-1]] = (builder.write(), TREE)
            else:
                self.root = builder.write()

    def commit(self, author: str, source: str, when: int, subject: str) -> None:
        sig = pygit2.Signature(author, f"{author}@example.org", when, 0)
        committer = pygit2.Signature("kubescribe", "kubescribe@example.org", when, 0)
        message = f"{subject}\n\nKubescribe-Author-Source: {source}\n"
        parents = [self.tip] if self.tip is not None else []
        self.tip = self.repo.create_commit(None, sig, committer, message, self.root, parents)

    @classmethod
    def reopen(cls, path: Path) -> Writer:
        """A writer that goes on from the tip of a repository `generate` wrote."""
        writer = cls(pygit2.Repository(str(path)))
        tip = writer.repo.references["refs/heads/main"].peel(pygit2.Commit)
        writer.tip = tip.id
        writer.root = tip.tree.id
        generated = tip
        while generated.author.name == EXTRA:  # the commits an earlier run added
            generated = generated.parents[0]
        first, *_ = generated.message.split("\n", 1)
        _, resource, ref = first.split()
        ns, name = ref.split("/")
        group = "core" if resource == "configmaps" else "apps"
        writer.last = f"mirror/{ns}/{group}/{resource}/{name}.yaml"
        writer.load(tip.tree, ())
        return writer

    def load(self, tree: pygit2.Tree, folder: tuple[str, ...]) -> None:
        entries = self.dirs.setdefault(folder, {})
        for entry in tree:
            entries[entry.name or ""] = (entry.id, entry.filemode)
            if isinstance(entry, pygit2.Tree):
                self.load(entry, (*folder, entry.name or ""))

    def publish(self) -> None:
        assert self.tip is not None
        self.repo.references.create("refs/heads/main", self.tip, force=True)


def generate(path: Path, commits: int, objects: int, seed: int = 7) -> Writer:
    # Every object a tree or commit names was just written: libgit2 need not look each up.
    pygit2.settings.enable_strict_object_creation(False)
    rng = random.Random(seed)
    repo = pygit2.init_repository(str(path), bare=True)
    writer = Writer(repo)
    namespaces = max(1, objects // 100)
    files: list[str] = []
    start = int(time.time()) - 60 * commits
    for i in range(objects):
        ns, name = f"team-{i % namespaces:03d}", f"app-{i // namespaces:04d}"
        if i % 2:
            path_ = f"mirror/{ns}/core/configmaps/{name}.yaml"
            writer.put(path_, configmap(ns, name, 0), write=False)
        else:
            path_ = f"mirror/{ns}/apps/deployments/{name}.yaml"
            writer.put(path_, deployment(ns, name, 1, 0), write=False)
        files.append(path_)
    writer.write_all()
    writer.commit("kubescribe", "configured", start, "Snapshot")
    for n in range(1, commits):
        path_ = rng.choice(files)
        _, ns, _, resource, leaf = path_.split("/")
        name = leaf.removesuffix(".yaml")
        if resource == "deployments":
            data = deployment(ns, name, rng.randint(1, 9), n)
        else:
            data = configmap(ns, name, n)
        writer.put(path_, data)
        author, source = rng.choice(AUTHORS)
        writer.commit(author, source, start + 60 * n, f"UPDATE {resource} {ns}/{name}")
    writer.publish()
    return writer


def timed(call: Callable[[], Any], samples: int) -> float:
    seconds = []
    for _ in range(samples):
        started = time.perf_counter()
        call()
        seconds.append(time.perf_counter() - started)
    return round(statistics.median(seconds), 4)


def run(*argv: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> None:
    subprocess.run(argv, check=True, capture_output=True, env=env, cwd=cwd)


def prepared(
    repo_path: Path, keep: Path | None, commits: int, objects: int, figures: dict[str, Any]
) -> Writer:
    """The mirror repository, generated and packed (or the kept one), with no commit-graph."""
    if keep is not None and repo_path.is_dir():
        writer = Writer.reopen(repo_path)
    else:
        started = time.perf_counter()
        writer = generate(repo_path, commits, objects)
        figures["generate_s"] = round(time.perf_counter() - started, 1)
        started = time.perf_counter()
        run("git", "repack", "-adq", cwd=repo_path)
        figures["repack_s"] = round(time.perf_counter() - started, 1)
    for graph in ("objects/info/commit-graph", "objects/info/commit-graphs"):
        shutil.rmtree(repo_path / graph, ignore_errors=True)
        (repo_path / graph).unlink(missing_ok=True)
    return writer


def git_figures(repo_path: Path, file: str, samples: int, figures: dict[str, Any]) -> None:
    """Plain `git log -- PATH` of the object's file, without and with changed-path filters."""
    figures["object_changes"] = int(
        subprocess.run(
            ["git", "rev-list", "--count", "main", "--", file],
            cwd=repo_path, check=True, capture_output=True, text=True,
        ).stdout
    )  # fmt: skip
    git_log = ("git", "log", "--format=%H %an %at", "main", "--", file)
    figures["git_log_path_s"] = timed(lambda: run(*git_log, cwd=repo_path), samples)
    run("git", "commit-graph", "write", "--reachable", "--changed-paths", cwd=repo_path)
    figures["git_log_path_bloom_s"] = timed(lambda: run(*git_log, cwd=repo_path), samples)


@click.command()
@click.option("--commits", default=100_000, show_default=True)
@click.option("--objects", default=10_000, show_default=True)
@click.option("--samples", default=5, show_default=True)
@click.option(
    "--workdir",
    default=SHM if os.path.isdir(SHM) else None,
    help="Where the repository is written (default: tmpfs when there is one: a disk that "
    "syncs every loose object makes generating take many minutes).",
)
@click.option(
    "--keep",
    type=click.Path(path_type=Path),
    default=None,
    help="Keep the generated repository here, and reuse the one already there (generated "
    "with the same --commits and --objects) instead of writing it again.",
)
def main(commits: int, objects: int, samples: int, workdir: str | None, keep: Path | None) -> None:
    figures: dict[str, Any] = {"commits": commits, "objects": objects}
    with tempfile.TemporaryDirectory(prefix="kubescribe-history-bench-", dir=workdir) as tmp:
        work = Path(tmp)
        repo_path = (keep or work) / "mirror.git"
        writer = prepared(repo_path, keep, commits, objects, figures)
        # The object asked about: the one the newest commit changed.
        file = writer.last
        _, ns, _, resource, leaf = file.split("/")
        name = leaf.removesuffix(".yaml")
        kind = "cm" if resource == "configmaps" else "deploy"
        git_figures(repo_path, file, samples, figures)

        db = work / "index.sqlite"
        assert writer.tip is not None
        repo = pygit2.Repository(str(repo_path))
        started = time.perf_counter()
        History(repo, writer.tip, "mirror", db).close()
        figures["index_build_s"] = round(time.perf_counter() - started, 1)
        figures["index_mib"] = round(db.stat().st_size / 2**20, 1)
        for n in range(100):
            data = configmap("team-000", "app-0001", commits + n)
            writer.put("mirror/team-000/core/configmaps/app-0001.yaml", data)
            writer.commit(EXTRA, "audit", int(time.time()), "UPDATE extra")
        writer.publish()
        started = time.perf_counter()
        History(repo, writer.tip, "mirror", db).close()
        figures["index_update_100_commits_s"] = round(time.perf_counter() - started, 2)

        history = History(repo, writer.tip, "mirror", db)
        ref = parse_ref(f"{kind}/{name}")
        now = dt.datetime.now(dt.UTC)

        def one_object() -> None:
            identity = views.find(history, ref, ns)
            entries = history.changes_of(identity)
            views.history_rows(history, entries)

        def show_at() -> None:
            identity = views.find(history, ref, ns)
            entry = views.at(history.changes_of(identity), views.point(history, "3h", now))
            assert entry is not None
            history.content(entry)

        def last_hour() -> None:
            views.timeline_rows(history, history.window(now - dt.timedelta(hours=1), None))

        figures["history_in_process_s"] = timed(one_object, samples)
        figures["show_at_in_process_s"] = timed(show_at, samples)
        figures["timeline_1h_in_process_s"] = timed(last_hour, samples)
        figures["timeline_1h_changes"] = len(history.window(now - dt.timedelta(hours=1), None))
        history.close()

        # The commands as a user runs them, the index warm in the cache.
        env = {**os.environ, "XDG_CACHE_HOME": str(work / "cache")}
        source = ("--repo", str(repo_path), "--path", "mirror")
        cached = index_file(work / "cache" / "history", str(repo_path) + "/", "main", "mirror")
        cached.parent.mkdir(parents=True)
        shutil.copyfile(db, cached)  # the index built above, where the commands keep theirs
        commands = {
            "history": ("history", f"{kind}/{name}", "-n", ns),
            "show_at": ("show", f"{kind}/{name}", "-n", ns, "--at", "3h"),
            "blame": ("blame", f"{kind}/{name}", "-n", ns),
            "timeline_1h": ("timeline", "--since", "1h"),
        }
        for label, args in commands.items():
            argv = (SCRIPT, *args, *source)
            figures[f"{label}_cli_s"] = timed(functools.partial(run, *argv, env=env), samples)
        figures["version_cli_s"] = timed(lambda: run(SCRIPT, "version", env=env), samples)
    click.echo(json.dumps(figures))


if __name__ == "__main__":
    main()
