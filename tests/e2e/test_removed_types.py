"""A served type that goes away: within the discovery grace nothing changes in Git; past it, the
type's files are swept in one commit (prune Always) or counted as retained (OnEvent)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.e2e.test_mirror_lifecycle import apply_when_served, crd
from tests.support import Operator, manifest, metric, setup_mirror, stays, wait_for, wait_ready

pytestmark = pytest.mark.controlplane

GRACE = 4  # seconds (--discovery-grace)


def gadgets(cp: ControlPlane, ns: str, remote: BareRemote, **target_spec: object) -> list[str]:
    """The CRD `gadgets`, two Gadgets in `ns`, mirrored; their paths in Git."""
    group = f"{ns}.removed.io"
    cp.apply(manifest(crd("gadgets", group)))
    cp.wait_established(f"gadgets.{group}")
    apply_when_served(
        cp,
        manifest(
            *(
                {
                    "apiVersion": f"{group}/v1",
                    "kind": "Gadget",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {"size": 1},
                }
                for name in ("g1", "g2")
            )
        ),
    )
    setup_mirror(cp, ns, remote, {"apiGroups": [group], "resources": ["gadgets"]}, **target_spec)
    paths = [f"mirror/{ns}/{group}/gadgets/{name}.yaml" for name in ("g1", "g2")]
    wait_for(lambda: set(paths) <= set(remote.files()), timeout=60, what="the gadgets' files")
    wait_ready(cp, ns)
    return paths


def serve(cp: ControlPlane, ns: str, served: bool) -> None:
    """Stop or start serving the CRD's only version: the type leaves discovery, its objects
    stay in storage."""
    patch = [{"op": "replace", "path": "/spec/versions/0/served", "value": served}]
    cp.kubectl("patch", "crd", f"gadgets.{ns}.removed.io", "--type=json", "-p", json.dumps(patch))


def retained(cp: ControlPlane, ns: str) -> int:
    status = cp.get_json("gittarget", "mirror", "-n", ns).get("status") or {}
    return int(status.get("retainedDocuments") or 0)


def test_a_type_gone_past_the_grace_has_its_files_swept_in_one_commit_under_prune_always(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator(f"--discovery-grace={GRACE}")
    paths = gadgets(cp, ns, remote, prune={"mode": "Always"})
    before = remote.tip()
    assert before is not None
    # No delete is ever observed (deleting a CRD deletes its objects, and those deletes are
    # mirrored one by one): the type just stops being served, as when an aggregated API goes.
    serve(cp, ns, False)
    wait_for(lambda: not set(paths) & set(remote.files()), timeout=60, what="the files swept")
    log = remote.log()
    new = log[: [c["sha"] for c in log].index(before)]
    assert [c["message"].splitlines()[0] for c in new] == [
        f"Snapshot gadgets in {ns}: 0 added, 0 updated, 2 removed"
    ]
    wait_for(lambda: retained(cp, ns) == 0 and remote.tip() == new[0]["sha"], what="settled")


def test_an_unserved_type_past_the_grace_is_counted_as_retained_under_on_event(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    op = operator(f"--discovery-grace={GRACE}")
    paths = gadgets(cp, ns, remote, prune={"mode": "OnEvent"})
    tip = remote.tip()
    serve(cp, ns, False)
    wait_for(lambda: retained(cp, ns) == 2, timeout=60, what="the type's files retained")
    labels = f'target="{ns}/mirror"'
    assert metric(op, "kubescribe_target_retained_documents", labels) == 2
    assert remote.tip() == tip
    assert set(paths) <= set(remote.files())
    serve(cp, ns, True)  # served again: listed afresh, nothing retained any more
    wait_for(lambda: retained(cp, ns) == 0, timeout=60, what="nothing retained")
    assert remote.tip() == tip


def test_a_type_back_within_the_grace_changes_nothing(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    op = operator(f"--discovery-grace={GRACE}")
    gadgets(cp, ns, remote, prune={"mode": "Always"})
    tip = remote.tip()
    serve(cp, ns, False)
    missing = "kubescribe_discovery_missing_types"
    wait_for(lambda: metric(op, missing) == 1, what="the type missing from discovery")
    serve(cp, ns, True)
    wait_for(lambda: metric(op, missing) == 0, what="the type served again")
    stays(lambda: remote.tip() == tip and retained(cp, ns) == 0, GRACE + 3, "an untouched branch")
