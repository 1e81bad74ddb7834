"""An Alert across a hand-over between replicas (#34): each change is told by the replica whose
push landed it, and the replica that takes the branch over tells nothing of what is already in
Git (real control plane, two operator processes sharing a real Redis, a bare remote and an HTTP
receiver on loopback)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from kubescribe_devenv.redis import RedisServer
from tests.e2e.test_alert_delivery import Answering, answering, changes_of
from tests.e2e.test_alerts import alert
from tests.e2e.test_replicas import members, writer_owners
from tests.manifests import configmap, provider, target, watch_rule
from tests.support import Operator, condition, manifest, stays, wait_for, wait_ready

pytestmark = pytest.mark.controlplane

__all__ = ["answering"]  # the fixture, imported for this module's test


@pytest.fixture
def two_replicas(
    crds: ControlPlane, tmp_path: Path, namespace: str, redis_server: RedisServer
) -> Iterator[dict[str, Operator]]:
    ops = {
        name: Operator(
            crds,
            tmp_path / name,
            f"--replica-id={name}",
            f"--lease-namespace={namespace}",
            f"--redis-url={redis_server.url}",
        ).start()
        for name in ("r1", "r2")
    }
    yield ops
    for op in ops.values():
        op.stop()
    crds.kubectl(
        "delete", "gitproviders,gittargets,watchrules,alerts", "--all", "-n", namespace, check=False
    )


def told(found: Answering) -> list[tuple[str, str]]:
    return sorted((c["what"]["name"], c["what"]["operation"]) for c in changes_of(found.got()))


def test_a_hand_over_tells_each_change_once(
    crds: ControlPlane,
    namespace: str,
    tmp_path: Path,
    two_replicas: dict[str, Operator],
    answering: tuple[Answering, str],
) -> None:
    cp, ns, ops = crds, namespace, two_replicas
    found, url = answering
    remote = BareRemote.create(tmp_path / "remote.git")
    wait_for(lambda: members(cp, ns) == set(ops), timeout=30, what="two members")
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror"),
            watch_rule("rule", ns, "mirror", {"apiGroups": [""], "resources": ["configmaps"]}),
            alert("told", ns, url, selector={"kinds": ["ConfigMap"]}),
        )
    )
    wait_ready(cp, ns)
    wait_for(
        lambda: (condition(cp, "alert", "told", ns, "Ready") or {}).get("status") == "True",
        timeout=30,
        what="the Alert Ready",
    )
    cp.apply(manifest(configmap("before", ns, {"v": "1"})))
    wait_for(lambda: told(found) == [("before", "CREATE")], timeout=60, what="'before' told")
    owner = wait_for(lambda: writer_owners(cp, ns).get("main"), timeout=30, what="main's writer")

    # The writer stops (SIGTERM): its Lease goes to the other replica, which resumes from the
    # shared cursors and finds 'before' already in Git.
    ops[owner].stop()
    (successor,) = set(ops) - {owner}
    wait_for(
        lambda: writer_owners(cp, ns).get("main") == successor,
        timeout=60,
        what="main taken over",
    )
    cp.apply(manifest(configmap("after", ns, {"v": "1"})))
    wait_for(
        lambda: ("after", "CREATE") in told(found), timeout=60, what="'after' told by the successor"
    )
    stays(
        lambda: told(found) == [("after", "CREATE"), ("before", "CREATE")],
        seconds=3,
        what="each change told once",
    )
