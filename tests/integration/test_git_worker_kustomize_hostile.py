"""Hostile repositories against the kustomize write-through and render check: a real bare
remote serves the crafted trees and kustomizations, a real branch worker and the real
`kustomize` binary read them. What a repository writer gets must stay in its own target."""

from __future__ import annotations

import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pygit2
import pytest
from pygit2.enums import ObjectType

from kubescribe.api.conditions import KUSTOMIZE_UNSUPPORTED
from kubescribe.git import sandbox
from kubescribe.git.targets import KustomizeConfig, TargetConfig
from kubescribe.mirror.changes import Change, Operation, PruneMode, TargetKey
from kubescribe.mirror.identity import Identity
from kubescribe_devenv.gitremote import BareRemote
from tests.builders import CONFIGMAPS, TARGET, cursor, target
from tests.support import WorkerHarness

FOLDER = "apps"
NS = "prod"


def change(name: str, key: TargetKey = TARGET, **data: str) -> Change:
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "data": data,
    }
    identity = Identity("", "ConfigMap", NS, name)
    return Change(key, Operation.CREATE, identity, CONFIGMAPS, doc, time.monotonic(), cursor())


def checked(kbin: Path, folder: str = FOLDER, key: TargetKey = TARGET) -> TargetConfig:
    return target(
        PruneMode.ALWAYS,
        key=key,
        folder=folder,
        kustomize=KustomizeConfig(render_check=str(kbin)),
    )


def plant_entries(remote: BareRemote, folder: str, names: list[bytes]) -> None:
    """Commit on the remote's branch a tree whose `folder` also holds files under `names`
    (written as raw tree bytes: git and libgit2 refuse to make such entries, a server that
    does not fsck takes them on push and serves them)."""
    repo = pygit2.Repository(str(remote.path))
    tip = repo.revparse_single(f"refs/heads/{remote.branch}")
    assert isinstance(tip, pygit2.Commit)
    top = tip.tree
    sub = top[folder]
    blob = repo.create_blob(b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: planted}\n")
    entries = [
        (b"40000" if e.filemode == 0o40000 else oct(e.filemode)[2:].encode(), e.raw_name, e.id)
        for e in repo[sub.id]
    ]
    entries += [(b"100644", name, blob) for name in names]
    entries.sort(key=lambda e: e[1] + (b"/" if e[0] == b"40000" else b""))  # Git's order
    raw = b"".join(m + b" " + n + b"\0" + oid.raw for m, n, oid in entries)
    folder_id = repo.odb.write(ObjectType.TREE, raw)
    builder = repo.TreeBuilder(top)
    builder.insert(folder, folder_id, pygit2.enums.FileMode.TREE)
    signature = pygit2.Signature("someone", "someone@example.invalid")
    repo.create_commit(
        f"refs/heads/{remote.branch}",
        signature,
        signature,
        "hostile names",
        builder.write(),
        [tip.id],
    )


async def test_tree_entry_names_never_leave_the_scratch_folder(
    remote: BareRemote,
    make: Callable[..., WorkerHarness],
    kbin: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    remote.commit_foreign(f"{FOLDER}/kustomization.yaml", "resources: []\n", "kustomization")
    planted = tmp_path / "home" / ".gitconfig"
    planted.parent.mkdir()
    plant_entries(remote, FOLDER, [b"../escaped.yaml", str(planted).encode()])

    h = make(checked(kbin))
    await h.settle(change("a", k="1"))

    # Nowhere outside a scratch folder: not beside it, not at an absolute name.
    assert not planted.exists()
    assert not (temp / "escaped.yaml").exists()
    assert not (sandbox.private_dir() / "escaped.yaml").exists()
    assert not list(sandbox.private_dir().glob("render-*"))  # scratch folders are removed
    (identity, reason, message), *_ = h.last().failing
    assert (identity.name, reason) == ("a", KUSTOMIZE_UNSUPPORTED)
    assert message == "render check not run: a tree entry name is not a plain file name"
    assert "a.yaml" in remote.read(f"{FOLDER}/kustomization.yaml")  # the write went through


async def test_a_remote_resource_is_neither_fetched_nor_echoed(
    remote: BareRemote, make: Callable[..., WorkerHarness], kbin: Path
) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        port = server.getsockname()[1]
        # The base names a remote file: kustomize would fetch it from the operator's Pod
        # and put the answer (or "connection refused") into status.
        remote.commit_foreign(
            f"{FOLDER}/base/kustomization.yaml",
            f"resources:\n- http://127.0.0.1:{port}/secret.yaml\n",
            "remote base",
        )
        remote.commit_foreign(f"{FOLDER}/kustomization.yaml", "resources: [base]\n", "root")
        h = make(checked(kbin))
        await h.settle(change("a", k="1"))
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody called
    (identity, reason, message), *_ = h.last().failing
    assert (identity.name, reason) == ("a", KUSTOMIZE_UNSUPPORTED)
    assert message == "render check not run: base/kustomization.yaml names a remote resource"


async def test_a_failed_build_puts_a_fixed_message_in_status(
    remote: BareRemote, make: Callable[..., WorkerHarness], kbin: Path
) -> None:
    remote.commit_foreign(f"{FOLDER}/kustomization.yaml", "resources: [missing]\n", "broken")
    h = make(checked(kbin))
    await h.settle(change("a", k="1"))
    failing = [f for f in h.last().failing if f[0].name == "a"]
    assert [m for _, _, m in failing] == [
        "kustomize build failed (its error is in the operator log)"
    ]


async def test_a_deep_kustomization_stops_only_its_own_target(
    remote: BareRemote, make: Callable[..., WorkerHarness], kbin: Path
) -> None:
    deep = "resources: " + "[" * 5000 + "]" * 5000 + "\n"
    remote.commit_foreign("hostile/kustomization.yaml", deep, "deep")
    other = TargetKey("team", "other")
    h = make(
        checked(kbin, "hostile"),
        target(PruneMode.ALWAYS, key=other, folder="plain"),
    )
    await h.settle(change("a", k="1"), change("b", other, k="2"))
    assert "plain/prod/core/configmaps/b.yaml" in remote.files()  # the batch went through
    (identity, reason, message), *_ = h.last().failing
    assert (identity.name, reason) == ("a", KUSTOMIZE_UNSUPPORTED)
    assert message.startswith("kustomization not readable: hostile/kustomization.yaml")


async def test_write_back_never_edits_another_targets_folder(
    remote: BareRemote, make: Callable[..., WorkerHarness]
) -> None:
    # Target b's kustomization lists target a's folder: the image it sets would be
    # written back into a's kustomization.
    remote.commit_foreign("a/kustomization.yaml", "resources: [web.yaml]\n", "a")
    remote.commit_foreign(
        "a/web.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  k: '1'\n",
        "a's file",
    )
    remote.commit_foreign("b/kustomization.yaml", "resources: [../a]\n", "b")
    a_before = {p: remote.read(p) for p in remote.files() if p.startswith("a/")}
    h = make(target(PruneMode.ALWAYS, folder="b", kustomize=KustomizeConfig()))
    await h.settle(change("web", k="2"))
    assert {p: remote.read(p) for p in remote.files() if p.startswith("a/")} == a_before
    (identity, reason, message), *_ = h.last().failing
    assert (identity.name, reason) == ("web", KUSTOMIZE_UNSUPPORTED)
    assert "outside the target folder" in message
