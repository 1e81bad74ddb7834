"""Builders for the kubescribe objects the end-to-end tests apply."""

from __future__ import annotations

import base64
from typing import Any

from kubescribe.devenv.httpgit import HttpsGitServer

API = "kubescribe.io/v1alpha1"
PASSWORD = "correct-horse-battery-staple"  # of the `writer` user of the HTTPS Git server


def provider(name: str, namespace: str, url: str, **spec: Any) -> dict[str, Any]:
    """A GitProvider; without `push` it has no commit window (one commit per change)."""
    return {
        "apiVersion": API,
        "kind": "GitProvider",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"url": url, "push": {"commitWindow": "0s"}, **spec},
    }


def target(
    name: str, namespace: str, provider: str, path: str, branch: str = "main", **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "GitTarget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"providerRef": {"name": provider}, "branch": branch, "path": path, **spec},
    }


def watch_rule(name: str, namespace: str, target: str, *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "WatchRule",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"targetRef": {"name": target}, "rules": list(rules)},
    }


def cluster_watch_rule(
    name: str, target: str, target_namespace: str, *rules: dict[str, Any]
) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ClusterWatchRule",
        "metadata": {"name": name},
        "spec": {
            "targetRef": {"name": target, "namespace": target_namespace},
            "rules": list(rules),
        },
    }


def configmap(name: str, namespace: str, data: dict[str, str], **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def commit_request(
    namespace: str,
    target: str,
    message: str,
    *,
    name: str | None = None,
    generate_name: str | None = None,
    collect_delay: str | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": namespace}
    meta.update({"name": name} if name else {"generateName": generate_name or "save-"})
    spec: dict[str, Any] = {"targetRef": {"name": target}, "message": message}
    if collect_delay:
        spec["collectDelay"] = collect_delay
    return {"apiVersion": API, "kind": "CommitRequest", "metadata": meta, "spec": spec}


def secret(name: str, namespace: str, data: dict[str, str | bytes]) -> dict[str, Any]:
    encoded = {
        key: base64.b64encode(v.encode() if isinstance(v, str) else v).decode()
        for key, v in data.items()
    }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "data": encoded,
    }


def https_secret(name: str, ns: str, server: HttpsGitServer, user: str, password: str) -> Any:
    return secret(name, ns, {"username": user, "password": password, "ca.crt": server.ca_pem})
