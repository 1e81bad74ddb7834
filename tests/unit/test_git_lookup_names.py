"""pygit2 keeps a reference to every name string a lookup is given: the writer's lookups pass
one shared string per distinct name, so a long run does not grow with every change."""

from __future__ import annotations

import gc
import platform
import tracemalloc
from pathlib import Path

import pygit2

from kubescribe import heap
from kubescribe.git.repo import _ref_name
from kubescribe.git.tree import edit_tree


def test_tree_edits_with_fresh_path_strings_keep_memory_flat(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "store.git"), bare=True)
    blobs = [repo.create_blob(b"value %d\n" % i) for i in range(10)]
    tree = edit_tree(repo, None, {"mirror/ns/core/configmaps/a.yaml": blobs[0]})

    def edit(i: int) -> None:
        path = "/".join(["mirror", "ns", "core", "configmaps", "a.yaml"])  # a new string
        edit_tree(repo, tree, {path: blobs[i % len(blobs)]})

    for i in range(50):
        edit(i)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(1000):
            edit(i)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # Leaking each name would keep 5 strings per edit: about 280 KB here.
    assert grown < 20_000


def test_ref_names_are_one_string_per_name() -> None:
    first = _ref_name("refs/heads/", "main")
    assert first == "refs/heads/main"
    assert _ref_name("refs/heads/", "main") is first


def test_the_heap_is_trimmed_where_the_c_library_can() -> None:
    assert heap.trim() is (platform.libc_ver()[0] == "glibc")
