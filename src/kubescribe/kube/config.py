"""Connection settings for the API server: kubeconfig files and the in-cluster service account.

The common cases (client certificates, bearer tokens, token files, in-cluster) are read here;
kubeconfigs that need an exec plugin or an auth provider are handed to kubernetes_asyncio's
loader. Importing kubernetes_asyncio costs 1.3 s and 70 MB (it loads every generated model),
so it is only imported for those, and it is an optional dependency (the extra
`kubeconfig-plugins`; the image does not carry it).
"""

from __future__ import annotations

import base64
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kubescribe.api import conditions as c
from kubescribe.net.addresses import network_policy, refusal
from kubescribe.net.urls import Form, UrlSyntaxError, parse

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class ConfigError(Exception):
    """The kubeconfig or the in-cluster environment cannot be used."""


@dataclass(frozen=True)
class Connection:
    """Where the API server is, how to trust it and how to authenticate."""

    host: str
    ssl: ssl.SSLContext | bool
    token: str | None = None
    token_file: Path | None = None
    untrusted: bool = False  # from a Secret: the address policy applies at every connection

    def authorization(self) -> str | None:
        """The Authorization header; token files are re-read (projected tokens rotate)."""
        if self.token_file is not None:
            return f"Bearer {self.token_file.read_text().strip()}"
        return f"Bearer {self.token}" if self.token else None


def _pem_chain(ctx: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """load_cert_chain only reads files: stage them in a private folder for the call."""
    with tempfile.TemporaryDirectory(prefix="kubescribe-tls-") as tmp:
        cert_path, key_path = Path(tmp, "tls.crt"), Path(tmp, "tls.key")
        cert_path.write_bytes(cert)
        key_path.touch(mode=0o600)
        key_path.write_bytes(key)
        ctx.load_cert_chain(cert_path, key_path)


def _data_or_file(entry: Mapping[str, Any], name: str, base: Path) -> bytes | None:
    data = entry.get(f"{name}-data")
    if data:
        return base64.b64decode(data)
    path = entry.get(name)
    if path:
        return (base / str(path)).read_bytes()
    return None


def _inline(entry: Mapping[str, Any], name: str) -> bytes | None:
    data = entry.get(f"{name}-data")
    return base64.b64decode(data) if data else None


def _named(items: Any, name: str, what: str) -> Mapping[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            return item.get(what) or {}
    raise ConfigError(f"kubeconfig has no {what} named {name!r}")


def from_kubeconfig(path: Path, context: str | None = None) -> Connection | None:
    """The connection of a kubeconfig, or None when it needs an exec plugin/auth provider."""
    doc = yaml.safe_load(path.read_text()) or {}
    base = path.parent
    ctx_name = context or doc.get("current-context")
    if not ctx_name:
        raise ConfigError(f"{path}: no context given and no current-context set")
    ctx = _named(doc.get("contexts"), ctx_name, "context")
    cluster = _named(doc.get("clusters"), ctx["cluster"], "cluster")
    user = _named(doc.get("users"), ctx["user"], "user") if ctx.get("user") else {}
    if "exec" in user or "auth-provider" in user:
        return None
    tls: ssl.SSLContext | bool
    if cluster.get("insecure-skip-tls-verify"):
        tls = False
    else:
        ca = _data_or_file(cluster, "certificate-authority", base)
        tls = ssl.create_default_context(cadata=ca.decode() if ca else None)
        if ca is None:
            tls.load_default_certs()
        cert = _data_or_file(user, "client-certificate", base)
        key = _data_or_file(user, "client-key", base)
        if cert and key:
            _pem_chain(tls, cert, key)
    token_file = user.get("tokenFile")
    return Connection(
        host=str(cluster["server"]).rstrip("/"),
        ssl=tls,
        token=user.get("token"),
        token_file=base / token_file if token_file else None,
    )


class KubeconfigRefused(ConfigError):
    """A kubeconfig from a Secret asks for something the operator never does for one."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class ServerAddressRefused(KubeconfigRefused):
    """The kubeconfig's server is an address the operator may not connect to for a tenant
    (the address policy of Git URLs: metadata, link-local, private with
    --deny-private-networks)."""

    def __init__(self, message: str) -> None:
        super().__init__(c.CLUSTER_ADDRESS_REFUSED, message)


_FILE_KEYS = ("certificate-authority", "client-certificate", "client-key", "tokenFile")
_REFUSED_USER_KEYS = {
    "exec": "exec plugins",
    "auth-provider": "auth-provider plugins",
    "username": "basic authentication",
    "password": "basic authentication",
    "as": "impersonation",
    "as-groups": "impersonation",
    "as-user-extra": "impersonation",
}


def from_untrusted_kubeconfig(
    data: bytes, context: str | None = None, *, allow_insecure: bool = False
) -> Connection:
    """The connection of a kubeconfig read from a Secret, under the rules for untrusted ones:
    no plugins that run programs, no files of the operator's, no proxy, TLS verified (unless
    `allow_insecure`), and the server on https. Raises `KubeconfigRefused` with a reason."""
    try:
        doc = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise KubeconfigRefused(
            "KubeconfigInvalid", f"not YAML: {exc.__class__.__name__}"
        ) from None
    if not isinstance(doc, dict):
        raise KubeconfigRefused("KubeconfigInvalid", "not a kubeconfig document")
    try:
        ctx_name = context or doc.get("current-context")
        if not ctx_name:
            raise ConfigError("no context given and no current-context set")
        ctx = _named(doc.get("contexts"), ctx_name, "context")
        cluster = _named(doc.get("clusters"), ctx["cluster"], "cluster")
        user = _named(doc.get("users"), ctx["user"], "user") if ctx.get("user") else {}
    except (ConfigError, KeyError, TypeError, AttributeError) as exc:
        raise KubeconfigRefused("KubeconfigInvalid", f"incomplete kubeconfig: {exc}") from None
    for key, what in _REFUSED_USER_KEYS.items():
        if key in user:
            raise KubeconfigRefused("KubeconfigRefused", f"{what} ({key!r}) are not allowed")
    for entry, where in ((cluster, "cluster"), (user, "user")):
        for key in (*_FILE_KEYS, "proxy-url"):
            if entry.get(key):
                raise KubeconfigRefused(
                    "KubeconfigRefused",
                    f"{where} {key!r} is not allowed (files and proxies of the operator's)",
                )
    server = str(cluster.get("server") or "")
    insecure = bool(cluster.get("insecure-skip-tls-verify"))
    if (insecure or not server.startswith("https://")) and not allow_insecure:
        raise KubeconfigRefused(
            "InsecureKubeconfig",
            "the server must be https:// with TLS verified (the operator allows otherwise only"
            " with --allow-insecure-cluster-tls)",
        )
    _check_server(server)
    try:
        tls: ssl.SSLContext | bool = False
        if not insecure:
            # File references were refused above: only inline data is read.
            ca = _inline(cluster, "certificate-authority")
            tls = ssl.create_default_context(cadata=ca.decode() if ca else None)
            if ca is None:
                tls.load_default_certs()
            cert = _inline(user, "client-certificate")
            client_key = _inline(user, "client-key")
            if cert and client_key:
                _pem_chain(tls, cert, client_key)
    except (ValueError, TypeError, ssl.SSLError, OSError) as exc:
        raise KubeconfigRefused(
            "KubeconfigInvalid", f"unusable TLS material: {exc.__class__.__name__}"
        ) from None
    token = user.get("token")
    return Connection(
        host=server.rstrip("/"), ssl=tls, token=str(token) if token else None, untrusted=True
    )


def _check_server(server: str) -> None:
    """The server's URL parses, holds no credentials, and its host is one the address policy
    allows (names are checked again, as they resolve, at every connection)."""
    try:
        remote = parse(server)
    except UrlSyntaxError:
        remote = None
    if remote is None or remote.form is not Form.URL or not remote.host:
        raise KubeconfigRefused("KubeconfigInvalid", "the server is not a URL with a host")
    if remote.user is not None or remote.password:
        raise KubeconfigRefused(
            "KubeconfigRefused", "credentials in the server URL are not allowed"
        )
    why = refusal(remote.host, network_policy())
    if why is not None:
        raise ServerAddressRefused(f"the server {remote.host} {why}")


def in_cluster() -> Connection:
    host, port = (
        os.environ.get("KUBERNETES_SERVICE_HOST"),
        os.environ.get("KUBERNETES_SERVICE_PORT"),
    )
    if not host or not port:
        raise ConfigError(
            "not running in a cluster (KUBERNETES_SERVICE_HOST is unset); pass --kubeconfig"
        )
    if ":" in host:
        host = f"[{host}]"
    ctx = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
    return Connection(f"https://{host}:{port}", ctx, token_file=SERVICE_ACCOUNT / "token")


async def via_kubernetes_asyncio(path: Path, context: str | None) -> Connection:
    """Exec plugins and auth providers: let kubernetes_asyncio run them, then use the result."""
    try:
        from kubernetes_asyncio import config as kube_config  # noqa: PLC0415 - 1.3 s import
        from kubernetes_asyncio.client import Configuration  # noqa: PLC0415
    except ImportError as e:
        raise ConfigError(
            f"{path}: this kubeconfig needs an exec plugin or an auth provider, read by "
            "kubernetes_asyncio, which is not installed (install kubescribe[kubeconfig-plugins]; "
            "the image does not carry it: in a Pod the service account is used)"
        ) from e

    cfg = Configuration()
    await kube_config.load_kube_config(
        config_file=str(path), context=context, client_configuration=cfg
    )
    tls: ssl.SSLContext | bool = False
    if cfg.verify_ssl:
        tls = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if cfg.cert_file:
            tls.load_cert_chain(cfg.cert_file, cfg.key_file)
    token = await cfg.get_api_key_with_prefix("authorization")
    return Connection(
        str(cfg.host).rstrip("/"), tls, token=token.removeprefix("Bearer ") if token else None
    )
