"""Adopting real repositories: file names every clone checks out, new branches on the default
branch, existing files edited in place."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import yaml

from kubescribe.devenv.gitremote import BareRemote, git
from kubescribe.mirror.changes import Change, Operation
from kubescribe.mirror.identity import Identity, ResourceType
from tests.integration.test_git_worker import (
    Harness,
    cursor,
    document,
    make,
    parents,
    path_of,
    read_doc,
    target,
    upsert,
)

__all__ = ["make"]

CLUSTERROLES = ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)


def clusterrole(name: str) -> Change:
    doc = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": [name]}],
    }
    identity = Identity(CLUSTERROLES.group, "ClusterRole", "", name)
    return Change(
        target().key, Operation.CREATE, identity, CLUSTERROLES, doc, time.monotonic(), cursor()
    )


async def test_every_clone_checks_out_long_and_case_colliding_names(
    remote: BareRemote, make: Callable[..., Harness], tmp_path: Path
) -> None:
    h = make()
    long_name = "x" * 253
    await h.settle(upsert(long_name, k="long"), clusterrole("Admin:x"), clusterrole("admin:x"))
    files = remote.files()
    assert len({f.lower() for f in files}) == len(files)  # no case-insensitive collision
    assert all(len(segment.encode()) <= 255 for f in files for segment in f.split("/"))
    assert not any(c in f for f in files for c in ':<>"|?*\\')
    for ignorecase in ("false", "true"):
        clone = tmp_path / f"clone-{ignorecase}"
        git("-c", f"core.ignorecase={ignorecase}", "clone", "-q", remote.url, str(clone))
        assert git("status", "--porcelain", cwd=clone) == ""
    # both round-trip: found again by identity on the next write, edited in place
    await h.settle(upsert(long_name, op=Operation.UPDATE, k="changed"))
    assert remote.files() == files
    held = [read_doc(remote, f) for f in files if "clusterroles" in f]
    assert sorted(d["metadata"]["name"] for d in held) == ["Admin:x", "admin:x"]
    (long_path,) = [f for f in files if "configmaps" in f]
    assert read_doc(remote, long_path)["data"] == {"k": "changed"}


async def test_a_new_branch_starts_from_the_default_branch(
    remote: BareRemote, make: Callable[..., Harness]
) -> None:
    git("symbolic-ref", "HEAD", "refs/heads/main", cwd=remote.path)
    main_tip = remote.tip("main")
    h = make(branch="mirror")
    await h.settle(upsert("a"))
    log = remote.log("mirror")
    assert len(log) == 2
    assert parents(remote, log[0]["sha"]) == [main_tip]
    assert remote.files("mirror") == [path_of("a")]
    assert remote.tip("main") == main_tip  # main untouched


async def test_a_new_branch_starts_from_base_branch(
    remote: BareRemote, make: Callable[..., Harness]
) -> None:
    main_tip = remote.tip("main")
    git("branch", "release", main_tip or "", cwd=remote.path)
    release_tip = remote.commit_foreign("README.md", "notes\n", "Release notes", branch="release")
    h = make(target(base_branch="release"), branch="mirror")
    await h.settle(upsert("a"))
    log = remote.log("mirror")
    assert parents(remote, log[0]["sha"]) == [release_tip]
    assert sorted(remote.files("mirror")) == sorted(["README.md", path_of("a")])
    assert yaml.safe_load(remote.read(path_of("a"), "mirror")) == document("a")
