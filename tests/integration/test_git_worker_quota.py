"""The cache quota against a real remote: a namespace whose repository outgrows its share of the
object cache is refused and its clone removed; the other namespaces keep writing."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from pathlib import Path

import pygit2
import pytest

from kubescribe import metrics
from kubescribe.git import repack as repack_module
from kubescribe.git.cachequota import NamespaceCache, folder_size
from kubescribe.git.pack import PackTooLarge, write_objects
from kubescribe.git.repack import tidy
from kubescribe.git.repo import GitRepository, TransferTooLarge, cache_path
from kubescribe.git.transport.callbacks import remote_callbacks
from kubescribe.git.transport.secret import Credentials
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.httpgit import HttpsGitServer, missing_binaries
from tests.builders import path_of, target, upsert
from tests.support import WorkerHarness, commit_noise, until

QUOTA = 200 << 10
PASSWORD = "correct-horse-battery"


def refusals(namespace: str) -> float:
    return float(metrics.CACHE_QUOTA_REFUSALS.labels(namespace)._value.get())


def worker(remote: BareRemote, cache: NamespaceCache) -> WorkerHarness:
    h = WorkerHarness(remote.url, cache.directory, targets=[target()], cache_quota=cache)
    h.worker.start()
    return h


@pytest.fixture
def small(tmp_path: Path) -> BareRemote:
    return BareRemote.create(tmp_path / "small.git")


async def test_a_repository_past_the_quota_is_refused_and_its_clone_removed(
    remote: BareRemote, small: BareRemote, tmp_path: Path
) -> None:
    commit_noise(remote, 1 << 20)
    tip = remote.tip()
    before = refusals("tenant-a")
    big = NamespaceCache(tmp_path / "cache" / "tenant-a", QUOTA, "tenant-a")
    other = NamespaceCache(tmp_path / "cache" / "tenant-b", QUOTA, "tenant-b")
    a, b = worker(remote, big), worker(small, other)
    try:
        a.worker.submit(upsert("a"))
        await until(lambda: any(not r.ok for r in a.reports), "a refusal")
        refused = next(r for r in a.reports if not r.ok)
        assert refused.reason == "CacheQuotaExceeded"
        assert "200Ki" in refused.message
        assert refusals("tenant-a") > before
        assert not cache_path(big.directory, remote.url).exists()
        assert big.usage() <= QUOTA
        assert metrics.CACHE_BYTES.labels("tenant-a")._value.get() <= QUOTA
        assert remote.tip() == tip  # nothing written

        await b.settle(upsert("b"))  # the other namespace writes on
        assert b.last().ok
        assert path_of("b") in small.files()
        assert 0 < other.usage() <= QUOTA
    finally:
        await a.worker.stop(timeout=5)
        await b.worker.stop(timeout=5)
    git("fsck", "--full", "--strict", cwd=remote.path)


async def test_the_same_repository_is_written_without_a_quota(
    remote: BareRemote, tmp_path: Path
) -> None:
    commit_noise(remote, 1 << 20)
    unlimited = NamespaceCache(tmp_path / "cache" / "tenant-a", 0, "tenant-a")
    h = worker(remote, unlimited)
    try:
        await h.settle(upsert("a"))
        assert h.last().ok
        assert unlimited.usage() > 1 << 20
    finally:
        await h.worker.stop(timeout=5)


async def test_a_batch_that_would_take_the_namespace_past_its_quota_is_refused(
    remote: BareRemote, tmp_path: Path
) -> None:
    cache = NamespaceCache(tmp_path / "cache" / "tenant-a", QUOTA, "tenant-a")
    h = worker(remote, cache)
    try:
        noise = os.urandom(150 << 10).hex()[: 150 << 10]
        await h.settle(upsert("a", k=noise))
        assert h.last().ok
        h.worker.submit(upsert("b", k=noise[::-1]))
        await until(lambda: not h.last().ok, "a refusal")
        assert h.last().reason == "CacheQuotaExceeded"
        assert path_of("b") not in remote.files()
        assert not cache_path(cache.directory, remote.url).exists()
        assert cache.usage() <= QUOTA
    finally:
        await h.worker.stop(timeout=5)


async def test_a_namespace_already_past_a_lowered_quota_is_refused_and_its_clone_removed(
    remote: BareRemote, tmp_path: Path
) -> None:
    folder = tmp_path / "cache" / "tenant-a"
    h = worker(remote, NamespaceCache(folder, 0, "tenant-a"))
    try:
        await h.settle(upsert("a", k=os.urandom(150 << 10).hex()))
    finally:
        await h.worker.stop(timeout=5)
    lowered = NamespaceCache(folder, 100 << 10, "tenant-a")
    assert lowered.usage() > 100 << 10
    h = worker(remote, lowered)
    try:
        h.worker.submit(upsert("b"))
        await until(lambda: any(not r.ok for r in h.reports), "a refusal")
        assert h.last().reason == "CacheQuotaExceeded"
        assert "100Ki" in h.last().message
        assert path_of("b") not in remote.files()
        assert not cache_path(folder, remote.url).exists()
    finally:
        await h.worker.stop(timeout=5)


@pytest.mark.parametrize("child_from", [10**9, 1], ids=["in process", "in a child"])
def test_a_tidy_never_writes_past_the_room_it_is_given(
    remote: BareRemote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, child_from: int
) -> None:
    monkeypatch.setattr(repack_module, "CHILD_FROM", child_from)
    cache = GitRepository(remote.url, tmp_path / "cache")
    for name in ("one", "two"):  # two fetches, two packs: a tidy merges them
        commit_noise(remote, 128 << 10, name)
        cache.fetch("main")
    repo = cache.repo
    packs = sorted((Path(repo.path) / "objects" / "pack").iterdir())
    with pytest.raises(OSError, match="exceed"):
        tidy(repo, garbage=True, max_bytes=64 << 10)
    assert sorted((Path(repo.path) / "objects" / "pack").iterdir()) == packs  # left as it was
    assert tidy(repo, garbage=True, max_bytes=1 << 20).kind == "repack"


def test_a_pack_past_its_bound_leaves_nothing_behind(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    blobs = [(os.urandom(20), 3, os.urandom(10_000)) for _ in range(20)]
    with pytest.raises(PackTooLarge):
        write_objects(repo.path, blobs, max_bytes=50_000)
    assert list((Path(repo.path) / "objects" / "pack").iterdir()) == []


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsGitServer]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (Debian packages nginx, fcgiwrap)")
    with HttpsGitServer(tmp_path_factory.mktemp("https")) as server:
        server.add_user("reader", PASSWORD, read_only=True)
        yield server


def test_a_fetch_over_https_stops_once_it_would_pass_its_limit(
    https_server: HttpsGitServer, tmp_path: Path
) -> None:
    served = https_server.create_repo("big")
    commit_noise(served, 4 << 20)
    url = https_server.url_for("big")
    creds = Credentials.from_secret_data(
        {"ca.crt": https_server.ca_pem, "username": b"reader", "password": PASSWORD.encode()}
    )
    cache = GitRepository(url, tmp_path / "cache", functools.partial(remote_callbacks, creds, url))
    with pytest.raises(TransferTooLarge):
        cache.fetch("main", QUOTA)
    assert folder_size(tmp_path / "cache") < 1 << 20  # stopped early, not after 4 MiB
    assert cache.fetch("main") is not None  # without a limit it goes through
    assert folder_size(tmp_path / "cache") > 4 << 20
