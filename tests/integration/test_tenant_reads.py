"""SubjectAccessReviews of a tenant ServiceAccount's reads, against a real API server with RBAC:
what a Role grants, what it does not, and a revoked grant once the answers are old enough."""

from __future__ import annotations

import json

import pytest

from kubescribe.controller.plan import ReadQuestion
from kubescribe.controller.tenantreads import TenantReadReviews
from kubescribe.kube.client import KubeClient
from kubescribe_devenv.controlplane import ControlPlane

pytestmark = pytest.mark.controlplane


def grant(cp: ControlPlane, ns: str, *resources: str) -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "reader", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": list(resources), "verbs": ["list", "watch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "reader", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}],
    }
    cp.apply("\n---\n".join(json.dumps(d) for d in (role, binding)))


async def test_answers_follow_the_service_accounts_role_and_expire(
    controlplane: ControlPlane, namespace: str
) -> None:
    cp, ns = controlplane, namespace
    grant(cp, ns, "configmaps")
    cms = ReadQuestion(ns, ns, "", "configmaps")
    services = ReadQuestion(ns, ns, "", "services")
    elsewhere = ReadQuestion(ns, "default", "", "configmaps")
    now = [0.0]
    client = await KubeClient.connect(cp.kubeconfig)
    try:
        reviews = TenantReadReviews(client, "reader", ttl=30, clock=lambda: now[0])
        assert await reviews.refresh({cms, services, elsewhere})
        assert reviews.known().answers == {cms: True, services: False, elsewhere: False}
        assert not await reviews.refresh({cms, services})  # answered; `elsewhere` forgotten
        assert reviews.known().answers == {cms: True, services: False}

        grant(cp, ns, "services")  # ConfigMaps revoked, Services granted
        now[0] = 29.0
        assert not await reviews.refresh({cms, services})
        now[0] = 31.0
        assert await reviews.refresh({cms, services})
        assert reviews.known().answers == {cms: False, services: True}
    finally:
        await client.close()


async def test_an_answer_the_api_server_cannot_refresh_is_kept(
    controlplane: ControlPlane, namespace: str
) -> None:
    cp, ns = controlplane, namespace
    grant(cp, ns, "configmaps")
    cms = ReadQuestion(ns, ns, "", "configmaps")
    now = [0.0]
    admin = await KubeClient.connect(cp.kubeconfig)
    nobody = await KubeClient.connect(cp.user_kubeconfig("nobody"))  # may not create reviews
    try:
        reviews = TenantReadReviews(admin, "reader", clock=lambda: now[0])
        await reviews.refresh({cms})
        reviews.client = nobody
        now[0] = 100.0
        assert not await reviews.refresh({cms})
        assert reviews.known().answers == {cms: True}
        fresh = TenantReadReviews(nobody, "reader")
        assert not await fresh.refresh({cms})
        assert fresh.known().answers == {}  # never answered: the plan refuses it
    finally:
        await admin.close()
        await nobody.close()
