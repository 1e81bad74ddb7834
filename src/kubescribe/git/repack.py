"""Keep the object cache small: few packs, and only objects a reference reaches.

Every batch adds a pack (see `pending`) and every fetch adds one; a long run would pile up
thousands, and libgit2 looks through each on a lookup miss. Objects of builds that were thrown
away (a rejected push, a failed one) are garbage. `tidy` keeps the packs a geometric
progression (as `git repack --geometric=2`): each pack holds at least twice as many objects as
all smaller packs together, and the smallest packs that break that are merged into one. An
object is so rewritten a logarithmic number of times, and the packs stay few (a progression of
factor 3 between 8 and 100,000 objects is 8 packs). When the merge would take every pack and
there may be garbage, everything reachable from a reference is written as one pack instead (a
repack) and the rest, packs, loose objects and garbage, is removed.

A tidy that copies many objects runs in a child process (`python -I -m kubescribe.git.repack`,
started isolated by `sandbox`).
It reads every object it copies and indexes them all before the pack is final, a peak that
grows with the history; in the operator, the heap that peak leaves behind (arenas a few live
objects pin, free memory glibc keeps) stayed for good, so a long run grew in steps at each
large tidy. The child's memory goes back to the system when it exits.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

from kubescribe.git import sandbox
from kubescribe.git.lookup_names import lookup_name
from kubescribe.git.pack import write_objects

_LOOSE_DIR = re.compile(r"^[0-9a-f]{2}$")


# From this many packs on, the small ones are merged. Lower than git's gc.autoPackLimit (50):
# libgit2 rescans the pack folder (a stat per pack) for every object it writes that it does
# not find, so the count sets the cost of each commit (2,000 commits: 0.31 s with one pack,
# 0.40 s with 8, 0.77 s with 32).
PACK_LIMIT = 8


# Each pack holds at least this many times the objects of all smaller packs together.
_FACTOR = 2


@dataclass(frozen=True)
class TidyResult:
    kind: str  # "merge", "repack", or "none" (the packs already form a progression)
    objects: int  # objects written to the new pack
    packs_removed: int
    loose_removed: int
    packs: int  # packs left


def packs_to_merge(sizes: list[int]) -> int:
    """How many of the smallest packs (object counts, ascending) to merge so that every pack
    left holds at least `_FACTOR` times as many objects as all smaller ones together."""
    count = 0
    smaller = 0
    for i, size in enumerate(sizes):
        if i and size < _FACTOR * smaller:
            count = i + 1
        smaller += size
    return count


def pack_count(repo: pygit2.Repository) -> int:
    return sum(1 for _ in (Path(repo.path) / "objects" / "pack").glob("pack-*.idx"))


# A tidy that copies at least this many objects runs in a child process (see module); a
# child costs about 0.1 s to start, a copy of this many objects about as much.
CHILD_FROM = 2_000


class TidyFailed(OSError):
    """The child process that tidied the cache failed (its error in the message)."""


def tidy(repo: pygit2.Repository, garbage: bool = True, max_bytes: int | None = None) -> TidyResult:
    """Merge the small packs into one (see module); when that takes every pack and the cache
    may hold `garbage` (objects of a build whose push failed, of a cache an earlier process
    left), repack the reachable objects instead. Without garbage, merging every pack costs
    a copy of each object, the repack a walk of every commit's trees. The new pack may take
    at most `max_bytes` (the cache quota's room: fetched packs hold deltas, the new one does
    not); past that the tidy fails (`PackTooLarge`, or `TidyFailed` from the child).

    The caller holds the cache exclusively (no other build or fetch reads it meanwhile) and
    opens the repository afresh afterwards: this instance still maps the removed packs.
    """
    directory = Path(repo.path) / "objects" / "pack"
    sizes = {idx: _object_count(idx) for idx in directory.glob("pack-*.idx")}
    ordered = sorted(sizes, key=lambda idx: sizes[idx])
    merge = packs_to_merge([sizes[idx] for idx in ordered])
    if merge == len(ordered) and (garbage or merge < 2):  # < 2: loose objects only, or one pack
        if sum(sizes.values()) >= CHILD_FROM:
            return _in_child(repo.path, [_bound(max_bytes), "repack"])
        return repack(repo, max_bytes)
    if merge == 0:
        return TidyResult("none", 0, 0, 0, len(ordered))
    small = ordered[:merge]
    if sum(sizes[idx] for idx in small) >= CHILD_FROM:
        return _in_child(repo.path, [_bound(max_bytes), "merge", *(idx.name for idx in small)])
    return _merge(repo, small, len(ordered), max_bytes)


# Files Git writes beside a pack it manages itself (kept, promised, with a bitmap or a reverse
# index): such a pack is Git's to merge, never ours.
_GIT_MANAGED = (".keep", ".promisor", ".bitmap", ".rev", ".mtimes")


def merge_shared(repo: pygit2.Repository, limit: int = PACK_LIMIT) -> TidyResult | None:
    """Merge the small packs of a repository that other writers share (a file:// remote: every
    push adds a pack, as Git's receive-pack does before its `gc --auto`), once there are more
    than `limit`; None when none was needed, or another writer is merging them.

    Only merges, never a repack: an object no reference reaches yet may be another writer's
    push under way. A merged pack is removed only once the new one holds its objects, so a
    reader that misses it finds them on its rescan. One merge at a time: a lock on the pack
    folder (released if the process dies)."""
    directory = Path(repo.path) / "objects" / "pack"
    if sum(1 for _ in directory.glob("pack-*.idx")) <= limit:
        return None
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None
        # Listed again under the lock: the writer that held it may have merged them. An index
        # larger than its count allows is not one (a remote's files are not ours): left alone.
        counts = {idx: _object_count(idx) for idx in _plain_packs(directory)}
        sizes = {i: n for i, n in counts.items() if i.stat().st_size <= _largest_index(n)}
        ordered = sorted(sizes, key=lambda idx: sizes[idx])
        merge = packs_to_merge([sizes[idx] for idx in ordered])
        if merge < 2:
            return None
        small = ordered[:merge]
        if sum(sizes[idx] for idx in small) >= CHILD_FROM:
            return _in_child(repo.path, ["-", "merge", *(idx.name for idx in small)])
        return _merge(repo, small, len(ordered))
    finally:
        os.close(fd)  # and the lock with it


def _largest_index(count: int) -> int:
    """Bytes of a version 2 index of `count` objects at most (every offset a large one)."""
    return 8 + 256 * 4 + count * (20 + 4 + 4 + 8) + 2 * 20


def _plain_packs(directory: Path) -> list[Path]:
    """The indexes of the packs in `directory` that Git does not manage (`_GIT_MANAGED`)."""
    return [
        idx
        for idx in directory.glob("pack-*.idx")
        if not any(idx.with_suffix(suffix).exists() for suffix in _GIT_MANAGED)
    ]


def _bound(max_bytes: int | None) -> str:
    """`max_bytes` as the child's argument ("-": none)."""
    return "-" if max_bytes is None else str(max_bytes)


def _merge(
    repo: pygit2.Repository, small: list[Path], packs: int, max_bytes: int | None = None
) -> TidyResult:
    """Write the objects of the `small` packs (of `packs` in all) as one pack, remove them."""
    odb = repo.odb
    ids = [oid for idx in small for oid in _object_ids(idx)]
    written = write_objects(
        repo.path, ((oid.raw, *odb.read(oid)) for oid in ids), max_bytes=max_bytes
    )
    for idx in small:
        if idx.stem != written:
            idx.with_suffix(".pack").unlink(missing_ok=True)
            idx.unlink(missing_ok=True)
    return TidyResult("merge", len(set(ids)), len(small), 0, packs - len(small) + 1)


def _in_child(git_dir: str, args: list[str]) -> TidyResult:
    done = subprocess.run(
        sandbox.python_child("kubescribe.git.repack", git_dir, *args),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd=sandbox.private_dir(),
        env=sandbox.child_env(),
        check=False,
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        raise TidyFailed(f"the tidy process failed: {lines[-1][:500]}")
    return TidyResult(**json.loads(done.stdout))


def _object_count(idx: Path) -> int:
    """Objects in a pack, from the last fan-out entry of its version 2 index."""
    with idx.open("rb") as f:
        f.seek(8 + 255 * 4)
        return int.from_bytes(f.read(4), "big")


def _object_ids(idx: Path) -> list[pygit2.Oid]:
    data = idx.read_bytes()
    count = int.from_bytes(data[8 + 255 * 4 : 8 + 256 * 4], "big")
    names = data[8 + 256 * 4 : 8 + 256 * 4 + 20 * count]
    return [pygit2.Oid(raw=names[i : i + 20]) for i in range(0, len(names), 20)]


def repack(repo: pygit2.Repository, max_bytes: int | None = None) -> TidyResult:
    """Replace the packs and loose objects of `repo` by one pack of the reachable objects
    (same terms for the caller as `tidy`)."""
    objects = Path(repo.path) / "objects"
    before = {p.name for p in (objects / "pack").glob("pack-*")}
    reachable = list(_reachable(repo))
    odb = repo.odb
    stem = write_objects(
        repo.path, ((oid.raw, *odb.read(oid)) for oid in reachable), max_bytes=max_bytes
    )
    kept = {f"{stem}.pack", f"{stem}.idx"} if stem is not None else set()
    packs_removed = 0
    for name in before - kept:
        (objects / "pack" / name).unlink(missing_ok=True)
        packs_removed += name.endswith(".idx")
    loose_removed = 0
    for sub in objects.iterdir():
        if sub.is_dir() and _LOOSE_DIR.match(sub.name):
            for loose in sub.iterdir():
                loose.unlink(missing_ok=True)
                loose_removed += 1
            sub.rmdir()
    return TidyResult("repack", len(reachable), packs_removed, loose_removed, int(stem is not None))


def _reachable(repo: pygit2.Repository) -> Iterator[pygit2.Oid]:
    """Every commit, tree and blob reachable from a reference, each once."""
    walker = repo.walk(None)
    tips = 0
    for name in repo.references:
        target = repo.references[lookup_name(name)].resolve().target
        if isinstance(target, pygit2.Oid) and isinstance(repo.get(target), pygit2.Commit):
            walker.push(target)
            tips += 1
    if not tips:
        return
    seen: set[pygit2.Oid] = set()
    for commit in walker:
        yield commit.id
        yield from _tree(repo, commit.tree_id, seen)


def _tree(repo: pygit2.Repository, oid: pygit2.Oid, seen: set[pygit2.Oid]) -> Iterator[pygit2.Oid]:
    """Every object reachable from tree `oid` not yet `seen`, depth first in tree order. A
    stack, not recursion: a fetched tree may nest folders thousands deep."""
    if oid in seen:
        return
    seen.add(oid)
    yield oid
    stack: list[Iterator[pygit2.Object]] = [iter(_as_tree(repo, oid))]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
        elif entry.filemode == FileMode.TREE:
            if entry.id not in seen:
                seen.add(entry.id)
                yield entry.id
                stack.append(iter(_as_tree(repo, entry.id)))
        elif entry.filemode != FileMode.COMMIT and entry.id not in seen:  # not a submodule
            seen.add(entry.id)
            yield entry.id


def _as_tree(repo: pygit2.Repository, oid: pygit2.Oid) -> pygit2.Tree:
    tree = repo[oid]
    assert isinstance(tree, pygit2.Tree)
    return tree


def _main(argv: list[str]) -> None:
    """The child's side of `_in_child`: `<git dir> <max bytes> repack` or `<git dir>
    <max bytes> merge <idx>...`; prints the result as JSON."""
    git_dir, bound, kind, *names = argv
    max_bytes = None if bound == "-" else int(bound)
    sandbox.confine_libgit2(Path.home())  # the parent's empty directory (`child_env`)
    # Each object is read once: libgit2's object cache would only hold the peak higher.
    pygit2.settings.enable_caching(False)
    repo = pygit2.Repository(git_dir)
    if kind == "repack":
        result = repack(repo, max_bytes)
    else:
        directory = Path(git_dir) / "objects" / "pack"
        packs = sum(1 for _ in directory.glob("pack-*.idx"))
        result = _merge(repo, [directory / name for name in names], packs, max_bytes)
    print(json.dumps(asdict(result)))


if __name__ == "__main__":
    _main(sys.argv[1:])
