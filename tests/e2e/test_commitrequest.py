"""CommitRequest end to end: a real kube-apiserver, the operator process, a real Git remote."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote, git
from tests.manifests import (
    CM_RULE,
    cm_path,
    commit_request,
    configmap,
    provider,
    target,
    watch_rule,
)
from tests.support import Operator, manifest, wait_for, wait_ready

pytestmark = pytest.mark.controlplane

LONG = {"commitWindow": "10m"}  # only a CommitRequest (or shutdown) closes these windows


def setup(cp: ControlPlane, ns: str, remote: BareRemote, **target_spec: Any) -> None:
    cp.apply(
        manifest(
            provider("git", ns, remote.url, push=LONG),
            target("mirror", ns, "git", "mirror", **target_spec),
            watch_rule("rule", ns, "mirror", CM_RULE),
        )
    )


def create(cp: ControlPlane, obj: dict[str, Any]) -> str:
    """`kubectl create` (generateName works); the new object's name."""
    out = cp.kubectl("create", "-f", "-", "-o", "name", input=json.dumps(obj)).stdout
    return str(out.strip().rsplit("/", 1)[1])


def finished(cp: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    """The request once its Ready condition is True or False."""

    def done() -> dict[str, Any] | None:
        obj = cp.get_json("commitrequest", name, "-n", ns)
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        ready = conds.get("Ready", {})
        return obj if ready.get("status") in ("True", "False") else None

    result: dict[str, Any] = wait_for(done, timeout=60, what=f"CommitRequest {name} to finish")
    return result


def conditions(obj: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in obj["status"]["conditions"]}


def files_of(remote: BareRemote, sha: str) -> set[str]:
    out = git("show", "--name-only", "--format=", sha, cwd=remote.path)
    return {line for line in out.splitlines() if line}


def test_request_closes_the_open_window_with_its_message(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator()
    setup(cp, ns, remote)
    wait_ready(cp, ns)
    tip = remote.tip()
    cp.apply(manifest(*(configmap(f"cfg-{i}", ns, {"i": str(i)}) for i in range(3))))

    name = create(cp, commit_request(ns, "mirror", "Release 1.2", generate_name="release-"))
    obj = finished(cp, ns, name)

    status = obj["status"]
    assert conditions(obj)["Ready"] == ("True", "Pushed"), status
    assert conditions(obj)["Pushed"] == ("True", "Pushed")
    assert conditions(obj)["Stalled"] == ("False", "Ok")
    assert conditions(obj)["AuthorAttributed"] == ("False", "ConfiguredAuthor")
    assert status["sha"] == remote.tip() != tip
    assert (status["branch"], status["changes"]) == ("main", 3)
    assert status["author"] == "kubescribe <kubescribe@users.noreply.local>"
    commit = remote.log()[0]
    assert commit["message"] == "Release 1.2\n\n" + "\n".join(
        f"CREATE ConfigMap {ns}/cfg-{i}" for i in range(3)
    )
    assert files_of(remote, status["sha"]) == {cm_path(ns, f"cfg-{i}") for i in range(3)}
    assert remote.log()[1]["sha"] == tip  # exactly one commit for the three changes
    table = cp.kubectl("get", "commitrequest", name, "-n", ns).stdout
    assert "Pushed" in table
    assert status["sha"] in table


@pytest.mark.parametrize(
    ("position", "collect_delay"),
    [("last", None), ("first", "3s")],
    ids=["request-last", "request-first-with-collect-delay"],
)
def test_request_in_the_same_apply_as_its_changes(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    position: str,
    collect_delay: str | None,
) -> None:
    cp, ns = crds, namespace
    operator()
    setup(cp, ns, remote)
    wait_ready(cp, ns)
    changes = [configmap(f"bundle-{i}", ns, {"i": str(i)}) for i in range(4)]
    request = commit_request(
        ns, "mirror", "Apply the bundle", name="bundle", collect_delay=collect_delay
    )

    cp.apply(manifest(*([request, *changes] if position == "first" else [*changes, request])))
    obj = finished(cp, ns, "bundle")

    assert conditions(obj)["Ready"] == ("True", "Pushed"), obj["status"]
    assert obj["status"]["sha"] == remote.tip()
    assert obj["status"]["changes"] == 4
    assert files_of(remote, obj["status"]["sha"]) == {cm_path(ns, f"bundle-{i}") for i in range(4)}
    assert remote.log()[0]["message"].startswith("Apply the bundle\n\n")


def test_request_with_nothing_pending_reports_nothing_to_commit(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator()
    setup(cp, ns, remote)
    wait_ready(cp, ns)
    tip = remote.tip()

    name = create(cp, commit_request(ns, "mirror", "Nothing to see"))
    obj = finished(cp, ns, name)

    assert conditions(obj)["Ready"] == ("True", "NothingToCommit"), obj["status"]
    assert conditions(obj)["Pushed"] == ("False", "NothingToCommit")
    assert conditions(obj)["Stalled"] == ("False", "Ok")
    assert "sha" not in obj["status"]
    assert remote.tip() == tip


def test_request_on_a_suspended_target_fails_with_suspended(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    operator()
    setup(cp, ns, remote, suspend=True)
    tip = remote.tip()

    name = create(cp, commit_request(ns, "mirror", "Save while suspended"))
    obj = finished(cp, ns, name)

    ready = next(c for c in obj["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Suspended")
    assert "suspended" in ready["message"]
    assert conditions(obj)["Stalled"] == ("True", "Suspended")
    assert "sha" not in obj["status"]
    assert remote.tip() == tip


def test_finished_requests_expire_after_their_ttl(
    crds: ControlPlane, namespace: str, remote: BareRemote, operator: Callable[..., Operator]
) -> None:
    cp, ns = crds, namespace
    op = operator()
    setup(cp, ns, remote)
    wait_ready(cp, ns)
    cp.apply(manifest(configmap("cfg", ns, {"a": "1"})))
    short = commit_request(ns, "mirror", "Short-lived", name="short")
    short["spec"]["ttlAfterFinished"] = "3s"
    kept = commit_request(ns, "mirror", "Kept a day", name="kept")
    create(cp, short)
    done = finished(cp, ns, "short")
    assert conditions(done)["Ready"] == ("True", "Pushed")
    finished_at = datetime.strptime(
        next(c for c in done["status"]["conditions"] if c["type"] == "Ready")["lastTransitionTime"],
        "%Y-%m-%dT%H:%M:%SZ",
    ).replace(tzinfo=UTC)
    expires = datetime.strptime(done["status"]["expiresAt"], "%Y-%m-%dT%H:%M:%SZ")
    assert timedelta(seconds=2) <= expires.replace(tzinfo=UTC) - finished_at <= timedelta(seconds=4)
    create(cp, kept)
    default = finished(cp, ns, "kept")
    expires = datetime.strptime(default["status"]["expiresAt"], "%Y-%m-%dT%H:%M:%SZ")
    assert (
        timedelta(hours=23) < expires.replace(tzinfo=UTC) - datetime.now(UTC) <= timedelta(hours=24)
    )

    def gone() -> bool:
        return cp.kubectl("get", "commitrequest", "short", "-n", ns, check=False).returncode != 0

    wait_for(gone, timeout=60, what="the short-lived request deleted")
    assert cp.get_json("commitrequest", "kept", "-n", ns)["metadata"]["name"] == "kept"
    wait_for(
        lambda: "kubescribe_commit_requests_expired_total 1.0" in op.metrics(),
        timeout=10,
        what="the expiry counted",
    )
