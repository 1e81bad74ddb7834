"""Adopting real repositories: file names every clone checks out, new branches on the default
branch, existing files edited in place."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from kubescribe.git.targets import PlainRenderer
from kubescribe.mirror.changes import Change, Operation
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe_devenv.gitremote import BareRemote, git
from tests.builders import (
    cursor,
    delete,
    document,
    ident,
    parents,
    path_of,
    read_doc,
    snapshot,
    target,
    upsert,
)
from tests.support import WorkerHarness

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
    remote: BareRemote, make: Callable[..., WorkerHarness], tmp_path: Path
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
    remote: BareRemote, make: Callable[..., WorkerHarness]
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
    remote: BareRemote, make: Callable[..., WorkerHarness]
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


MULTI = """\
# Settings kept by hand: two maps in one file.
apiVersion: v1
kind: ConfigMap
metadata:
  name: a   # the first one
  namespace: ns1
data:
  # size in MiB
  size: "10"
  mode: fast
---
# the second one
apiVersion: v1
kind: ConfigMap
metadata: {name: b, namespace: ns1}
data:
    k: v
"""
YML = """\
kind: ConfigMap
apiVersion: v1
metadata:
  namespace: ns1
  name: c
data: {x: "1"}
"""
FORMATTED = """\
apiVersion: v1
kind: ConfigMap
metadata:
  namespace: ns1
  name: d
data:
  z: "last"
  a: "first"   # keep me
"""


def seed(remote: BareRemote) -> dict[str, str]:
    files = {
        "clusters/dev/team/settings.yaml": MULTI,
        "clusters/dev/team/c.yml": YML,
        "clusters/dev/team/d.yaml": FORMATTED,
    }
    for path, text in files.items():
        remote.commit_foreign(path, text, f"add {path}")
    return files


def live() -> dict[Identity, dict[str, object]]:
    return {
        ident("a"): document("a", size="10", mode="fast"),
        ident("b"): document("b", k="v"),
        ident("c"): document("c", x="1"),
        ident("d"): document("d", z="last", a="first"),
    }


async def test_adopted_files_make_no_commit_and_edits_stay_minimal(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    files = seed(remote)
    tip = remote.tip()
    h = make()
    await h.settle(snapshot(live()))
    assert remote.tip() == tip  # content matches: formatting is not a change
    assert h.last().documents == 4
    assert sorted(remote.files()) == sorted(files)

    await h.settle(upsert("a", op=Operation.UPDATE, size="20", mode="fast"))
    assert remote.read("clusters/dev/team/settings.yaml") == MULTI.replace(
        'size: "10"', 'size: "20"'
    )
    await h.settle(upsert("d", op=Operation.UPDATE, z="changed", a="first"))
    assert remote.read("clusters/dev/team/d.yaml") == FORMATTED.replace('"last"', '"changed"')
    await h.settle(upsert("c", op=Operation.UPDATE, x="2"))
    assert yaml.safe_load(remote.read("clusters/dev/team/c.yml"))["data"] == {"x": "2"}
    assert sorted(remote.files()) == sorted(files)  # nothing written a second time

    await h.settle(delete("b"))
    assert (
        remote.read("clusters/dev/team/settings.yaml")
        == MULTI.replace('size: "10"', 'size: "20"').split("---\n")[0]
    )
    await h.settle(delete("a"))
    await h.settle(delete("c"))
    assert remote.files() == ["clusters/dev/team/d.yaml"]
    assert [c["message"] for c in remote.log()[:3]] == [
        "DELETE ConfigMap ns1/c",
        "DELETE ConfigMap ns1/a",
        "DELETE ConfigMap ns1/b",
    ]


async def test_a_file_the_operator_wrote_and_a_person_reformatted_keeps_their_formatting(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    """The operator re-renders its own files without parsing them; once a person has edited
    one, it is theirs again (the writer's memory of what it rendered does not outlive that)."""
    h = make()
    await h.settle(upsert("a", size="10"))
    await h.settle(upsert("a", op=Operation.UPDATE, size="11"))
    assert read_doc(remote, path_of("a"))["data"] == {"size": "11"}
    kept = remote.read(path_of("a")).replace("size: '11'", "size: '11'  # tuned by hand")
    assert "tuned" in kept
    remote.commit_foreign(path_of("a"), kept, "A comment")
    await h.settle(upsert("a", op=Operation.UPDATE, size="12"))
    assert remote.read(path_of("a")) == kept.replace("'11'", "'12'")


async def test_a_second_document_of_one_identity_is_reported_not_duplicated(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    remote.commit_foreign("clusters/dev/x/1.yaml", YML, "first copy")
    remote.commit_foreign("clusters/dev/x/2.yaml", YML.replace('"1"', '"9"'), "second copy")
    h = make()
    await h.settle(upsert("c", op=Operation.UPDATE, x="2"))
    assert sorted(remote.files()) == ["clusters/dev/x/1.yaml", "clusters/dev/x/2.yaml"]
    assert yaml.safe_load(remote.read("clusters/dev/x/1.yaml"))["data"] == {"x": "2"}
    assert yaml.safe_load(remote.read("clusters/dev/x/2.yaml"))["data"] == {"x": "9"}
    (identity, reason, message), *_ = h.last().failing
    assert (identity, reason) == (ident("c"), "DuplicateIdentity")
    assert "clusters/dev/x/2.yaml" in message


class FakeSops(PlainRenderer):
    """Stands in for SOPS: every document is sensitive; marks its output."""

    def encrypted(self, rtype: ResourceType) -> bool:
        return True

    def render(
        self, identity: Identity, rtype: ResourceType, document: Any, previous: bytes | None
    ) -> bytes:
        return super().render(identity, rtype, document, previous) + b"sops:\n  version: fake\n"


async def test_documents_of_yml_and_multi_document_files_move_to_files_of_their_own_when_encrypted(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    seed(remote)
    h = make(target(renderer=FakeSops()))
    await h.settle(upsert("c", op=Operation.UPDATE, x="1"), upsert("b", op=Operation.UPDATE, k="v"))
    files = set(remote.files())
    assert "clusters/dev/team/c.sops.yaml" in files
    assert "clusters/dev/team/c.yml" not in files
    assert path_of("b").removesuffix(".yaml") + ".sops.yaml" in files
    assert remote.read("clusters/dev/team/settings.yaml") == MULTI.split("---\n", maxsplit=1)[0]
