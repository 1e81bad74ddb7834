"""The change admission webhook's registration, kept in step with what is watched.

With `--changes-webhook-url`, the operator owns one ValidatingWebhookConfiguration whose rules
are the types its streams watch in its own cluster, in the namespaces they watch. It never
denies (`failurePolicy: Ignore`, the handler always allows), has no side effects, and a short
timeout: it only records who wrote what, for attribution on clusters without an audit webhook.

Its name is `--changes-webhook-name` (the chart: `<release fullname>-attribution`, so that two
releases keep one each), and with `--owner-cluster-role` it is owned by the release's
ClusterRole: `helm uninstall` deletes that, and the garbage collector the configuration.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from kubescribe.controller.owner import ClusterRoleOwner, OwnerMissing, with_owner
from kubescribe.controller.ownership import MANAGED_BY
from kubescribe.controller.streams import StreamSpec
from kubescribe.kube.client import ApiError, KubeClient

log = structlog.get_logger(__name__)

NAME = "kubescribe-attribution"  # the default of --changes-webhook-name
PATH = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
TIMEOUT_SECONDS = 2


EXCLUDED_NAMESPACES = frozenset({"kube-system", "kube-node-lease"})
"""Writes here never wait on the webhook, whoever mirrors them: the control plane's own."""
NEVER_REGISTERED = frozenset(
    {("coordination.k8s.io", "leases"), ("", "events"), ("events.k8s.io", "events")}
)
"""Written all the time by every node and controller: a webhook on them would put the operator
in the path of the whole cluster's heartbeat (their authors come from audit, or nowhere)."""
NAME_LABEL = "kubernetes.io/metadata.name"

Gvr = tuple[str, str, str]
_EVERY = "*"  # a stream of a namespaced type in every namespace (a ClusterWatchRule)


def registration(
    url: str, ca_pem: bytes, streams: Iterable[StreamSpec], name: str = NAME
) -> dict[str, Any] | None:
    """The ValidatingWebhookConfiguration `name` for the local streams' types; None when none.

    Each entry selects only the namespaces its types are watched in (types watched in the same
    namespaces share an entry), so one tenant's WatchRule never puts the operator in the path
    of another namespace's writes; cluster-scoped types have an entry of their own.
    """
    namespaced: dict[Gvr, set[str]] = {}
    cluster: set[Gvr] = set()
    for s in streams:
        t = s.rtype
        if s.cluster or (t.group, t.resource) in NEVER_REGISTERED:
            continue
        gvr = (t.group, t.version, t.resource)
        if not t.namespaced:
            cluster.add(gvr)
        elif s.namespace not in EXCLUDED_NAMESPACES:
            namespaced.setdefault(gvr, set()).add(s.namespace or _EVERY)
    by_namespaces: dict[frozenset[str], list[Gvr]] = {}
    for gvr, names in namespaced.items():
        key = frozenset({_EVERY}) if _EVERY in names else frozenset(names)
        by_namespaces.setdefault(key, []).append(gvr)
    webhooks = [
        _webhook(f"namespaces-{i}", url, ca_pem, types, "Namespaced", _selector(names))
        for i, (names, types) in enumerate(
            sorted(by_namespaces.items(), key=lambda e: sorted(e[0]))
        )
    ]
    if cluster:
        webhooks.append(_webhook("cluster", url, ca_pem, cluster, "Cluster", None))
    if not webhooks:
        return None
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": name, "labels": dict(MANAGED_BY)},
        "webhooks": webhooks,
    }


def _selector(names: frozenset[str]) -> dict[str, Any]:
    if _EVERY in names:
        expression = {"operator": "NotIn", "values": sorted(EXCLUDED_NAMESPACES)}
    else:
        expression = {"operator": "In", "values": sorted(names)}
    return {"matchExpressions": [{"key": NAME_LABEL, **expression}]}


def _webhook(
    name: str,
    url: str,
    ca_pem: bytes,
    types: Iterable[Gvr],
    scope: str,
    namespaces: dict[str, Any] | None,
) -> dict[str, Any]:
    rules = [
        {
            "apiGroups": [group],
            "apiVersions": [version],
            "resources": [resource],
            "operations": ["CREATE", "UPDATE", "DELETE"],
            "scope": scope,
        }
        for group, version, resource in sorted(types)
    ]
    return {
        "name": f"{name}.changes.attribution.kubescribe.io",
        "clientConfig": {**client_config(url), "caBundle": base64.b64encode(ca_pem).decode()},
        "rules": rules,
        **({"namespaceSelector": namespaces} if namespaces is not None else {}),
        "failurePolicy": "Ignore",
        "sideEffects": "None",
        "timeoutSeconds": TIMEOUT_SECONDS,
        "admissionReviewVersions": ["v1"],
        "matchPolicy": "Equivalent",
    }


_SERVICE = re.compile(r"^https://([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?::(\d+))?(/.*)?$")


def client_config(url: str) -> dict[str, Any]:
    """`https://<name>.<namespace>.svc[:port]/path` becomes a Service reference (the API server
    reaches Services without cluster DNS); any other URL is used as it is."""
    found = _SERVICE.match(url)
    if found is None:
        return {"url": url}
    name, namespace, port, path = found.groups()
    return {
        "service": {
            "name": name,
            "namespace": namespace,
            "port": int(port or 443),
            "path": path or "/",
        }
    }


class ChangeWebhook:
    """`ca_pem` is asked at each sync: operator-managed certificates change the bundle.

    With an `owner`, the configuration is written only with its ownerReference: while the
    owner cannot be read (the release is being uninstalled), nothing is written."""

    def __init__(
        self,
        client: KubeClient,
        url: str,
        ca_pem: Callable[[], bytes],
        name: str = NAME,
        owner: ClusterRoleOwner | None = None,
    ) -> None:
        self.client = client
        self.url = url
        self.ca_pem = ca_pem
        self.name = name
        self.owner = owner
        self._applied: str | None = None

    async def sync(self, streams: Iterable[StreamSpec]) -> None:
        wanted = registration(self.url, self.ca_pem(), streams, self.name)
        fingerprint = json.dumps(wanted, sort_keys=True)
        if fingerprint == self._applied:
            return
        try:
            current = await self._get()
            if wanted is None:
                if current is not None:
                    await self.client.request("DELETE", f"{PATH}/{self.name}")
            else:
                owned = with_owner(wanted, await self.owner.reference() if self.owner else None)
                if current is None:
                    await self.client.request("POST", PATH, body=owned)
                else:
                    body = {**owned, "metadata": {**owned["metadata"], **_version(current)}}
                    await self.client.request("PUT", f"{PATH}/{self.name}", body=body)
        except OwnerMissing:  # logged; try again next reconcile
            return
        except ApiError as exc:  # 409: written meanwhile; try again next reconcile
            log.warning("webhook.sync_failed", status=exc.status, error=exc.message)
            return
        self._applied = fingerprint
        types = sum(len(w["rules"]) for w in wanted["webhooks"]) if wanted else 0
        log.info("webhook.registered", name=self.name, types=types)

    async def _get(self) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self.client.get(f"{PATH}/{self.name}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return found


def _version(obj: dict[str, Any]) -> dict[str, str]:
    return {"resourceVersion": str(obj["metadata"]["resourceVersion"])}
