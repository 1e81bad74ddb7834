"""The object that owns what the operator creates outside its Pods (`--owner-cluster-role`).

The operator creates a cluster-scoped ValidatingWebhookConfiguration (the change webhook) and,
with managed certificates, two Secrets in its namespace. Helm does not know them, so
`helm uninstall` would leave them behind; the webhook configuration would even keep sending
the API server's admission reviews to a Service that is gone. With an owner, each of them
carries an ownerReference to the release's ClusterRole (cluster-scoped, so it may own both
cluster-scoped and namespaced objects): when Helm deletes the ClusterRole, the garbage
collector of kube-controller-manager deletes them. No `blockOwnerDeletion`, so no permission
on the owner beyond `get` is needed.
"""

from __future__ import annotations

from typing import Any

import structlog

from kubescribe.kube.client import ApiError, KubeClient

log = structlog.get_logger(__name__)

CLUSTER_ROLES = "/apis/rbac.authorization.k8s.io/v1/clusterroles"


class OwnerMissing(Exception):
    """The owner could not be read: write nothing that would outlive the release."""


class ClusterRoleOwner:
    def __init__(self, client: KubeClient, name: str) -> None:
        self.client = client
        self.name = name

    async def reference(self) -> dict[str, Any]:
        """The ownerReference to the ClusterRole as it is now (read each time: a ClusterRole
        made again has a new uid). Raises OwnerMissing when it is gone or unreadable."""
        try:
            role: dict[str, Any] = await self.client.get(f"{CLUSTER_ROLES}/{self.name}")
        except ApiError as exc:
            log.warning("owner.unavailable", cluster_role=self.name, status=exc.status,
                        error=exc.message)  # fmt: skip
            raise OwnerMissing(f"ClusterRole {self.name}: {exc.status} {exc.message}") from exc
        return {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "name": self.name,
            "uid": role["metadata"]["uid"],
        }


def with_owner(obj: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
    """`obj` with `reference` as its only ownerReference (None: as it is)."""
    if reference is None:
        return obj
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [reference]}}
