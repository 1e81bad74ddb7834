"""Fetches of a shared remote: how long a writer's fetch takes once the branch moved, and how
long six writers sharing one cache (six branches of one remote) take to fetch together.

A bare remote over file:// with a history of `--commits` commits over `--files` files on each
of `--branches` branches; the writers (one `GitRepository` each, one shared cache) never push,
as a replica that only follows a branch another replica writes. Each round lands one foreign
commit on every branch, then every writer fetches its branch at once. Prints one JSON object:
the first (cold) fetch, and per round the median and worst fetch of a writer (its wait for the
cache included) and how many bytes the cache grew. Shared 2-core machines are noisy: compare
within a run, report the spread.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import click
import pygit2

from kubescribe.git.repo import GitRepository
from kubescribe_devenv.gitremote import BareRemote

_SIG = pygit2.Signature("bench", "bench@example.invalid")


def _history(remote: pygit2.Repository, branch: str, files: int, commits: int) -> None:
    """`files` files in one folder on `branch`, then `commits` commits changing one each."""
    parent = remote.references["refs/heads/main"].target
    builder = remote.TreeBuilder()
    blobs = {
        f"f{i:05}.yaml": remote.create_blob(f"{branch} {i}\n".encode() * 20) for i in range(files)
    }
    for name, oid in blobs.items():
        builder.insert(name, oid, pygit2.enums.FileMode.BLOB)
    folder = builder.write()
    tip = _commit(remote, parent, folder, "seed")
    for n in range(commits):
        tip = _change(remote, tip, branch, n % files, f"v{n}")
    remote.references.create(f"refs/heads/{branch}", tip, force=True)


def _change(
    remote: pygit2.Repository, tip: pygit2.Oid, branch: str, index: int, value: str
) -> pygit2.Oid:
    folder = remote[tip].peel(pygit2.Tree)["data"].id
    builder = remote.TreeBuilder(remote[folder])
    blob = remote.create_blob(f"{branch} {index} {value}\n".encode() * 20)
    builder.insert(f"f{index:05}.yaml", blob, pygit2.enums.FileMode.BLOB)
    return _commit(remote, tip, builder.write(), value)


def _commit(
    remote: pygit2.Repository, parent: pygit2.Oid, folder: pygit2.Oid, message: str
) -> pygit2.Oid:
    root = remote.TreeBuilder()
    root.insert("data", folder, pygit2.enums.FileMode.TREE)
    return remote.create_commit(None, _SIG, _SIG, message, root.write(), [parent])


def _cache_bytes(cache: Path) -> int:
    return sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())


def _fetch_all(repos: list[tuple[str, GitRepository]]) -> list[float]:
    """Every writer fetches its branch at the same moment; each one's seconds."""
    times: list[float] = [0.0] * len(repos)
    start = threading.Barrier(len(repos))

    def run(i: int, branch: str, repo: GitRepository) -> None:
        start.wait()
        t0 = time.perf_counter()
        assert repo.fetch(branch) is not None
        times[i] = time.perf_counter() - t0

    threads = [threading.Thread(target=run, args=(i, b, r)) for i, (b, r) in enumerate(repos)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times


@click.command()
@click.option("--branches", default=6, show_default=True)
@click.option("--files", default=2000, show_default=True, help="Files per branch.")
@click.option("--commits", default=300, show_default=True, help="History per branch.")
@click.option("--rounds", default=5, show_default=True)
def main(branches: int, files: int, commits: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="kubescribe-bench-") as tmp:
        bare = BareRemote.create(Path(tmp, "remote.git"))
        remote = pygit2.Repository(str(bare.path))
        names = [f"b{i}" for i in range(branches)]
        for name in names:
            _history(remote, name, files, commits)
        cache = Path(tmp, "cache")
        repos = [(name, GitRepository(bare.url, cache)) for name in names]
        for _, repo in repos:  # the fetch times, not the bound on waiting for them
            repo.turn_timeout = 3600
        cold = _fetch_all(repos)
        per_round: list[dict[str, float]] = []
        for n in range(rounds):
            for name in names:
                tip = remote.references[f"refs/heads/{name}"].target
                moved = _change(remote, tip, name, n, f"round{n}")
                remote.references.create(f"refs/heads/{name}", moved, force=True)
            before = _cache_bytes(cache)
            times = _fetch_all(repos)
            per_round.append(
                {
                    "median_seconds": statistics.median(times),
                    "worst_seconds": max(times),
                    "cache_growth_kb": (_cache_bytes(cache) - before) / 1024,
                }
            )
        print(
            json.dumps(
                {
                    "benchmark": "shared_fetch",
                    "branches": branches,
                    "files": files,
                    "commits": commits,
                    "cold_worst_seconds": round(max(cold), 3),
                    "moved_median_seconds": round(
                        statistics.median(r["median_seconds"] for r in per_round), 3
                    ),
                    "moved_worst_seconds": round(max(r["worst_seconds"] for r in per_round), 3),
                    "moved_cache_growth_kb_per_round": round(
                        statistics.median(r["cache_growth_kb"] for r in per_round), 1
                    ),
                }
            )
        )


if __name__ == "__main__":
    main()
