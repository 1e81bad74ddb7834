"""The writer's object cache: one pack per batch, tidied as packs pile up, shared by branches."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pygit2
import pytest
import structlog
import yaml

from kubescribe import metrics
from kubescribe.git.repack import PACK_LIMIT, pack_count
from kubescribe.git.repo import cache_path
from kubescribe.git.writer import Writer
from kubescribe_devenv.gitremote import BareRemote, git
from tests.builders import COMMITTER, path_of, read_doc, target, upsert
from tests.support import WorkerHarness, until


def cache_objects(remote: BareRemote, tmp_path: Path) -> tuple[int, int]:
    """(packs, loose objects) in the worker's cache repository."""
    repo = pygit2.Repository(str(cache_path(tmp_path / "cache", remote.url)))
    objects = Path(repo.path) / "objects"
    loose = sum(1 for d in objects.iterdir() if len(d.name) == 2 for _ in d.iterdir())
    return pack_count(repo), loose


async def test_batches_write_packs_and_the_cache_is_tidied(
    remote: BareRemote, make: Callable[..., WorkerHarness], tmp_path: Path
) -> None:
    tidied = metrics.REPACKS._value.get()
    h = make()
    for i in range(PACK_LIMIT + 3):
        await h.settle(upsert(f"cm{i % 5}", k=str(i)))
    packs, loose = cache_objects(remote, tmp_path)
    assert loose == 0  # commits, trees and blobs are never loose objects
    assert packs < PACK_LIMIT
    assert metrics.REPACKS._value.get() > tidied
    last = PACK_LIMIT + 2
    assert read_doc(remote, path_of(f"cm{last % 5}"))["data"] == {"k": str(last)}
    assert len(remote.log()) == PACK_LIMIT + 4  # one commit per change, and the seed
    git("fsck", "--full", "--strict", cwd=remote.path)


async def test_branches_sharing_a_cache_keep_writing_across_tidies(
    remote: BareRemote, make: Callable[..., WorkerHarness], tmp_path: Path
) -> None:
    main = make(branch="main")
    other = make(branch="other")
    for i in range(PACK_LIMIT * 2):
        await main.settle(upsert("a", k=str(i)))
        await other.settle(upsert("b", k=str(i)))
    last = str(PACK_LIMIT * 2 - 1)
    assert read_doc(remote, path_of("a"))["data"] == {"k": last}
    assert yaml.safe_load(remote.read(path_of("b"), "other"))["data"] == {"k": last}
    assert cache_objects(remote, tmp_path)[0] < PACK_LIMIT
    git("fsck", "--full", "--strict", cwd=remote.path)


async def test_producers_wait_for_room_while_the_remote_is_away(
    remote: BareRemote, tmp_path: Path
) -> None:
    h = WorkerHarness(remote.url, tmp_path / "cache", targets=[target()], max_queued=2)
    h.worker.start()
    try:
        away = remote.path.with_name("away.git")
        remote.path.rename(away)
        h.worker.submit(upsert("a"))
        h.worker.submit(upsert("b"))
        waiting = asyncio.create_task(h.worker.room())
        await until(lambda: any(not r.ok for r in h.reports), "a failure report")
        assert not waiting.done()  # two items wait for the writer: the producer waits
        away.rename(remote.path)
        await asyncio.wait_for(waiting, 30)  # the retry after the remote is back makes room
        assert {path_of("a"), path_of("b")} <= set(remote.files())
        await h.worker.room()  # room again: returns at once
    finally:
        await h.worker.stop(timeout=5)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB file system for the cache (a tmpfs: needs root)."""
    if os.geteuid() != 0:
        pytest.skip("mounts a tmpfs")
    mount = tmp_path / "small"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(path: Path) -> None:
    with path.open("wb") as f, contextlib.suppress(OSError):
        while True:
            f.write(b"\0" * 65536)
            f.flush()


async def test_a_full_cache_disk_says_so_and_converges_once_space_returns(
    remote: BareRemote, small_disk: Path
) -> None:
    h = WorkerHarness(remote.url, small_disk / "cache", targets=[target()])
    h.worker.start()
    try:
        await h.settle(upsert("a"))
        fill(small_disk / "filler")
        h.worker.submit(upsert("b", k="while the disk is full"))
        await until(lambda: any(not r.ok for r in h.reports), "a failure report")
        failure = next(r for r in h.reports if not r.ok)
        assert failure.reason == "CacheUnwritable"
        assert "No space left on device" in failure.message
        assert str(small_disk / "cache") in failure.message
        (small_disk / "filler").unlink()
        # The remote shows the push before the worker reports it: wait for both.
        await until(
            lambda: path_of("b") in remote.files() and h.last().ok,
            "the write after space returned, reported",
        )
    finally:
        await h.worker.stop(timeout=5)


def test_while_items_wait_the_cache_is_tidied_only_from_twice_as_many_packs(
    remote: BareRemote, tmp_path: Path
) -> None:
    """A tidy runs between batches; in a burst it would hold up the next one."""
    config = target()
    writer = Writer(
        remote.url,
        "main",
        cache_dir=tmp_path / "cache",
        committer=COMMITTER,
        callbacks=None,
        max_rebuilds=3,
        logger=structlog.get_logger(),
    )
    try:
        for i in range(2 * PACK_LIMIT - 2):
            writer.write([upsert(f"cm{i}", k="v")], {config.key: config}, busy=lambda: True)
        assert cache_objects(remote, tmp_path)[0] >= 2 * PACK_LIMIT - 2  # deferred
        writer.write([upsert("cm-last", k="v")], {config.key: config}, busy=lambda: True)
        assert cache_objects(remote, tmp_path)[0] < PACK_LIMIT  # but not forever
        for i in range(PACK_LIMIT):
            writer.write([upsert(f"cm{i}", k="w")], {config.key: config})
            assert cache_objects(remote, tmp_path)[0] < PACK_LIMIT  # idle: as before
    finally:
        writer.close()
    git("fsck", "--full", "--strict", cwd=remote.path)
