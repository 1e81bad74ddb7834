"""A GitTarget's destination is movable: a change of `spec.path` or `spec.branch` moves the mirror
there (every stream listed again into the new folder), `status.observedDestination` says where it
is written, and overlap checks still hold. End to end on a real control plane and remote."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.redis import RedisServer
from tests.manifests import CM_RULE, cm_path, target, watch_rule
from tests.support import (
    Operator,
    manifest,
    setup_mirror,
    wait_condition,
    wait_for,
    wait_ready,
)

pytestmark = pytest.mark.controlplane


def destination(cp: ControlPlane, ns: str, name: str = "mirror") -> dict[str, Any] | None:
    status = cp.get_json("gittarget", name, "-n", ns).get("status") or {}
    found = status.get("observedDestination")
    return dict(found) if isinstance(found, dict) else None


def patch_spec(cp: ControlPlane, ns: str, name: str, **spec: Any) -> None:
    """Patch a GitTarget's spec; the API server must accept it (it refused before: immutable)."""
    cp.kubectl("patch", "gittarget", name, "-n", ns, "--type=merge", "-p",
               json.dumps({"spec": spec}))  # fmt: skip


def changed_paths(remote: BareRemote, sha: str) -> dict[str, str]:
    """path -> status letter (A, D, M) of one commit."""
    out = git("show", "--format=", "--name-status", "--no-renames", sha, cwd=remote.path)
    return {line.split("\t")[1]: line.split("\t")[0] for line in out.splitlines() if line}


def test_a_path_change_moves_the_mirror_in_one_commit_and_removes_the_old_folder(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    for name in ("app", "db"):
        cp.kubectl("create", "configmap", name, "-n", ns, f"--from-literal=name={name}")
    operator()
    setup_mirror(cp, ns, remote)
    wait_for(lambda: cm_path(ns, "db") in remote.files(), what="the snapshot")
    wait_ready(cp, ns)
    wait_for(
        lambda: destination(cp, ns) == {"branch": "main", "path": "mirror"},
        what="observedDestination at the spec",
    )
    before = len(remote.log())

    patch_spec(cp, ns, "mirror", path="moved")
    wait_for(lambda: cm_path(ns, "app", "moved") in remote.files(), what="the moved files")
    files = remote.files()
    assert not [f for f in files if f.startswith("mirror/")]
    assert {cm_path(ns, n, "moved") for n in ("app", "db")} <= set(files)
    log = remote.log()
    assert len(log) == before + 1  # one commit moves it
    assert log[0]["message"].startswith(
        f"Snapshot configmaps in {ns}: 2 added, 0 updated, 2 removed"
    )
    assert changed_paths(remote, log[0]["sha"]) == {
        cm_path(ns, "app"): "D",
        cm_path(ns, "db"): "D",
        cm_path(ns, "app", "moved"): "A",
        cm_path(ns, "db", "moved"): "A",
    }
    assert remote.read(cm_path(ns, "app", "moved")).count("name: app") == 2  # key and name
    wait_for(
        lambda: destination(cp, ns) == {"branch": "main", "path": "moved"},
        what="observedDestination moved",
    )
    wait_ready(cp, ns)
    cp.kubectl("create", "configmap", "late", "-n", ns, "--from-literal=a=1")
    wait_for(lambda: cm_path(ns, "late", "moved") in remote.files(), what="a change after the move")
    assert not [f for f in remote.files() if f.startswith("mirror/")]


def test_under_on_event_the_old_files_stay_and_a_branch_change_writes_only_the_new_branch(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    cp.kubectl("create", "configmap", "app", "-n", ns, "--from-literal=a=1")
    operator()
    setup_mirror(cp, ns, remote, prune={"mode": "OnEvent"})
    wait_for(lambda: cm_path(ns, "app") in remote.files(), what="the snapshot")
    wait_ready(cp, ns)

    patch_spec(cp, ns, "mirror", path="moved")
    wait_for(lambda: cm_path(ns, "app", "moved") in remote.files(), what="the moved file")
    assert cm_path(ns, "app") in remote.files()  # OnEvent: the old file stays
    wait_for(
        lambda: destination(cp, ns) == {"branch": "main", "path": "moved"},
        what="observedDestination moved",
    )
    main_tip = remote.tip()

    # To another branch (it starts from main, which holds `moved/` already) and folder at once.
    patch_spec(cp, ns, "mirror", branch="elsewhere", path="third")
    wait_for(
        lambda: (
            remote.tip("elsewhere") and cm_path(ns, "app", "third") in remote.files("elsewhere")
        ),
        what="the file on the new branch",
    )
    assert remote.log("elsewhere")[0]["message"].startswith(
        f"Snapshot configmaps in {ns}: 1 added, 0 updated, 0 removed"
    )
    wait_for(
        lambda: destination(cp, ns) == {"branch": "elsewhere", "path": "third"},
        what="observedDestination on the new branch",
    )
    cp.kubectl("create", "configmap", "late", "-n", ns, "--from-literal=a=1")
    wait_for(
        lambda: cm_path(ns, "late", "third") in remote.files("elsewhere"),
        what="a change after the move, on the new branch",
    )
    assert remote.tip() == main_tip  # the old branch is left as it was


def test_a_move_into_another_targets_folder_is_refused_and_loses_nothing(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    cp.kubectl("create", "configmap", "app", "-n", ns, "--from-literal=a=1")
    operator()
    setup_mirror(cp, ns, remote)  # `mirror`, the older target
    wait_for(lambda: cm_path(ns, "app") in remote.files(), what="the first target's snapshot")
    wait_ready(cp, ns)
    cp.apply(
        manifest(
            target("other", ns, "git", "taken"),
            watch_rule("other-rule", ns, "other", CM_RULE),
        )
    )
    wait_for(lambda: cm_path(ns, "app", "taken") in remote.files(), what="the other's snapshot")
    wait_ready(cp, ns, "other")
    tip = remote.tip()

    patch_spec(cp, ns, "mirror", path="taken/inner")
    found = wait_condition(cp, "gittarget", "mirror", ns, "Validated", "False", "PathOverlap")
    assert "overlaps GitTarget" in found["message"]
    assert destination(cp, ns) == {"branch": "main", "path": "mirror"}
    wait_ready(cp, ns, "other")  # the folder's owner keeps it, though it is the younger one
    cp.kubectl("create", "configmap", "late", "-n", ns, "--from-literal=a=1")
    wait_for(lambda: cm_path(ns, "late", "taken") in remote.files(), what="the other still writes")
    files = remote.files()
    assert cm_path(ns, "app") in files  # nothing of the refused target is lost
    assert not [f for f in files if f.startswith("taken/inner/")]
    assert remote.log()[0]["message"] == f"CREATE ConfigMap {ns}/late"
    assert remote.tip() != tip


def test_a_move_made_while_the_operator_is_down_is_listed_afresh_not_resumed(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    tmp_path: Path,
    redis_server: RedisServer,
) -> None:
    """Resume cursors outlive the operator (Redis): one saved before the move must not be resumed
    from, or nothing would be written into the new folder."""
    cp, ns = crds, namespace
    flags = (f"--redis-url={redis_server.url}", f"--redis-key-prefix=moves-{uuid.uuid4().hex[:8]}:")
    cp.kubectl("create", "configmap", "app", "-n", ns, "--from-literal=a=1")
    first = Operator(cp, tmp_path / "first", *flags).start()
    try:
        setup_mirror(cp, ns, remote)
        wait_for(lambda: cm_path(ns, "app") in remote.files(), what="the snapshot")
        wait_ready(cp, ns)
        wait_for(
            lambda: destination(cp, ns) == {"branch": "main", "path": "mirror"},
            what="observedDestination",
        )
        cp.kubectl("create", "configmap", "second", "-n", ns, "--from-literal=a=1")
        wait_for(lambda: cm_path(ns, "second") in remote.files(), what="a change: a cursor saved")
    finally:
        first.stop()
    patch_spec(cp, ns, "mirror", path="moved")
    second = Operator(cp, tmp_path / "second", *flags).start()
    try:
        wait_for(
            lambda: {cm_path(ns, n, "moved") for n in ("app", "second")} <= set(remote.files()),
            what="the files in the new folder",
        )
        assert not [f for f in remote.files() if f.startswith("mirror/")]
        wait_for(
            lambda: destination(cp, ns) == {"branch": "main", "path": "moved"},
            what="observedDestination moved",
        )
    finally:
        second.stop()
