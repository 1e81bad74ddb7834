"""Kubeconfigs from Secrets (ClusterProvider) are held to the rules for untrusted input."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from kubescribe.kube.config import (
    KubeconfigRefused,
    ServerAddressRefused,
    from_untrusted_kubeconfig,
)
from kubescribe.net.addresses import NetworkPolicy, set_network_policy
from kubescribe_devenv.pki import CertificateAuthority

CA = CertificateAuthority("remote-ca")
USER = CA.issue("kubescribe", client=True)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None) -> bytes:
    cluster = cluster or {
        "server": "https://remote.example:6443",
        "certificate-authority-data": b64(CA.cert_pem),
    }
    user = (
        user
        if user is not None
        else {
            "client-certificate-data": b64(USER.cert_pem),
            "client-key-data": b64(USER.key_pem),
        }
    )
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    return json.dumps(doc).encode()


async def test_inline_certificates_and_tokens_are_accepted() -> None:
    conn = from_untrusted_kubeconfig(kubeconfig())
    assert conn.host == "https://remote.example:6443"
    assert conn.ssl
    token = from_untrusted_kubeconfig(kubeconfig(user={"token": "abc"}))
    assert await token.authorization() == "Bearer abc"


@pytest.mark.parametrize(
    ("user", "words"),
    [
        ({"exec": {"command": "/bin/sh", "apiVersion": "client.authentication.k8s.io/v1"}}, "exec"),
        ({"auth-provider": {"name": "gcp"}}, "auth-provider"),
        ({"client-certificate": "/etc/kubernetes/pki/admin.crt"}, "client-certificate"),
        ({"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}, "tokenFile"),
        ({"username": "admin", "password": "x"}, "basic"),
        ({"as": "system:admin"}, "impersonation"),
    ],
)
def test_plugins_files_and_impersonation_are_refused(user: dict[str, Any], words: str) -> None:
    with pytest.raises(KubeconfigRefused) as info:
        from_untrusted_kubeconfig(kubeconfig(user=user))
    assert info.value.reason == "KubeconfigRefused"
    assert words in str(info.value)


@pytest.mark.parametrize(
    "cluster",
    [
        {"server": "https://r:6443", "insecure-skip-tls-verify": True},
        {"server": "http://r:8080"},
        {"server": "https://r:6443", "certificate-authority": "/etc/ssl/ca.pem"},
        {"server": "https://r:6443", "proxy-url": "http://proxy:3128"},
    ],
)
def test_insecure_tls_file_references_and_proxies_are_refused(cluster: dict[str, Any]) -> None:
    with pytest.raises(KubeconfigRefused):
        from_untrusted_kubeconfig(kubeconfig(cluster=cluster))


def test_insecure_tls_only_with_the_operator_flag() -> None:
    cluster = {"server": "https://r:6443", "insecure-skip-tls-verify": True}
    conn = from_untrusted_kubeconfig(kubeconfig(cluster=cluster), allow_insecure=True)
    assert conn.ssl is False


@pytest.mark.parametrize("data", [b"", b"- a\n- b\n", b"{", b'{"contexts": 3}'])
def test_garbage_is_invalid_not_a_crash(data: bytes) -> None:
    with pytest.raises(KubeconfigRefused) as info:
        from_untrusted_kubeconfig(data)
    assert info.value.reason == "KubeconfigInvalid"


@pytest.mark.parametrize(
    "server",
    [
        "https://169.254.169.254:6443",
        "https://2852039166",
        "https://[fe80::1]:6443",
        "https://[::ffff:169.254.169.254]",
        "https://metadata.google.internal",
    ],
)
def test_a_metadata_or_link_local_server_is_refused(server: str) -> None:
    cluster = {"server": server, "certificate-authority-data": b64(CA.cert_pem)}
    with pytest.raises(ServerAddressRefused) as info:
        from_untrusted_kubeconfig(kubeconfig(cluster=cluster))
    assert info.value.reason == "ClusterAddressRefused"


@pytest.mark.parametrize(
    "server", ["https://10.0.0.1:6443", "https://kubernetes.default.svc", "https://127.0.0.1"]
)
def test_private_servers_are_refused_only_with_deny_private_networks(server: str) -> None:
    config = kubeconfig(cluster={"server": server, "certificate-authority-data": b64(CA.cert_pem)})
    assert from_untrusted_kubeconfig(config).untrusted
    set_network_policy(NetworkPolicy(deny_private=True))
    try:
        with pytest.raises(ServerAddressRefused, match="--deny-private-networks"):
            from_untrusted_kubeconfig(config)
    finally:
        set_network_policy(NetworkPolicy())


@pytest.mark.parametrize("server", ["https://u:p@remote.example", "https://", "https://[x]/"])
def test_a_server_url_with_credentials_or_without_a_host_is_refused(server: str) -> None:
    with pytest.raises(KubeconfigRefused) as info:
        from_untrusted_kubeconfig(kubeconfig(cluster={"server": server}))
    assert info.value.reason in {"KubeconfigRefused", "KubeconfigInvalid"}
    assert "p@" not in str(info.value)
