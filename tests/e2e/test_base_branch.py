"""The base branch of a write branch that exists: its last-seen commit, when it was seen, and
whether the write branch still descends from it, in the GitTarget's status."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.manifests import CM_RULE, cm_path, provider, target, watch_rule
from tests.support import Operator, manifest, metric, wait_for, wait_ready

pytestmark = pytest.mark.controlplane


def base_branch(cp: ControlPlane, ns: str) -> dict[str, Any]:
    """status.baseBranch without its time (only that it is there)."""
    seen = dict(
        (cp.get_json("gittarget", "mirror", "-n", ns).get("status") or {}).get("baseBranch") or {}
    )
    return seen if seen.pop("observedTime", None) else {}


def mirror(cp: ControlPlane, ns: str, remote: BareRemote, **spec: Any) -> None:
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror", branch="mirror", **spec),
            watch_rule("rule", ns, "mirror", CM_RULE),
        )
    )


def test_the_base_branch_is_observed_when_the_writer_fetches(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    cp.kubectl("create", "configmap", "app", "-n", ns, "--from-literal=level=info")
    op = operator()
    mirror(cp, ns, remote, baseBranch="main")
    wait_for(lambda: cm_path(ns, "app") in remote.files("mirror"), what="the write branch")
    wait_ready(cp, ns)
    main = remote.tip("main")
    expected = {"name": "main", "commit": main, "writeBranchDescends": True}
    wait_for(lambda: base_branch(cp, ns) == expected, what="the base branch observed")

    # Work lands on main that the write branch does not have.
    remote.commit_foreign("README.md", "Merged elsewhere\n", "Work on main", branch="main")
    moved = remote.tip("main")
    assert moved != main
    cp.kubectl("annotate", "gittarget", "mirror", "-n", ns, "kubescribe.io/reconcile-at=1")
    expected = {"name": "main", "commit": moved, "writeBranchDescends": False}
    wait_for(lambda: base_branch(cp, ns) == expected, what="the moved base observed")
    writer = f'writer="{remote.url}#mirror",base="main"'
    assert metric(op, "kubescribe_write_branch_descends_from_base", writer) == 0
    # Writing goes on, on the write branch alone.
    cp.kubectl("create", "configmap", "second", "-n", ns, "--from-literal=b=2")
    wait_for(lambda: cm_path(ns, "second") in remote.files("mirror"), what="a later change")
    assert "README.md" not in remote.files("mirror")


def test_the_default_branch_is_the_base_and_a_missing_base_is_said_so(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    cp.kubectl("create", "configmap", "app", "-n", ns, "--from-literal=level=info")
    operator()
    mirror(cp, ns, remote)  # no baseBranch: the remote's default branch (its HEAD, main)
    wait_for(lambda: cm_path(ns, "app") in remote.files("mirror"), what="the write branch")
    expected = {"name": "main", "commit": remote.tip("main"), "writeBranchDescends": True}
    wait_for(lambda: base_branch(cp, ns) == expected, what="the default branch observed")

    # A base branch the remote does not have: said so, and the target stays Ready.
    cp.kubectl("patch", "gittarget", "mirror", "-n", ns, "--type=merge",
               "-p", '{"spec":{"baseBranch":"no-such-branch"}}')  # fmt: skip
    cp.kubectl("annotate", "gittarget", "mirror", "-n", ns, "kubescribe.io/reconcile-at=1")
    missing = {"name": "no-such-branch", "commit": "", "writeBranchDescends": False}
    wait_for(lambda: base_branch(cp, ns) == missing, what="the missing base")
    wait_ready(cp, ns)
    cp.kubectl("create", "configmap", "second", "-n", ns, "--from-literal=b=2")
    wait_for(lambda: cm_path(ns, "second") in remote.files("mirror"), what="a later change")
