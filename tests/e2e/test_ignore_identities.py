"""`GitTarget.spec.ignore.changesBy` end to end: a kube-apiserver whose audit webhook posts to
the operator, a real user (client certificate) and a real ServiceAccount (a TokenRequest token)
each changing a ConfigMap, and a field manager ignored with no attribution wired at all."""

from __future__ import annotations

import base64
import datetime as dt
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote, git
from tests.e2e.conftest import Audited
from tests.manifests import CM_RULE, cm_path, provider, target, watch_rule
from tests.support import (
    Operator,
    manifest,
    metric,
    wait_condition,
    wait_for,
    wait_ready,
)

pytestmark = pytest.mark.controlplane

IGNORED = "kubescribe_changes_ignored_total"
RBAC = "rbac.authorization.k8s.io"


def grant_configmaps(cp: ControlPlane, ns: str, *subjects: dict[str, str]) -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "edit-configmaps", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "edit-configmaps", "namespace": ns},
        "roleRef": {"apiGroup": RBAC, "kind": "Role", "name": "edit-configmaps"},
        "subjects": list(subjects),
    }
    cp.apply(manifest(role, binding))


def service_account_kubeconfig(cp: ControlPlane, ns: str, name: str, where: Path) -> Path:
    """A kubeconfig that authenticates with a real token of ServiceAccount `ns/name`."""
    cp.kubectl("create", "serviceaccount", name, "-n", ns)
    token = cp.kubectl("create", "token", name, "-n", ns).stdout.strip()
    ca = base64.b64encode(cp.ca.cert_pem).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "c", "cluster": {"server": cp.server, "certificate-authority-data": ca}}
        ],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "sa"}}],
        "current-context": "c",
    }
    path = where / f"kubeconfig-sa-{name}"
    path.write_text(json.dumps(config))
    return path


def history(remote: BareRemote, path: str) -> list[tuple[str, dict[str, str]]]:
    """(author, data) of each commit touching `path`, oldest first ({} once it is deleted)."""
    shas = git("log", "--reverse", "--format=%H", "main", "--", path, cwd=remote.path).split()
    out = []
    for sha in shas:
        author = git("log", "-1", "--format=%an", sha, cwd=remote.path).strip()
        present = git("ls-tree", sha, path, cwd=remote.path).strip()
        doc = yaml.safe_load(git("show", f"{sha}:{path}", cwd=remote.path)) if present else {}
        out.append((author, dict(doc.get("data") or {})))
    return out


def ignored(op: Operator, ns: str, by: str) -> float:
    return metric(op, IGNORED, f'by="{by}",target_namespace="{ns}"')


def live_data(cp: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    return dict(cp.get_json("configmap", name, "-n", ns)["data"])


def test_a_listed_user_and_service_account_make_no_commit_and_others_do(
    audited: Audited, ns: str, tmp_path: Path, start_operator: Callable[..., Operator]
) -> None:
    cp = audited.cp
    remote = BareRemote.create(tmp_path / "remote.git")
    op = start_operator(*audited.flags())
    # Real identities: users with client certificates, a ServiceAccount with a token.
    users = {u: cp.user_kubeconfig(u) for u in ("alice", "ops-bot")}
    deployer = service_account_kubeconfig(cp, ns, "deployer", tmp_path)
    grant_configmaps(
        cp,
        ns,
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "alice"},
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "ops-bot"},
        {"kind": "ServiceAccount", "name": "deployer", "namespace": ns},
    )
    ignore = {"changesBy": {"users": ["ops-bot"], "serviceAccounts": [f"{ns}/deployer"]}}
    cp.apply(
        manifest(
            provider("git", ns, remote.url, attribution={"mode": "attributed-author"}),
            target("mirror", ns, "git", "mirror", ignore=ignore),
            watch_rule("rule", ns, "mirror", CM_RULE),
        )
    )
    wait_ready(cp, ns, timeout=60)
    wait_condition(cp, "gittarget", "mirror", ns, "AuthorsAttributed", "True")
    # A batch backend may still back off from the time no operator listened.
    cp.kubectl("create", "configmap", f"warmup-{ns}", "-n", "default")
    wait_for(
        lambda: metric(op, "kubescribe_audit_requests_total", 'code="200"') > 0,
        timeout=60,
        what="an audit batch accepted by the operator",
    )
    path = cm_path(ns, "app")

    def patch(kubeconfig: Path, data: dict[str, str]) -> None:
        body = json.dumps({"data": data})
        cp.kubectl("patch", "configmap", "app", "-n", ns, "-p", body, kubeconfig=kubeconfig)

    cp.kubectl(
        "create", "configmap", "app", "-n", ns, "--from-literal=v=0", kubeconfig=users["alice"]
    )
    wait_for(lambda: len(history(remote, path)) == 1, timeout=60, what="alice's create")

    patch(deployer, {"v": "1"})  # the GitOps tool's own write
    wait_for(lambda: ignored(op, ns, "serviceaccount") == 1, timeout=60, what="SA change dropped")
    patch(users["alice"], {"v": "2"})  # out of band
    wait_for(lambda: len(history(remote, path)) == 2, timeout=60, what="alice's update")
    patch(users["ops-bot"], {"v": "3", "w": "ops"})
    wait_for(lambda: ignored(op, ns, "user") == 1, timeout=60, what="ops-bot's change dropped")
    # Git keeps what alice wrote; her next change records the object in full, ops-bot's too.
    assert history(remote, path)[-1][1] == {"v": "2"}
    patch(users["alice"], {"x": "alice"})
    wait_for(lambda: len(history(remote, path)) == 3, timeout=60, what="alice's second update")

    assert history(remote, path) == [
        ("alice", {"v": "0"}),
        ("alice", {"v": "2"}),
        ("alice", {"v": "3", "w": "ops", "x": "alice"}),
    ]
    assert history(remote, path)[-1][1] == live_data(cp, ns, "app")
    assert ignored(op, ns, "serviceaccount") == 1
    assert ignored(op, ns, "user") == 1

    # A delete by the ignored ServiceAccount leaves the file; nothing else is committed.
    commits = len(remote.log())
    cp.kubectl("delete", "configmap", "app", "-n", ns, kubeconfig=deployer)
    wait_for(lambda: ignored(op, ns, "serviceaccount") == 2, timeout=60, what="SA delete dropped")
    assert path in remote.files()
    assert len(remote.log()) == commits


def newest_entry_second(cp: ControlPlane, ns: str, name: str) -> float:
    obj = cp.get_json("configmap", name, "-n", ns, "--show-managed-fields")
    entries = obj["metadata"]["managedFields"]
    return max(dt.datetime.fromisoformat(e["time"]).timestamp() for e in entries)


def test_a_listed_field_manager_is_dropped_without_attribution(
    audited: Audited, ns: str, tmp_path: Path, start_operator: Callable[..., Operator]
) -> None:
    cp = audited.cp
    remote = BareRemote.create(tmp_path / "remote.git")
    op = start_operator()  # no audit receiver, no webhook: no author is ever known
    ignore = {"changesBy": {"fieldManagers": ["gitops-controller"], "users": ["ops-bot"]}}
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror", ignore=ignore),
            watch_rule("rule", ns, "mirror", CM_RULE),
        )
    )
    wait_ready(cp, ns, timeout=60)
    # Users cannot be matched without attribution: said in status, and such changes recorded.
    wait_condition(
        cp, "gittarget", "mirror", ns, "AuthorsAttributed", "False", "NoAttributionSource"
    )
    path = cm_path(ns, "app")

    def apply(data: dict[str, str]) -> None:
        doc = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "app", "namespace": ns},
            "data": data,
        }
        cp.kubectl(
            "apply",
            "--server-side",
            "--field-manager=gitops-controller",
            "-f",
            "-",
            input=json.dumps(doc),
        )

    apply({"v": "1"})  # created by the GitOps tool: no file
    wait_for(lambda: ignored(op, ns, "fieldmanager") == 1, timeout=60, what="create dropped")
    assert path not in remote.files()

    cp.kubectl("patch", "configmap", "app", "-n", ns, "-p", '{"data":{"hotfix":"yes"}}')
    wait_for(lambda: len(history(remote, path)) == 1, timeout=60, what="the out-of-band patch")
    assert history(remote, path)[-1][1] == {"v": "1", "hotfix": "yes"}
    unattributed = metric(op, "kubescribe_ignore_unattributed_total", f'target_namespace="{ns}"')
    assert unattributed >= 1

    # managedFields times have second precision: a change in the same second as another
    # manager's is nobody's (recorded). Let the patch's second pass, then the tool applies.
    patched = newest_entry_second(cp, ns, "app")
    wait_for(lambda: time.time() >= patched + 1.0, timeout=5, what="the next second")
    apply({"v": "2"})
    wait_for(lambda: ignored(op, ns, "fieldmanager") == 2, timeout=60, what="update dropped")
    assert history(remote, path)[-1][1] == {"v": "1", "hotfix": "yes"}
    assert len(history(remote, path)) == 1
