"""write_objects: many objects as one pack that libgit2 and git both read."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pygit2
import pytest

from kubescribe.git.pack import write_objects

BLOB = 3


def _blobs(*contents: bytes) -> list[tuple[bytes, int, bytes]]:
    return [(pygit2.hash(data).raw, BLOB, data) for data in contents]


@pytest.mark.parametrize("level", [0, 1])
def test_blobs_in_a_pack_are_readable_and_valid(tmp_path: Path, level: int) -> None:
    repo = pygit2.init_repository(str(tmp_path / "store.git"), bare=True)
    repo.create_blob(b"already loose")  # libgit2 has looked at the (empty) pack folder
    blobs = [f"document {i}\n".encode() * (i % 50) for i in range(500)]
    blobs.append(b"")  # empty blob
    blobs.append(bytes(range(256)) * 40)  # binary, size needs a multi-byte header
    blobs.append(blobs[3])  # duplicate
    stem = write_objects(repo.path, _blobs(*blobs), level)
    assert stem is not None
    idx = Path(repo.path) / "objects" / "pack" / f"{stem}.idx"
    listed = subprocess.run(
        ["git", "verify-pack", "-v", str(idx)], check=True, capture_output=True, text=True
    ).stdout
    assert sum(" blob " in line for line in listed.splitlines()) == len(set(blobs))
    for data in blobs:
        blob = repo[pygit2.hash(data)]
        assert isinstance(blob, pygit2.Blob)
        assert blob.data == data
    # A second pack right after the first is found too (no mtime-granularity surprises).
    write_objects(repo.path, _blobs(b"second pack"), level)
    assert repo[pygit2.hash(b"second pack")].read_raw() == b"second pack"

    packs = sorted((Path(repo.path) / "objects" / "pack").glob("*.idx"))
    assert len(packs) == 2
    for idx in packs:
        subprocess.run(["git", "verify-pack", str(idx)], check=True, capture_output=True)
    fsck = subprocess.run(
        ["git", "fsck", "--full", "--strict"],
        cwd=repo.path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert fsck.returncode == 0, fsck.stderr


def test_nothing_to_write(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "store.git"), bare=True)
    assert write_objects(repo.path, []) is None
    assert not list((Path(repo.path) / "objects" / "pack").glob("*.pack"))
