"""Audit attribution end to end: a kube-apiserver whose audit webhook posts to the operator's
receiver (client certificate, batch mode), the operator process, a real Git remote."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kubescribe.mirror.authors import UNRESOLVED
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.pki import KeyPair
from kubescribe_devenv.redis import RedisServer
from tests.e2e.conftest import MASTERS, Audited
from tests.manifests import (
    CM_RULE,
    cm_path,
    commit_request,
    configmap,
    provider,
    target,
    watch_rule,
)
from tests.support import (
    Operator,
    manifest,
    metric,
    wait_for,
    wait_ready,
    wait_webhook_registered,
)

pytestmark = pytest.mark.controlplane

ATTRIBUTED = {"mode": "attributed-author"}


def setup(audited: Audited, ns: str, remote: BareRemote, window: str = "0s") -> None:
    audited.cp.apply(
        manifest(
            provider("git", ns, remote.url, push={"commitWindow": window}, attribution=ATTRIBUTED),
            target("mirror", ns, "git", "mirror"),
            watch_rule(
                "rule", ns, "mirror", CM_RULE, {"apiGroups": ["apps"], "resources": ["deployments"]}
            ),
        )
    )
    wait_ready(audited.cp, ns)


def audit_flowing(audited: Audited, op: Operator, ns: str) -> None:
    """Wait until the apiserver delivers audit batches to this operator (a batch backend may
    still be backing off from the time no operator listened)."""
    audited.cp.kubectl("create", "configmap", f"warmup-{uuid.uuid4().hex[:6]}", "-n", "default")
    wait_for(
        lambda: metric(op, "kubescribe_audit_requests_total", 'code="200"') > 0,
        timeout=60,
        what="an audit batch accepted by the operator",
    )


def authored(remote: BareRemote, n: int) -> list[tuple[str, str, set[str]]]:
    """(author, email, files) of the newest `n` commits, oldest first."""
    out = []
    for commit in reversed(remote.log()[:n]):
        names = git("show", "--name-only", "--format=", commit["sha"], cwd=remote.path)
        out.append((commit["author"], commit["author_email"], {f for f in names.splitlines() if f}))
    return out


def test_two_users_in_one_window_become_two_commits_authored_by_each(
    audited: Audited, ns: str, remote: BareRemote, start_operator: Callable[..., Operator]
) -> None:
    op = start_operator(*audited.flags())
    setup(audited, ns, remote, window="4s")
    audit_flowing(audited, op, ns)
    commits = len(remote.log())

    alice_extra = ("example.org/name=Alice Liddell", "example.org/email=alice@example.org")
    for name in ("a1", "a2"):
        audited.kubectl_as(
            "alice", "create", "configmap", name, "-n", ns, "--from-literal=k=v", extra=alice_extra
        )
    for name in ("b1", "b2"):
        audited.kubectl_as("bob", "create", "configmap", name, "-n", ns, "--from-literal=k=v")

    wanted = {cm_path(ns, n) for n in ("a1", "a2", "b1", "b2")}
    wait_for(lambda: wanted <= set(remote.files()), timeout=60, what="all four files")
    wait_for(lambda: len(remote.log()) == commits + 2, timeout=30, what="two commits")
    assert authored(remote, 2) == [
        ("Alice Liddell", "alice@example.org", {cm_path(ns, "a1"), cm_path(ns, "a2")}),
        ("bob", "bob@users.kubescribe.invalid", {cm_path(ns, "b1"), cm_path(ns, "b2")}),
    ]
    assert remote.log()[0]["committer"] == "kubescribe"
    assert metric(op, "kubescribe_attribution_total", 'outcome="exact"') >= 4


def test_service_account_and_scale_authors_with_redis(
    audited: Audited,
    ns: str,
    remote: BareRemote,
    start_operator: Callable[..., Operator],
    redis_server: RedisServer,
) -> None:
    op = start_operator(*audited.flags(), f"--redis-url={redis_server.url}")
    setup(audited, ns, remote)
    audit_flowing(audited, op, ns)

    robot = f"system:serviceaccount:{ns}:deployer"
    audited.kubectl_as(robot, "create", "configmap", "by-robot", "-n", ns, "--from-literal=k=v")
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }
    audited.cp.kubectl("create", "-f", "-", input=json.dumps(deployment))
    web = f"mirror/{ns}/apps/deployments/web.yaml"
    wait_for(lambda: web in remote.files(), timeout=60, what="the deployment file")
    audited.kubectl_as("carol", "scale", "deployment", "web", "-n", ns, "--replicas=3")
    wait_for(lambda: "replicas: 3" in remote.read(web), timeout=60, what="the scaled replicas")

    log = remote.log()
    by_file = {files.pop(): (a, e) for a, e, files in authored(remote, 3)}
    assert by_file[cm_path(ns, "by-robot")] == (
        robot,
        f"deployer@{ns}.serviceaccount.kubescribe.invalid",
    )
    assert by_file[web] == ("carol", "carol@users.kubescribe.invalid")
    assert log[0]["message"].startswith("UPDATE Deployment")
    assert metric(op, "kubescribe_fact_store_errors_total", 'op="add"') == 0


def test_deletecollection_and_finalizer_held_delete_are_authored_by_who_asked(
    audited: Audited, ns: str, remote: BareRemote, start_operator: Callable[..., Operator]
) -> None:
    cp = audited.cp
    op = start_operator(*audited.flags())
    setup(audited, ns, remote)
    audit_flowing(audited, op, ns)
    held = configmap("held", ns, {"k": "v"})
    held["metadata"]["finalizers"] = ["example.org/hold"]
    cp.apply(manifest(*(configmap(f"bulk-{i}", ns, {"i": str(i)}) for i in range(3)), held))
    every = {cm_path(ns, f"bulk-{i}") for i in range(3)} | {cm_path(ns, "held")}
    wait_for(lambda: every <= set(remote.files()), timeout=60, what="the files")

    # A finalizer-held delete: asked by alice, completed when the admin removes the finalizer.
    audited.kubectl_as("alice", "delete", "configmap", "held", "-n", ns, "--wait=false")
    cp.kubectl(
        "patch", "configmap", "held", "-n", ns, "--type=json",
        "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]',
    )  # fmt: skip
    wait_for(lambda: cm_path(ns, "held") not in remote.files(), timeout=60, what="held removed")
    [(author, email, files)] = authored(remote, 1)
    assert (author, email, files) == (
        "alice",
        "alice@users.kubescribe.invalid",
        {cm_path(ns, "held")},
    )

    before = len(remote.log())
    audited.kubectl_as("alice", "delete", "--raw", f"/api/v1/namespaces/{ns}/configmaps")
    wait_for(
        lambda: not any(f.startswith(f"mirror/{ns}/") for f in remote.files()),
        timeout=60,
        what="every file removed",
    )
    removals = authored(remote, len(remote.log()) - before)
    assert removals
    assert {(a, e) for a, e, _ in removals} == {("alice", "alice@users.kubescribe.invalid")}
    assert set().union(*(files for _, _, files in removals)) == every - {cm_path(ns, "held")}
    assert metric(op, "kubescribe_attribution_total", 'outcome="delete"') >= 1
    assert metric(op, "kubescribe_attribution_total", 'outcome="collection"') >= 3


def test_commit_request_by_carol_is_authored_by_carol(
    audited: Audited, ns: str, remote: BareRemote, start_operator: Callable[..., Operator]
) -> None:
    cp = audited.cp
    op = start_operator(*audited.flags())
    setup(audited, ns, remote, window="10m")
    audit_flowing(audited, op, ns)
    tip = remote.tip()
    for i in range(2):
        audited.kubectl_as("carol", "create", "configmap", f"c{i}", "-n", ns, "--from-literal=k=v")
    request = commit_request(ns, "mirror", "Carol's release", name="release")
    cp.kubectl("create", "-f", "-", "--as", "carol", *MASTERS, input=json.dumps(request))

    def pushed() -> dict[str, Any] | None:
        obj = cp.get_json("commitrequest", "release", "-n", ns)
        status = obj.get("status") or {}
        return obj if status.get("sha") else None

    obj = wait_for(pushed, timeout=60, what="the CommitRequest to push")
    assert obj["status"]["sha"] == remote.tip() != tip
    assert obj["status"]["author"] == "carol <carol@users.kubescribe.invalid>"
    [(author, email, files)] = authored(remote, 1)
    assert (author, email) == ("carol", "carol@users.kubescribe.invalid")
    assert files == {cm_path(ns, "c0"), cm_path(ns, "c1")}
    assert remote.log()[0]["message"].startswith("Carol's release")


def test_a_request_names_its_author_only_when_the_requester_may_impersonate_them(
    audited: Audited, ns: str, remote: BareRemote, start_operator: Callable[..., Operator]
) -> None:
    """A CI job ("ci", no admin) applies for dave and names him in spec.author: refused until
    RBAC lets ci impersonate dave, then dave authors the commit of ci's window."""
    cp = audited.cp
    op = start_operator(*audited.flags())
    setup(audited, ns, remote, window="10m")
    audit_flowing(audited, op, ns)
    cp.kubectl("create", "role", "ci", "-n", ns, "--verb=create,get,list,watch",
               "--resource=configmaps,commitrequests.kubescribe.io")  # fmt: skip
    cp.kubectl("create", "rolebinding", "ci", "-n", ns, "--role=ci", "--user=ci")
    as_ci = ("--as", "ci")

    def request(name: str) -> dict[str, Any]:
        body = commit_request(ns, "mirror", "Applied for dave", name=name)
        body["spec"]["author"] = "dave"
        cp.kubectl("create", "-f", "-", *as_ci, input=json.dumps(body))
        return wait_for(lambda: final(cp, ns, name), timeout=60, what=f"request {name} to end")

    cp.kubectl("create", "configmap", "x", "-n", ns, "--from-literal=k=v", *as_ci)
    tip = remote.tip()
    refused = request("refused")
    ready = next(c for c in refused["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "AuthorNotAllowed")
    assert "ci may not impersonate user 'dave'" in ready["message"]
    assert remote.tip() == tip  # nothing committed

    cp.kubectl("create", "clusterrole", f"impersonate-dave-{ns}", "--verb=impersonate",
               "--resource=users", "--resource-name=dave")  # fmt: skip
    cp.kubectl("create", "clusterrolebinding", f"ci-as-dave-{ns}",
               f"--clusterrole=impersonate-dave-{ns}", "--user=ci")  # fmt: skip
    cp.kubectl("create", "configmap", "y", "-n", ns, "--from-literal=k=v", *as_ci)
    pushed = request("allowed")
    assert pushed["status"]["sha"] == remote.tip() != tip
    assert pushed["status"]["author"] == "dave <dave@users.kubescribe.invalid>"
    [(author, email, files)] = authored(remote, 1)
    assert (author, email) == ("dave", "dave@users.kubescribe.invalid")
    assert files == {cm_path(ns, "x"), cm_path(ns, "y")}  # ci's window
    message = git("log", "-1", "--format=%B", cwd=remote.path)
    assert message.startswith("Applied for dave")
    assert "Kubescribe-Author-Source: commit request by ci" in message


def final(cp: Any, ns: str, name: str) -> dict[str, Any] | None:
    obj: dict[str, Any] = cp.get_json("commitrequest", name, "-n", ns)
    ready = [c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == "Ready"]
    return obj if ready and ready[0]["status"] in ("True", "False") else None


def test_with_the_audit_stream_cut_off_commits_land_as_unresolved(
    audited: Audited, ns: str, remote: BareRemote, start_operator: Callable[..., Operator]
) -> None:
    # The apiserver posts to route `local`; this operator only knows `elsewhere`: every batch
    # is refused with 404 and no fact ever arrives.
    op = start_operator(*audited.flags(route="elsewhere", grace="2"))
    setup(audited, ns, remote)
    audited.kubectl_as("alice", "create", "configmap", "lost", "-n", ns, "--from-literal=k=v")
    wait_for(lambda: cm_path(ns, "lost") in remote.files(), timeout=60, what="the file")
    [(author, email, _)] = authored(remote, 1)
    assert (author, email) == (UNRESOLVED.name, UNRESOLVED.email)
    wait_for(
        lambda: metric(op, "kubescribe_audit_requests_total", 'code="404"') > 0,
        timeout=30,
        what="refused audit batches",
    )
    assert metric(op, "kubescribe_attribution_total", 'outcome="unresolved"') >= 1


def _post(
    audited: Audited,
    body: bytes,
    content_type: str = "application/json",
    client: KeyPair | None = None,
    path: str = "",
) -> int:
    ctx = ssl.create_default_context(cadata=audited.ca.cert_pem.decode())
    cert, key = audited.certs / "client.crt", audited.certs / "client.key"
    cert.write_bytes((client or audited.client).cert_pem)
    key.write_bytes((client or audited.client).key_pem)
    ctx.load_cert_chain(cert, key)
    req = urllib.request.Request(
        path or f"https://127.0.0.1:{audited.audit_port}/audit-webhook/local",
        data=body,
        headers={"Content-Type": content_type},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_hostile_audit_input_never_stops_mirroring_or_attribution(
    audited: Audited, ns: str, remote: BareRemote, start_operator: Callable[..., Operator]
) -> None:
    # A cap well above the apiserver's real batches here (a cap below them costs their facts).
    op = start_operator(*audited.flags(), "--audit-max-body=2097152")
    setup(audited, ns, remote)
    audit_flowing(audited, op, ns)
    junk_event = {"stage": "ResponseComplete", "verb": "create", "user": {"username": "x"}}
    assert _post(audited, b"x" * 2_200_000) == 413
    assert _post(audited, b"{not json") == 400
    assert _post(audited, b'{"kind": "Pod"}') == 400
    assert _post(audited, b"{}", content_type="text/plain") == 415
    assert _post(audited, json.dumps({"kind": "EventList", "items": [junk_event]}).encode()) == 200
    # A certificate from the same CA with another name (a kubelet's) posts no facts, and
    # forges no CommitRequest requester.
    kubelet = audited.client_ca.issue("system:node:w", organization="system:nodes", client=True)
    forged = {"stage": "ResponseComplete", "verb": "create", "user": {"username": "mallory"}}
    assert (
        _post(
            audited, json.dumps({"kind": "EventList", "items": [forged]}).encode(), client=kubelet
        )
        == 403
    )
    review = {"kind": "AdmissionReview", "request": {"uid": "x", "userInfo": {"username": "m"}}}
    admission = f"https://127.0.0.1:{audited.webhook_port}/validate-commitrequests"
    assert _post(audited, json.dumps(review).encode(), client=kubelet, path=admission) == 403
    assert op.proc is not None
    assert op.proc.poll() is None

    audited.kubectl_as("alice", "create", "configmap", "after", "-n", ns, "--from-literal=k=v")
    wait_for(lambda: cm_path(ns, "after") in remote.files(), timeout=60, what="the file")
    [(author, _, _)] = authored(remote, 1)
    assert author == "alice"
    assert metric(op, "kubescribe_audit_events_total", 'outcome="skipped_no_object"') >= 1
    refused = 'reason="client_not_allowed",server="audit"'
    assert metric(op, "kubescribe_webhook_refusals_total", refused) == 1


def test_audit_wins_over_admission_and_works_alone_when_the_webhook_is_down(
    audited: Audited,
    ns: str,
    remote: BareRemote,
    start_operator: Callable[..., Operator],
) -> None:
    changes = [
        f"--changes-webhook-url=https://127.0.0.1:{audited.webhook_port}/validate-changes",
        f"--changes-webhook-ca={audited.certs / 'ca.crt'}",
    ]
    (audited.certs / "ca.crt").write_bytes(audited.ca.cert_pem)
    op = start_operator(*audited.flags(), *changes)
    setup(audited, ns, remote)
    audit_flowing(audited, op, ns)
    wait_webhook_registered(audited.cp)
    audited.kubectl_as("alice", "create", "configmap", "both", "-n", ns, "--from-literal=k=v")
    wait_for(lambda: cm_path(ns, "both") in remote.files(), timeout=60, what="mirrored")
    newest = remote.log()[0]
    assert newest["author"] == "alice"
    assert "Kubescribe-Author-Source: audit" in newest["message"]  # exact facts win

    # The webhook is gone (its registration is left behind, failurePolicy Ignore): audit alone.
    op.stop()
    audit_only = [f for f in audited.flags() if not f.startswith("--webhook-")]
    op = start_operator(*audit_only)
    try:
        audit_flowing(audited, op, ns)
        audited.kubectl_as("bob", "create", "configmap", "alone", "-n", ns, "--from-literal=k=v")
        wait_for(lambda: cm_path(ns, "alone") in remote.files(), timeout=60, what="mirrored")
        newest = remote.log()[0]
        assert newest["author"] == "bob"
        assert "Kubescribe-Author-Source: audit" in newest["message"]
    finally:
        audited.cp.kubectl(
            "delete", "validatingwebhookconfiguration", "kubescribe-attribution", check=False
        )
