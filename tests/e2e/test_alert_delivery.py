"""Alert messages end to end, beyond test_alerts (#34): GitOps ownership and the commit link in
the message, a Flux identity's change untold, a burst of 100 in one message, a receiver down
for 30 s, and an operator stopped and started again (real control plane, operator process,
Git remote and an HTTP receiver on loopback)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from kubescribe_devenv.gitremote import BareRemote, git
from tests.e2e.conftest import MASTERS, Audited
from tests.e2e.test_alerts import (
    SENT,
    alert,
    alert_ready,
    create_as,
    deployment,
    last_commit_of,
    receiver_on,
)
from tests.e2e.test_attribution import ATTRIBUTED, audit_flowing
from tests.manifests import provider, target, watch_rule
from tests.support import Operator, condition, manifest, metric, wait_for, wait_ready

pytestmark = pytest.mark.controlplane

FLUX_SA = "system:serviceaccount:flux-system:kustomize-controller"
FLUX_LABELS = {
    "kustomize.toolkit.fluxcd.io/name": "apps",
    "kustomize.toolkit.fluxcd.io/namespace": "flux-system",
}
PAGE = "https://git.example.org/team/mirror/-/commit/{sha}"
RULES = (
    {"apiGroups": ["apps"], "resources": ["deployments"]},
    {"apiGroups": [""], "resources": ["configmaps"]},
)


@dataclass
class Answering:
    """A receiver whose answer can be switched: `status` for every POST (204: up)."""

    status: int = 204
    accepted: list[dict[str, Any]] = field(default_factory=list)
    refused: list[float] = field(default_factory=list)  # when each refused POST came
    _lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        with self._lock:
            if self.status >= 300:
                self.refused.append(time.monotonic())
            else:
                self.accepted.append(json.loads(body))
            return web.Response(status=self.status)

    def got(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.accepted)


@pytest.fixture
def answering() -> Iterator[tuple[Answering, str]]:
    found = Answering()
    with receiver_on(found.handle) as port:
        yield found, f"http://127.0.0.1:{port}/hook"


def mirrored(audited: Audited, ns: str, url: str) -> None:
    audited.cp.apply(
        manifest(
            provider("git", ns, url, attribution=ATTRIBUTED, commitUrlTemplate=PAGE),
            target("mirror", ns, "git", "mirror"),
            watch_rule("rule", ns, "mirror", *RULES),
        )
    )
    wait_ready(audited.cp, ns)


def mirroring(
    audited: Audited, ns: str, remote: BareRemote, start_operator: Callable[..., Operator]
) -> Operator:
    """The operator, started with the audit route, mirroring `ns` with attribution, its audit
    facts flowing."""
    audited.cp.wait_established("alerts.kubescribe.io")
    op = start_operator(*audited.flags())
    mirrored(audited, ns, remote.url)
    audit_flowing(audited, op, ns)
    return op


def flux_deployment(name: str, ns: str) -> dict[str, Any]:
    obj = deployment(name, ns)
    obj["metadata"]["labels"] = dict(FLUX_LABELS)
    return obj


def changes_of(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for m in messages for c in m["changes"]]


def status_of(
    audited: Audited, name: str, ns: str, ctype: str, status: str
) -> dict[str, Any] | None:
    """The Alert's condition `ctype` when its status is `status`."""
    found = condition(audited.cp, "alert", name, ns, ctype)
    return found if found is not None and found.get("status") == status else None


def picked_up(audited: Audited, name: str, ns: str) -> None:
    """Change the Alert and wait until the running operator says it saw that generation."""
    patch = json.dumps({"spec": {"maxMessagesPerHour": 61}})
    audited.cp.kubectl("patch", "alert", name, "-n", ns, "--type", "merge", "-p", patch)

    def seen() -> bool:
        obj = json.loads(audited.cp.kubectl("get", "alert", name, "-n", ns, "-o", "json").stdout)
        status = obj.get("status") or {}
        return bool(status.get("observedGeneration") == obj["metadata"]["generation"])

    wait_for(seen, timeout=30, what=f"the operator's route of Alert {ns}/{name}")


def in_git(remote: BareRemote, path: str, text: str) -> Callable[[], bool]:
    return lambda: path in remote.files() and text in remote.read(path)


def test_flux_is_untold_alice_is_told_with_owner_and_link_and_a_burst_is_one_message(
    audited: Audited,
    ns: str,
    remote: BareRemote,
    answering: tuple[Answering, str],
    start_operator: Callable[..., Operator],
) -> None:
    found, url = answering
    op = mirroring(audited, ns, remote, start_operator)
    outside = {"serviceAccounts": ["flux-system/*"], "fieldManagers": ["kustomize-controller"]}
    audited.cp.apply(
        manifest(
            alert(
                "drift",
                ns,
                f"{url}/drift",
                selector={"kinds": ["Deployment"], "excludeAuthors": outside},
            ),
            alert(
                "burst",
                ns,
                f"{url}/burst",
                selector={"kinds": ["ConfigMap"]},
                groupWindowSeconds=45,
            ),
        )
    )
    alert_ready(audited, "drift", ns)
    alert_ready(audited, "burst", ns)

    # Flux applies the Deployment (its ServiceAccount): in Git, not told.
    create_as(audited, FLUX_SA, flux_deployment("web", ns))
    web = f"mirror/{ns}/apps/deployments/web.yaml"
    wait_for(lambda: web in remote.files(), timeout=60, what="Flux's deployment in Git")
    audited.kubectl_as("alice", "scale", "deployment", "web", "-n", ns, "--replicas=3")
    wait_for(in_git(remote, web, "replicas: 3"), timeout=60, what="alice's scale in Git")
    wait_for(found.got, timeout=30, what="the drift message")

    (message,) = found.got()
    (change,) = message["changes"]
    assert change["who"]["username"] == "alice"
    assert change["what"]["fieldPaths"] == ["spec.replicas"]
    sha = last_commit_of(remote, "main", web)
    assert change["commit"] == sha
    assert change["commitUrl"] == message["commitUrl"] == PAGE.replace("{sha}", sha)
    assert change["managedBy"] == {
        "tool": "Flux",
        "kind": "Kustomization",
        "namespace": "flux-system",
        "name": "apps",
    }
    assert change["drift"] == "changed outside Flux: kustomization flux-system/apps"

    # 100 ConfigMaps by one kubectl: 100 API writes, one grouped message.
    maps = [
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}"}, "data": {}}
        for i in range(100)
    ]
    listed = {"apiVersion": "v1", "kind": "List", "items": maps}
    audited.cp.kubectl(
        "create", "-n", ns, "-f", "-", "--as", "alice", *MASTERS, input=json.dumps(listed)
    )
    wait_for(
        lambda: (
            sum(f.startswith(f"mirror/{ns}/core/configmaps/cm-") for f in remote.files()) == 100
        ),
        timeout=120,
        what="the 100 ConfigMaps in Git",
    )
    wait_for(lambda: len(found.got()) >= 2, timeout=90, what="the burst's message")
    wait_for(lambda: metric(op, *SENT) >= 2, timeout=30, what="both deliveries counted")
    burst = [m for m in found.got() if m["alert"] == f"{ns}/burst"]
    assert len(burst) == 1
    assert burst[0]["count"] == 100
    assert burst[0]["omitted"] == 0
    assert {c["what"]["name"] for c in burst[0]["changes"]} == {f"cm-{i}" for i in range(100)}
    assert [m["alert"] for m in found.got()].count(f"{ns}/drift") == 1


def test_a_receiver_down_for_30s_gets_the_message_once_when_it_returns(
    audited: Audited,
    ns: str,
    remote: BareRemote,
    answering: tuple[Answering, str],
    start_operator: Callable[..., Operator],
) -> None:
    found, url = answering
    mirroring(audited, ns, remote, start_operator)
    retry = {"attempts": 12, "maxBackoffSeconds": 5}
    audited.cp.apply(manifest(alert("down", ns, url, delivery=retry)))
    alert_ready(audited, "down", ns)
    found.status = 503
    create_as(audited, "alice", deployment("web", ns))
    wait_for(lambda: found.refused, timeout=60, what="a first refused delivery")
    failing = wait_for(
        lambda: status_of(audited, "down", ns, "DeliveryFailing", "True"),
        timeout=30,
        what="DeliveryFailing on the Alert",
    )
    assert failing["reason"] == "ReceiverRejected"
    first = found.refused[0]
    wait_for(lambda: time.monotonic() - first >= 30, timeout=40, what="30 s of a receiver down")
    assert found.got() == []
    found.status = 204
    wait_for(found.got, timeout=60, what="the message after the receiver returned")
    # A second change after it: its message comes, and the first is not told again.
    audited.kubectl_as("alice", "scale", "deployment", "web", "-n", ns, "--replicas=2")
    wait_for(lambda: len(found.got()) >= 2, timeout=60, what="the next message")
    told = [(c["what"]["operation"], c["commit"]) for c in changes_of(found.got())]
    assert [op_ for op_, _ in told] == ["CREATE", "UPDATE"]
    assert len(set(told)) == 2
    assert len(found.refused) >= 2  # retried while down
    wait_for(
        lambda: status_of(audited, "down", ns, "DeliveryFailing", "False"),
        timeout=30,
        what="DeliveryFailing back to False",
    )


def test_a_stop_flushes_the_open_window_and_a_restart_tells_nothing_twice(
    audited: Audited,
    ns: str,
    remote: BareRemote,
    answering: tuple[Answering, str],
    start_operator: Callable[..., Operator],
) -> None:
    found, url = answering
    op = mirroring(audited, ns, remote, start_operator)
    # A window of an hour: only the stop can close it.
    audited.cp.apply(manifest(alert("held", ns, url, groupWindowSeconds=3600)))
    alert_ready(audited, "held", ns)
    create_as(audited, "alice", deployment("web", ns))
    web = f"mirror/{ns}/apps/deployments/web.yaml"
    wait_for(lambda: web in remote.files(), timeout=60, what="alice's deployment in Git")
    assert found.got() == []
    op.stop()
    assert op.proc is not None
    assert op.proc.returncode == 0
    (flushed,) = found.got()  # sent before the process ended
    assert [c["what"]["name"] for c in flushed["changes"]] == ["web"]
    created = flushed["changes"][0]["commit"]
    assert created == last_commit_of(remote, "main", web)

    # Started again: the Deployment is listed and replayed, and nothing of it is told again.
    again = start_operator(*audited.flags())
    audit_flowing(audited, again, ns)
    picked_up(audited, "held", ns)
    audited.kubectl_as("alice", "scale", "deployment", "web", "-n", ns, "--replicas=4")
    wait_for(in_git(remote, web, "replicas: 4"), timeout=60, what="the scale in Git")
    again.stop()
    messages = found.got()
    assert len(messages) == 2
    told = changes_of(messages)
    assert [c["commit"] for c in told].count(created) == 1
    assert [c["what"]["operation"] for c in told] == ["CREATE", "UPDATE"]
    assert git("log", "--format=%H", "main", "--", web, cwd=remote.path).split() == [
        told[1]["commit"],
        created,
    ]
