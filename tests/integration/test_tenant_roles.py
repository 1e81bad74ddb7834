"""The chart's aggregated ClusterRoles, as shipped in deploy/, on a real kube-apiserver: the
built-in edit, admin and view roles select them, and what they grant is what a tenant needs."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubescribe.api.crds import crd_manifests, render_crds
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.manifests import DEPLOY
from tests.integration.test_operator_rbac import API, KINDS

pytestmark = pytest.mark.controlplane


def shipped_role(name: str) -> dict[str, Any]:
    role: dict[str, Any] = next(
        d
        for d in yaml.safe_load_all(DEPLOY.read_text())
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == name
    )
    return role


def selects(builtin: dict[str, Any], labels: dict[str, str]) -> bool:
    return any(
        all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())
        for selector in builtin["aggregationRule"]["clusterRoleSelectors"]
    )


def test_the_builtin_roles_aggregate_the_charts_edit_and_view_roles(
    controlplane: ControlPlane,
) -> None:
    edit = shipped_role("kubescribe-edit")["metadata"]["labels"]
    view = shipped_role("kubescribe-view")["metadata"]["labels"]
    for builtin, picked, left in (
        ("admin", edit, None),
        ("edit", edit, None),
        ("view", view, edit),
    ):
        role = controlplane.get_json("clusterrole", builtin)
        assert selects(role, picked), builtin
        if left is not None:  # view never gains the write verbs
            assert not selects(role, left), builtin


def as_tenant(cp: ControlPlane, role: str, namespace: str) -> Path:
    """A user bound to the shipped ClusterRole `role` in `namespace` only."""
    user = f"tenant-{uuid.uuid4().hex[:6]}"
    cp.apply(json.dumps({**shipped_role(role), "metadata": {"name": role}}))
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": user, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    cp.apply(json.dumps(binding))
    return cp.user_kubeconfig(user)


def test_an_editor_manages_kubescribe_objects_in_the_namespace_and_a_viewer_reads_them(
    controlplane: ControlPlane, namespace: str
) -> None:
    cp = controlplane
    cp.kubectl("apply", "-f", "-", input=render_crds())
    cp.wait_established(*(f"crd/{crd['metadata']['name']}" for crd in crd_manifests()))
    editor = as_tenant(cp, "kubescribe-edit", namespace)
    viewer = as_tenant(cp, "kubescribe-view", namespace)
    elsewhere = f"{namespace[:50]}-other"
    cp.kubectl("create", "namespace", elsewhere)

    def run(kubeconfig: Path, *args: str, ns: str = namespace, body: Any = None) -> str | None:
        """Output on success, None when the API server forbids it."""
        done = cp.kubectl(
            *args, "-n", ns, kubeconfig=kubeconfig, check=False,
            input=None if body is None else json.dumps(body),
        )  # fmt: skip
        if done.returncode != 0:
            assert "forbidden" in done.stderr.lower(), done.stderr
            return None
        return done.stdout

    for kind, spec in KINDS.items():
        obj = {"apiVersion": API, "kind": kind, "metadata": {"name": "x"}, "spec": spec}
        assert run(viewer, "create", "-f", "-", body=obj) is None
        assert run(editor, "create", "-f", "-", ns=elsewhere, body=obj) is None
        assert run(editor, "apply", "-f", "-", body=obj) is not None  # create, then patch
        assert run(
            editor, "apply", "-f", "-", body=obj | {"metadata": {"name": "x", "labels": {"a": "b"}}}
        )
        listed = run(viewer, "get", kind.lower(), "-o", "name")
        assert (listed or "").strip() == f"{kind.lower()}.kubescribe.io/x"
        status = json.dumps({"status": {"observedGeneration": 7}})
        patch = ("patch", kind.lower(), "x", "--subresource=status", "--type=merge", "-p", status)
        assert run(editor, *patch) is None  # status is the operator's
        assert run(viewer, "delete", kind.lower(), "x") is None
        assert run(editor, "delete", kind.lower(), "x") is not None
