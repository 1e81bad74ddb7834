"""Builders for the kubescribe objects the end-to-end tests apply."""

from __future__ import annotations

from typing import Any

API = "kubescribe.io/v1alpha1"


def provider(name: str, namespace: str, url: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "GitProvider",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"url": url, **spec},
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
