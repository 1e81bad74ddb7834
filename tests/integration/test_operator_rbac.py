"""The operator's own ClusterRole, as shipped in deploy/ (rendered from the chart), on a real
kube-apiserver with RBAC: it writes the status of kubescribe objects and nothing of their spec."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubescribe.api.crds import crd_manifests, render_crds
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.manifests import DEPLOY

pytestmark = pytest.mark.controlplane

API = "kubescribe.io/v1alpha1"


def operator_role() -> dict[str, Any]:
    role: dict[str, Any] = next(
        d
        for d in yaml.safe_load_all(DEPLOY.read_text())
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "kubescribe"
    )
    return role


@pytest.fixture
def operator_user(controlplane: ControlPlane) -> Iterator[tuple[ControlPlane, Path]]:
    """The control plane with the CRDs, and a user bound to the operator's ClusterRole only."""
    cp = controlplane
    cp.kubectl("apply", "-f", "-", input=render_crds())
    cp.wait_established(*(f"crd/{crd['metadata']['name']}" for crd in crd_manifests()))
    user = f"operator-{uuid.uuid4().hex[:6]}"
    role = {**operator_role(), "metadata": {"name": user}}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    cp.kubectl("apply", "-f", "-", input="\n---\n".join(json.dumps(d) for d in (role, binding)))
    yield cp, cp.user_kubeconfig(user)
    cp.kubectl("delete", "clusterrolebinding,clusterrole", user, check=False)


KINDS = {
    "GitProvider": {"url": "https://git.example.com/org/repo.git"},
    "GitTarget": {"providerRef": {"name": "x"}, "branch": "main", "path": "mirror"},
    "WatchRule": {
        "targetRef": {"name": "x"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"]}],
    },
}


def test_the_operator_role_patches_status_but_never_spec(
    operator_user: tuple[ControlPlane, Path], namespace: str
) -> None:
    cp, kubeconfig = operator_user

    def as_operator(*args: str, input: str | None = None) -> tuple[int, str]:
        done = cp.kubectl(*args, "-n", namespace, kubeconfig=kubeconfig, input=input, check=False)
        return done.returncode, done.stdout + done.stderr

    for kind, spec in KINDS.items():
        meta = {"name": "x", "namespace": namespace}
        cp.apply(json.dumps({"apiVersion": API, "kind": kind, "metadata": meta, "spec": spec}))
        stored = cp.get_json(kind.lower(), "x", "-n", namespace)["spec"]
        status = json.dumps({"status": {"observedGeneration": 1}})
        code, out = as_operator(
            "patch", kind.lower(), "x", "--subresource=status", "--type=merge", "-p", status
        )
        assert code == 0, out
        code, out = as_operator("get", kind.lower(), "x", "-o", "json")
        assert code == 0, out
        current = json.loads(out)
        assert current["status"]["observedGeneration"] == 1

        labels = {"taken": "over"}
        patch = json.dumps({"metadata": {"labels": labels}})
        code, out = as_operator("patch", kind.lower(), "x", "--type=merge", "-p", patch)
        assert code != 0, (kind, out)
        assert "forbidden" in out.lower(), (kind, out)
        current["metadata"]["labels"] = labels
        code, out = as_operator("replace", "-f", "-", input=json.dumps(current))
        assert code != 0, (kind, out)
        assert "forbidden" in out.lower(), (kind, out)
        kept = cp.get_json(kind.lower(), "x", "-n", namespace)
        assert "labels" not in kept["metadata"]
        assert kept["spec"] == stored
