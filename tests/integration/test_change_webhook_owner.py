"""The change webhook's registration against a real API server, with the chart's RBAC: one
ValidatingWebhookConfiguration per install (its name from --changes-webhook-name), owned by
the install's ClusterRole (--owner-cluster-role), and nothing written while that owner cannot
be read. (The garbage collection itself needs kube-controller-manager: tests/cluster.)"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from kubescribe.controller.owner import ClusterRoleOwner
from kubescribe.controller.streams import StreamSpec
from kubescribe.controller.webhooks import ChangeWebhook
from kubescribe.kube.client import KubeClient
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.identity import ResourceType
from kubescribe_devenv.controlplane import ControlPlane

pytestmark = pytest.mark.controlplane

CM = ResourceType("", "v1", "configmaps", "ConfigMap", True)
URL = "https://ops.kubescribe-system.svc:9444/validate-changes"


def chart_role(name: str) -> dict[str, Any]:
    """The rules the chart gives an install for its change webhook (templates/rbac.yaml)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {
                "apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["validatingwebhookconfigurations"],
                "verbs": ["create"],
            },
            {
                "apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["validatingwebhookconfigurations"],
                "resourceNames": [f"{name}-attribution"],
                "verbs": ["get", "update", "delete"],
            },
            {
                "apiGroups": ["rbac.authorization.k8s.io"],
                "resources": ["clusterroles"],
                "resourceNames": [name],
                "verbs": ["get"],
            },
        ],
    }


@pytest.fixture
def installs(controlplane: ControlPlane, namespace: str) -> Iterator[Callable[[str], str]]:
    """Make an install's ClusterRole bound to its user; returns the user. Deleted after."""
    made: list[str] = []

    def make(name: str) -> str:
        made.append(name)
        controlplane.apply(json.dumps(chart_role(name)))
        controlplane.kubectl(
            "create", "clusterrolebinding", name, f"--clusterrole={name}", f"--user={name}"
        )
        return name

    yield make
    for name in made:
        for kind in ("validatingwebhookconfiguration", "clusterrolebinding", "clusterrole"):
            what = f"{name}-attribution" if kind.startswith("validating") else name
            controlplane.kubectl("delete", kind, what, "--ignore-not-found")


@pytest.fixture
async def clients(controlplane: ControlPlane) -> AsyncIterator[Callable[..., Any]]:
    opened: list[KubeClient] = []

    async def connect(user: str) -> KubeClient:
        client = await KubeClient.connect(controlplane.user_kubeconfig(user))
        opened.append(client)
        return client

    yield connect
    for client in opened:
        await client.close()


def stream(namespace: str) -> StreamSpec:
    return StreamSpec(TargetKey(namespace, "t"), CM, namespace, (None,), frozenset(), "")


def configuration(cp: ControlPlane, name: str) -> dict[str, Any] | None:
    done = cp.kubectl("get", "validatingwebhookconfiguration", name, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


async def test_two_installs_register_one_owned_configuration_each(
    controlplane: ControlPlane,
    namespace: str,
    installs: Callable[[str], str],
    clients: Callable[..., Any],
) -> None:
    hooks = []
    for suffix in ("a", "b"):
        user = installs(f"{namespace}-{suffix}")
        client = await clients(user)
        owner = ClusterRoleOwner(client, user)
        hooks.append(ChangeWebhook(client, URL, lambda: b"ca", f"{user}-attribution", owner))
    for hook in hooks:
        await hook.sync([stream(namespace)])
    for hook in hooks:
        assert hook.owner is not None
        found = configuration(controlplane, hook.name)
        assert found is not None, hook.name
        role = controlplane.get_json("clusterrole", hook.owner.name)
        assert found["metadata"]["ownerReferences"] == [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "name": hook.owner.name,
                "uid": role["metadata"]["uid"],
            }
        ]
        [webhook] = found["webhooks"]
        assert webhook["clientConfig"]["service"]["name"] == "ops"

    # a change of the rules is written over the owned configuration, the owner kept
    other = f"{namespace}-other"
    controlplane.kubectl("create", "namespace", other)
    try:
        await hooks[0].sync([stream(namespace), stream(other)])
        found = configuration(controlplane, hooks[0].name)
        assert found is not None
        selector = found["webhooks"][0]["namespaceSelector"]["matchExpressions"][0]
        assert selector["values"] == sorted([namespace, other])
        assert found["metadata"]["ownerReferences"][0]["name"] == f"{namespace}-a"
        # nothing watched: the configuration goes
        await hooks[0].sync([])
        assert configuration(controlplane, hooks[0].name) is None
        assert configuration(controlplane, hooks[1].name) is not None
    finally:
        controlplane.kubectl("delete", "namespace", other, "--wait=false")


async def test_nothing_is_registered_while_the_owner_cannot_be_read(
    controlplane: ControlPlane,
    namespace: str,
    installs: Callable[[str], str],
    clients: Callable[..., Any],
) -> None:
    user = installs(f"{namespace}-gone")
    client = await clients(user)
    hook = ChangeWebhook(
        client, URL, lambda: b"ca", f"{user}-attribution", ClusterRoleOwner(client, "no-such")
    )
    await hook.sync([stream(namespace)])  # 403: the chart grants get of its own role only
    assert configuration(controlplane, hook.name) is None
    hook.owner = ClusterRoleOwner(client, user)
    await hook.sync([stream(namespace)])  # tried again at the next reconcile
    assert configuration(controlplane, hook.name) is not None
