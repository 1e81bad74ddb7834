"""Commit authors without kube-apiserver audit flags (managed clusters): the operator registers
a validating webhook for the watched types and joins what it admits with the watch events.

The control plane here has NO audit webhook. Users act with client certificates of their own.
"""

from __future__ import annotations

import http.server
import json
import os
import ssl
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kubescribe.api.crds import render_crds
from kubescribe_devenv.controlplane import ControlPlane, free_port
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.pki import webhook_certs
from tests.manifests import CM_RULE, provider, target, watch_rule
from tests.support import (
    Operator,
    manifest,
    metric,
    operators,
    wait_condition,
    wait_for,
    wait_webhook_registered,
)

pytestmark = pytest.mark.controlplane

USERS = ("alice", "bob", "carol", "dave")
TRAILER = "Kubescribe-Author-Source"


class _Deny(http.server.BaseHTTPRequestHandler):
    """A second validating webhook: refuses writes annotated `deny: "true"`."""

    def do_POST(self) -> None:
        review = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        req = review["request"]
        annotations = ((req.get("object") or {}).get("metadata") or {}).get("annotations") or {}
        allowed = annotations.get("deny") != "true"
        body = json.dumps(
            {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "response": {"uid": req["uid"], "allowed": allowed},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@dataclass
class Setup:
    cp: ControlPlane
    flags: list[str]
    users: dict[str, Path]


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    pki = webhook_certs(tmp_path_factory.mktemp("admission-certs"))
    certs, ca = pki.dir, pki.ca
    cp = ControlPlane(
        admission_client=pki.client("kubescribe-admission"),
        workdir=tmp_path_factory.mktemp("admission-cp"),
        keep_workdir=True,
    )
    deny = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Deny)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(certs / "tls.crt", certs / "tls.key")
    deny.socket = context.wrap_socket(deny.socket, server_side=True)
    threading.Thread(target=deny.serve_forever, daemon=True).start()
    cp.start()
    try:
        cp.apply(render_crds())
        cp.wait_established()
        cp.register_validating_webhook(
            "deny-annotated",
            f"https://127.0.0.1:{deny.server_address[1]}/",
            ca.cert_pem,
            [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["configmaps"],
                }
            ],
        )
        port = free_port()
        flags = [
            f"--webhook-addr=127.0.0.1:{port}",
            f"--webhook-tls-cert={certs / 'tls.crt'}",
            f"--webhook-tls-key={certs / 'tls.key'}",
            f"--webhook-client-ca={certs / 'client-ca.crt'}",
            f"--changes-webhook-url=https://127.0.0.1:{port}/validate-changes",
            f"--changes-webhook-ca={certs / 'ca.crt'}",
        ]
        users = {user: cp.user_kubeconfig(user) for user in USERS}
        cp.apply(
            json.dumps(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": "users-edit-configmaps"},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "users-edit-configmaps",
                    },
                    "subjects": [
                        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u}
                        for u in USERS
                    ],
                }
            )
        )
        cp.apply(
            json.dumps(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRole",
                    "metadata": {"name": "users-edit-configmaps"},
                    "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}],
                }
            )
        )
        yield Setup(cp, flags, users)
    finally:
        cp.stop()
        deny.shutdown()


@pytest.fixture
def start_operator(setup: Setup, tmp_path: Path) -> Iterator[Callable[..., Operator]]:
    with operators(setup.cp, tmp_path / "operator") as start:
        yield start


def mirror(setup: Setup, remote: BareRemote, **attribution: Any) -> str:
    ns = f"adm-{uuid.uuid4().hex[:6]}"
    setup.cp.kubectl("create", "namespace", ns)
    setup.cp.apply(
        manifest(
            provider(
                "git", ns, remote.url, attribution={"mode": "attributed-author", **attribution}
            ),
            target("mirror", ns, "git", "mirror"),
            watch_rule("rule", ns, "mirror", CM_RULE),
        )
    )
    wait_condition(setup.cp, "gittarget", "mirror", ns, "StreamsRunning", "True", timeout=60)
    return ns


def commits(remote: BareRemote, path: str) -> list[tuple[str, str, str]]:
    """(author, source trailer, content) of each commit touching `path`, oldest first."""
    shas = git("log", "--reverse", "--format=%H", "main", "--", path, cwd=remote.path).split()
    out = []
    for sha in shas:
        author = git("log", "-1", "--format=%an", sha, cwd=remote.path).strip()
        source = git(
            "log", "-1", f"--format=%(trailers:key={TRAILER},valueonly)", sha, cwd=remote.path
        ).strip()
        done = git("ls-tree", sha, path, cwd=remote.path).strip()
        content = git("show", f"{sha}:{path}", cwd=remote.path) if done else ""
        out.append((author, source, content))
    return out


def as_user(setup: Setup, user: str, *args: str, check: bool = True) -> str:
    done = setup.cp.kubectl(*args, kubeconfig=setup.users[user], check=check)
    return done.stdout + done.stderr


def test_create_update_delete_are_authored_by_whoever_made_them(
    setup: Setup, start_operator: Callable[..., Operator], tmp_path: Path
) -> None:
    remote = BareRemote.create(tmp_path / "remote.git")
    start_operator(*setup.flags)
    ns = mirror(setup, remote)
    wait_webhook_registered(setup.cp)
    path = f"mirror/{ns}/core/configmaps/x.yaml"
    as_user(setup, "alice", "create", "configmap", "x", "-n", ns, "--from-literal=v=1")
    wait_for(lambda: len(commits(remote, path)) == 1, timeout=30, what="create")
    as_user(setup, "bob", "patch", "configmap", "x", "-n", ns, "-p", '{"data":{"v":"2"}}')
    wait_for(lambda: len(commits(remote, path)) == 2, timeout=30, what="update")

    # A write admitted by this webhook but refused by another is nobody's commit; the next
    # accepted write to the object is its author's.
    refused = as_user(
        setup,
        "alice",
        "patch", "configmap", "x", "-n", ns,
        "-p", '{"metadata":{"annotations":{"deny":"true"}},"data":{"v":"3"}}',
        check=False,
    )  # fmt: skip
    assert "denied" in refused
    as_user(setup, "dave", "patch", "configmap", "x", "-n", ns, "-p", '{"data":{"v":"3"}}')
    wait_for(lambda: len(commits(remote, path)) == 3, timeout=30, what="dave's update")
    as_user(setup, "carol", "delete", "configmap", "x", "-n", ns)
    wait_for(lambda: len(commits(remote, path)) == 4, timeout=30, what="delete")
    history = commits(remote, path)
    assert [(a, s) for a, s, _ in history] == [
        ("alice", "admission"),
        ("bob", "admission"),
        ("dave", "admission"),
        ("carol", "admission"),
    ]


def test_racing_users_never_get_each_others_change(
    setup: Setup, start_operator: Callable[..., Operator], tmp_path: Path
) -> None:
    remote = BareRemote.create(tmp_path / "remote.git")
    start_operator(*setup.flags)
    ns = mirror(setup, remote)
    path = f"mirror/{ns}/core/configmaps/race.yaml"
    setup.cp.kubectl("create", "configmap", "race", "-n", ns, "--from-literal=v=0")
    wait_for(lambda: len(commits(remote, path)) == 1, timeout=30, what="created")
    for round_ in range(3):

        def write(user: str, value: str) -> None:
            patch = json.dumps({"data": {"v": value}})
            as_user(setup, user, "patch", "configmap", "race", "-n", ns, "-p", patch)

        threads = [
            threading.Thread(target=write, args=(user, f"{user}-{round_}"))
            for user in ("alice", "bob")
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    final = setup.cp.get_json("configmap", "race", "-n", ns)["data"]["v"]
    wait_for(lambda: f"v: {final}" in commits(remote, path)[-1][2], timeout=30, what="last")
    for author, _, content in commits(remote, path)[1:]:
        writer = next(u for u in ("alice", "bob") if f"v: {u}-" in content)
        assert author in (writer, "unknown (attribution unresolved)"), (author, content)


def test_inferred_mode_names_the_field_manager_without_any_webhook(
    setup: Setup, start_operator: Callable[..., Operator], tmp_path: Path
) -> None:
    remote = BareRemote.create(tmp_path / "remote.git")
    start_operator()
    ns = mirror(setup, remote, inferFromManagedFields=True)
    path = f"mirror/{ns}/core/configmaps/edited.yaml"
    setup.cp.kubectl("create", "configmap", "edited", "-n", ns, "--from-literal=v=before")
    wait_for(lambda: len(commits(remote, path)) == 1, timeout=30, what="created")
    created = time.time()
    # managedFields times have second precision: edit in a later second than the create, or the
    # newest entry is ambiguous (then nothing is inferred, honestly).
    wait_for(lambda: int(time.time()) > int(created), timeout=2, what="the next second")
    editor = tmp_path / "editor.sh"
    editor.write_text('#!/bin/sh\nsed -i "s/v: before/v: after/" "$1"\n')
    editor.chmod(0o755)
    env = {**os.environ, "KUBE_EDITOR": str(editor)}
    assert setup.cp.bin_dir is not None
    subprocess.run(
        [str(setup.cp.bin_dir / "kubectl"), f"--kubeconfig={setup.cp.kubeconfig}",
         "edit", "configmap", "edited", "-n", ns],
        env=env, check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    wait_for(lambda: len(commits(remote, path)) == 2, timeout=30, what="edited")
    author, source, _ = commits(remote, path)[1]
    assert author == "kubectl-edit (inferred)"
    assert source == "inferred from managedFields"


NAME_KEY = "kubernetes.io/metadata.name"
REVIEWED = ("recorded", "ignored", "oversized", "failed")


def registered(cp: ControlPlane) -> dict[tuple[str, str], frozenset[str] | str]:
    """(group, resource) -> the namespaces whose writes the change webhook sees ('cluster' for
    a cluster-scoped entry), read back from the API server."""
    found = cp.kubectl("get", "validatingwebhookconfiguration", "kubescribe-attribution",
                       "-o", "json", check=False)  # fmt: skip
    if found.returncode != 0:
        return {}
    out: dict[tuple[str, str], frozenset[str] | str] = {}
    for hook in json.loads(found.stdout)["webhooks"]:
        selector = hook.get("namespaceSelector") or {}
        [expression] = selector.get("matchExpressions") or [{}]
        for rule in hook["rules"]:
            where: frozenset[str] | str
            if rule["scope"] == "Cluster":
                assert not selector
                where = "cluster"
            else:
                assert rule["scope"] == "Namespaced"
                assert (expression["key"], expression["operator"]) == (NAME_KEY, "In")
                where = frozenset(expression["values"])
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    assert (group, resource) not in out, "one entry per type"
                    out[(group, resource)] = where
    return out


def test_the_change_webhook_sees_only_the_watched_namespaces_and_never_leases_or_events(
    setup: Setup, start_operator: Callable[..., Operator], tmp_path: Path
) -> None:
    cp = setup.cp
    remote = BareRemote.create(tmp_path / "remote.git")
    op = start_operator(*setup.flags)
    a, b, elsewhere = (f"{p}-{uuid.uuid4().hex[:6]}" for p in ("wh-a", "wh-b", "wh-c"))
    for ns in (a, b, elsewhere):
        cp.kubectl("create", "namespace", ns)
    noisy = [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"]},
        {"apiGroups": ["", "events.k8s.io"], "resources": ["events"]},
    ]
    services = {"apiGroups": [""], "resources": ["services"]}
    cp.apply(
        manifest(
            provider("git", a, remote.url),
            target("mirror", a, "git", "a"),
            watch_rule("rule", a, "mirror", CM_RULE, *noisy),
            provider("git", b, remote.url),
            target("mirror", b, "git", "b"),
            watch_rule("rule", b, "mirror", CM_RULE, services),
            # Mirrored, but its writes never wait on the webhook.
            provider("git", "kube-system", remote.url),
            target("mirror", "kube-system", "git", "system"),
            watch_rule("rule", "kube-system", "mirror", CM_RULE, services),
        )
    )
    try:
        for ns in (a, b, "kube-system"):
            wait_condition(cp, "gittarget", "mirror", ns, "StreamsRunning", "True", timeout=60)
        cms, svcs = ("", "configmaps"), ("", "services")

        def both_tenants() -> bool:
            found = registered(cp)
            return {a, b} <= set(found.get(cms, ())) and b in found.get(svcs, ())

        wait_for(both_tenants, timeout=30, what="both tenants' namespaces registered")
        found = registered(cp)
        # Other tests' tenants may still be registered here, never these namespaces.
        assert not {elsewhere, "kube-system", "kube-node-lease"} & set(found[cms])
        assert a not in found[svcs]
        assert set(found) == {cms, svcs}
    finally:
        cp.kubectl("delete", "gitproviders,gittargets,watchrules", "--all", "-n", "kube-system")

    def reviewed() -> float:
        return sum(
            metric(op, "kubescribe_admission_reviews_total", f'result="{r}"') for r in REVIEWED
        )

    before = reviewed()
    cp.kubectl("create", "configmap", "unwatched", "-n", elsewhere, "--from-literal=k=v")
    cp.kubectl("create", "configmap", "watched", "-n", a, "--from-literal=k=v")
    assert reviewed() == before + 1
