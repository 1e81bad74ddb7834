"""Builders of the Kubernetes objects tests apply (kubescribe's own kinds, Secrets, ConfigMaps)
and of the paths the mirror writes them to."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from kubescribe_devenv.httpgit import HttpsGitServer

API = "kubescribe.io/v1alpha1"
PASSWORD = "correct-horse-battery-staple"  # of the `writer` user of the HTTPS Git server
CM_RULE: dict[str, Any] = {"apiGroups": [""], "resources": ["configmaps"]}


def cm_path(namespace: str, name: str, folder: str = "mirror") -> str:
    """Where the mirror writes ConfigMap `namespace/name` (a GitTarget with path `folder`)."""
    return f"{folder}/{namespace}/core/configmaps/{name}.yaml"


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


def secret(
    name: str,
    namespace: str,
    data: Mapping[str, str | bytes],
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """An Opaque Secret with `data` (base64-encoded here)."""
    encoded = {
        key: base64.b64encode(v.encode() if isinstance(v, str) else v).decode()
        for key, v in data.items()
    }
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        metadata["labels"] = dict(labels)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "data": encoded,
    }


def string_secret(name: str, namespace: str, **string_data: str) -> dict[str, Any]:
    """An Opaque Secret with `stringData`: its values stay plain text in the manifest (so a
    test can look for them anywhere the manifest is copied to)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "type": "Opaque",
        "stringData": string_data,
    }


def https_secret(name: str, ns: str, server: HttpsGitServer, user: str, password: str) -> Any:
    return secret(name, ns, {"username": user, "password": password, "ca.crt": server.ca_pem})


def keypair() -> tuple[str, str]:
    """(OpenSSH private key text, public key line) of a new ed25519 key."""
    key = ed25519.Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public.decode()
