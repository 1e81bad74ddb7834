"""Connection settings for the API server: kubeconfig files and the in-cluster service account.

Which kubeconfig is read follows kubectl: `--kubeconfig` alone when given; else every file of
`$KUBECONFIG` (a `:`-separated list; missing files are skipped), merged so that the first file
to set a value wins (the first `current-context`, the first cluster, user or context of a name,
whole); else `~/.kube/config`; and when that gives nothing, the in-cluster service account.
Relative paths in a file are relative to that file's folder.

Tokens, token files and exec plugins are handled here (`kubescribe.kube.credentials` keeps
them fresh); kubeconfigs that need an auth provider are handed to kubernetes_asyncio's loader.
Importing kubernetes_asyncio costs 1.3 s and 70 MB (it loads every generated model), so it is
only imported for those, and it is an optional dependency (the extra `kubeconfig-plugins`; the
image does not carry it: in a Pod the service account is used).
"""

from __future__ import annotations

import base64
import binascii
import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kubescribe.api import conditions as c
from kubescribe.kube.credentials import (
    CredentialError,
    Credentials,
    ExecPlugin,
    StaticToken,
    TokenFile,
    load_pem_chain,
)
from kubescribe.net.addresses import network_policy, refusal
from kubescribe.net.urls import Form, UrlSyntaxError, parse

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
KUBECONFIG_ENV = "KUBECONFIG"


class ConfigError(Exception):
    """The kubeconfig or the in-cluster environment cannot be used."""


@dataclass(frozen=True)
class Connection:
    """Where the API server is, how to trust it and how to authenticate."""

    host: str
    ssl: ssl.SSLContext | bool
    credentials: Credentials | None = None
    untrusted: bool = False  # from a Secret: the address policy applies at every connection
    auth_provider: bool = False  # the kubeconfig names an auth provider (see `connect`)

    async def authorization(self) -> str | None:
        """The Authorization header (token files re-read, exec plugins run when due)."""
        if self.credentials is None:
            return None
        try:
            return await self.credentials.header()
        except CredentialError as exc:
            raise ConfigError(str(exc)) from None

    def rejected(self, header: str | None) -> bool:
        """The API server answered 401 to `header`: whether asking again may help."""
        return self.credentials is not None and self.credentials.rejected(header)


def _decode(entry: Mapping[str, Any], key: str, where: str) -> bytes:
    try:
        return base64.b64decode(str(entry[key]), validate=True)
    except (binascii.Error, ValueError):
        raise ConfigError(f"{where}: {key} is not base64; fix it in the kubeconfig") from None


def _data_or_file(entry: Mapping[str, Any], name: str, base: Path, where: str) -> bytes | None:
    if entry.get(f"{name}-data"):
        return _decode(entry, f"{name}-data", where)
    path = entry.get(name)
    if path:
        file = base / os.path.expanduser(str(path))
        try:
            return file.read_bytes()
        except OSError as exc:
            raise ConfigError(
                f"{where}: {name} {file}: {exc.strerror}; fix the path in the kubeconfig"
            ) from None
    return None


def _inline(entry: Mapping[str, Any], name: str) -> bytes | None:
    data = entry.get(f"{name}-data")
    return base64.b64decode(data) if data else None


def _named(items: Any, name: str, what: str) -> Mapping[str, Any]:
    for item in items or []:
        if item.get("name") == name:
            return item.get(what) or {}
    raise ConfigError(f"kubeconfig has no {what} named {name!r}")


@dataclass(frozen=True)
class Entry:
    """A cluster, user or context of a kubeconfig, with the file that defined it."""

    body: Mapping[str, Any]
    file: Path


@dataclass
class Kubeconfig:
    """Kubeconfig files merged by kubectl's rules."""

    origin: str  # where the file list came from: --kubeconfig, $KUBECONFIG, ~/.kube/config
    files: list[Path] = field(default_factory=list)  # those that exist
    current_context: str = ""
    clusters: dict[str, Entry] = field(default_factory=dict)
    users: dict[str, Entry] = field(default_factory=dict)
    contexts: dict[str, Entry] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.current_context or self.clusters or self.users or self.contexts)

    def merge(self, path: Path) -> None:
        try:
            text = path.read_text()
        except FileNotFoundError:
            return  # kubectl skips missing files of $KUBECONFIG
        except (OSError, UnicodeDecodeError) as exc:
            why = getattr(exc, "strerror", None) or "not text"
            raise ConfigError(f"kubeconfig {path}: {why}; fix it or leave it out") from None
        try:
            doc = yaml.safe_load(text) or {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" (line {mark.line + 1})" if mark is not None else ""
            raise ConfigError(
                f"kubeconfig {path} is not valid YAML{at}; fix it or leave it out"
            ) from None
        if not isinstance(doc, dict):
            raise ConfigError(f"kubeconfig {path} is not a kubeconfig (a YAML mapping)")
        self.files.append(path)
        if not self.current_context and doc.get("current-context"):
            self.current_context = str(doc["current-context"])
        for kind, table in (
            ("cluster", self.clusters),
            ("user", self.users),
            ("context", self.contexts),
        ):
            items = doc.get(f"{kind}s") or []
            if not isinstance(items, list):
                raise ConfigError(f"kubeconfig {path}: {kind}s is not a list")
            for item in items:
                name = item.get("name") if isinstance(item, dict) else None
                if not isinstance(name, str) or not name:
                    raise ConfigError(f"kubeconfig {path}: an entry of {kind}s has no name")
                body = item.get(kind) or {}
                if not isinstance(body, dict):
                    raise ConfigError(f"kubeconfig {path}: {kind} {name!r} is not a mapping")
                table.setdefault(name, Entry(body, path))  # the first file to set it wins

    def where(self) -> str:
        return ", ".join(str(f) for f in self.files) or self.origin


def kubeconfig_files(
    flag: str | os.PathLike[str] | None, environ: Mapping[str, str] | None = None
) -> tuple[list[Path], str]:
    """The files to merge and where the list came from (kubectl's order)."""
    env = os.environ if environ is None else environ
    if flag is not None and str(flag) != "":
        path = Path(os.path.expanduser(str(flag)))
        if not path.exists():
            raise ConfigError(f"--kubeconfig {flag}: no such file; give the path of a kubeconfig")
        if path.is_dir():
            raise ConfigError(f"--kubeconfig {flag} is a directory; give the path of a kubeconfig")
        return [path], "--kubeconfig"
    listed = env.get(KUBECONFIG_ENV, "")
    if listed:
        paths: list[Path] = []
        for part in listed.split(os.pathsep):
            if part and Path(os.path.expanduser(part)) not in paths:
                paths.append(Path(os.path.expanduser(part)))
        return paths, f"${KUBECONFIG_ENV} ({listed})"
    home = env.get("HOME") or os.path.expanduser("~")
    return [Path(home, ".kube", "config")], "~/.kube/config"


def load_kubeconfig(
    flag: str | os.PathLike[str] | None = None, environ: Mapping[str, str] | None = None
) -> Kubeconfig:
    files, origin = kubeconfig_files(flag, environ)
    merged = Kubeconfig(origin)
    for path in files:
        merged.merge(path)
    return merged


def in_cluster_possible(environ: Mapping[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return bool(env.get("KUBERNETES_SERVICE_HOST") and env.get("KUBERNETES_SERVICE_PORT"))


def resolve(
    kubeconfig: str | os.PathLike[str] | None = None,
    context: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> Connection:
    """The connection kubectl would use with these flags and this environment."""
    merged = load_kubeconfig(kubeconfig, environ)
    if merged.empty and not context and in_cluster_possible(environ):
        return in_cluster(environ)
    if merged.empty and not context:
        raise ConfigError(
            f"no kubeconfig found ({merged.origin}) and not running in a cluster: pass "
            "--kubeconfig FILE or set KUBECONFIG"
        )
    return connection(merged, context)


def _names(table: Mapping[str, Entry]) -> str:
    return ", ".join(sorted(table)) or "none"


def connection(merged: Kubeconfig, context: str | None = None) -> Connection:
    """The connection of `context` (else the current context) of merged kubeconfigs."""
    ctx_name = context or merged.current_context
    if merged.empty:
        raise ConfigError(
            f"context {ctx_name!r} given, but no kubeconfig was found ({merged.origin}): pass "
            "--kubeconfig FILE or set KUBECONFIG"
        )
    if not ctx_name:
        raise ConfigError(
            f"{merged.where()}: no current-context set; pass --context "
            f"(one of: {_names(merged.contexts)})"
        )
    if ctx_name not in merged.contexts:
        raise ConfigError(
            f"context {ctx_name!r} is not in {merged.where()}; pass --context with one of: "
            f"{_names(merged.contexts)}"
        )
    ctx = merged.contexts[ctx_name].body
    cluster_name = str(ctx.get("cluster") or "")
    if cluster_name not in merged.clusters:
        raise ConfigError(
            f"context {ctx_name!r} names cluster {cluster_name!r}, which is not in "
            f"{merged.where()}; fix the context (clusters: {_names(merged.clusters)})"
        )
    cluster = merged.clusters[cluster_name]
    user_name = str(ctx.get("user") or "")
    if user_name and user_name not in merged.users:
        raise ConfigError(
            f"context {ctx_name!r} names user {user_name!r}, which is not in "
            f"{merged.where()}; fix the context (users: {_names(merged.users)})"
        )
    user = merged.users[user_name] if user_name else Entry({}, cluster.file)
    return _connection(cluster_name, cluster, user_name, user)


def _connection(
    cluster_name: str, cluster_entry: Entry, user_name: str, user_entry: Entry
) -> Connection:
    cluster, user = cluster_entry.body, user_entry.body
    where_cluster = f"cluster {cluster_name!r} ({cluster_entry.file})"
    where_user = f"user {user_name!r} ({user_entry.file})"
    server = str(cluster.get("server") or "")
    if not server:
        raise ConfigError(f"{where_cluster} has no server; set clusters[].cluster.server")
    if "://" not in server:
        server = f"https://{server}"  # client-go's default scheme
    if not server.startswith(("https://", "http://")):
        raise ConfigError(f"{where_cluster}: server {server!r} is not an http(s) URL")
    tls: ssl.SSLContext | bool
    if cluster.get("insecure-skip-tls-verify") or server.startswith("http://"):
        tls = False
    else:
        ca = _data_or_file(
            cluster, "certificate-authority", cluster_entry.file.parent, where_cluster
        )
        try:
            tls = ssl.create_default_context(cadata=ca.decode() if ca else None)
        except (ssl.SSLError, ValueError, UnicodeDecodeError):
            raise ConfigError(
                f"{where_cluster}: certificate-authority holds no PEM certificate; fix it"
            ) from None
        cert = _data_or_file(user, "client-certificate", user_entry.file.parent, where_user)
        key = _data_or_file(user, "client-key", user_entry.file.parent, where_user)
        if cert and key:
            try:
                load_pem_chain(tls, cert, key)
            except (ssl.SSLError, ValueError):
                raise ConfigError(
                    f"{where_user}: client-certificate and client-key are not a matching PEM "
                    "pair; fix them"
                ) from None
    credentials: Credentials | None = None
    if "exec" in user:
        spec = user["exec"]
        if not isinstance(spec, dict):
            raise ConfigError(f"{where_user}: exec is not a mapping")
        credentials = ExecPlugin(
            spec,
            user_entry.file.parent,
            cluster=cluster,
            tls=tls if isinstance(tls, ssl.SSLContext) else None,
        )
    elif user.get("tokenFile"):  # as client-go: the file wins over `token`
        credentials = TokenFile(user_entry.file.parent / os.path.expanduser(str(user["tokenFile"])))
    elif user.get("token"):
        credentials = StaticToken(str(user["token"]))
    return Connection(
        host=server.rstrip("/"),
        ssl=tls,
        credentials=credentials,
        auth_provider="auth-provider" in user,
    )


def from_kubeconfig(path: Path, context: str | None = None) -> Connection:
    """The connection of one kubeconfig file (as `--kubeconfig`)."""
    return connection(load_kubeconfig(path, {}), context)


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
    cluster, user = _untrusted_entries(data, context)
    server = str(cluster.get("server") or "")
    insecure = bool(cluster.get("insecure-skip-tls-verify"))
    if (insecure or not server.startswith("https://")) and not allow_insecure:
        raise KubeconfigRefused(
            "InsecureKubeconfig",
            "the server must be https:// with TLS verified (the operator allows otherwise only"
            " with --allow-insecure-cluster-tls)",
        )
    _check_server(server)
    token = user.get("token")
    return Connection(
        host=server.rstrip("/"),
        ssl=_untrusted_tls(cluster, user) if not insecure else False,
        credentials=StaticToken(str(token)) if token else None,
        untrusted=True,
    )


def _untrusted_entries(
    data: bytes, context: str | None
) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The cluster and user entries of the context, refused when they name plugins, files
    or proxies."""
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
    return cluster, user


def _untrusted_tls(cluster: Mapping[str, Any], user: Mapping[str, Any]) -> ssl.SSLContext:
    """TLS verified with the inline CA (file references were refused: only inline data is
    read), and the inline client certificate."""
    try:
        ca = _inline(cluster, "certificate-authority")
        tls = ssl.create_default_context(cadata=ca.decode() if ca else None)
        if ca is None:
            tls.load_default_certs()
        cert = _inline(user, "client-certificate")
        client_key = _inline(user, "client-key")
        if cert and client_key:
            load_pem_chain(tls, cert, client_key)
    except (ValueError, TypeError, ssl.SSLError, OSError) as exc:
        raise KubeconfigRefused(
            "KubeconfigInvalid", f"unusable TLS material: {exc.__class__.__name__}"
        ) from None
    return tls


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


def in_cluster(environ: Mapping[str, str] | None = None) -> Connection:
    """The Pod's service account: its token file is re-read as kubelet rotates it."""
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError(
            "not running in a cluster (KUBERNETES_SERVICE_HOST is unset); pass --kubeconfig"
        )
    if ":" in host:
        host = f"[{host}]"
    try:
        ctx = ssl.create_default_context(cafile=str(SERVICE_ACCOUNT / "ca.crt"))
    except OSError as exc:
        raise ConfigError(
            f"in-cluster: {SERVICE_ACCOUNT / 'ca.crt'}: {exc.strerror}; is the service account "
            "token mounted (automountServiceAccountToken)?"
        ) from None
    return Connection(f"https://{host}:{port}", ctx, TokenFile(SERVICE_ACCOUNT / "token"))


async def via_kubernetes_asyncio(merged: Kubeconfig, context: str | None) -> Connection:
    """Auth providers (oidc, and the retired gcp and azure ones): let kubernetes_asyncio's
    loader run them on the selected context, then use the result."""
    name = context or merged.current_context
    try:
        from kubernetes_asyncio import config as kube_config  # noqa: PLC0415 - 1.3 s import
        from kubernetes_asyncio.client import Configuration  # noqa: PLC0415
    except ImportError:
        raise ConfigError(
            f"context {name!r}: its user needs an auth provider, read by kubernetes_asyncio, "
            "which is not installed (install kubescribe[kubeconfig-plugins]; the image does not "
            "carry it: in a Pod the service account is used)"
        ) from None
    ctx = merged.contexts[name].body
    cluster, user = merged.clusters[str(ctx["cluster"])], merged.users[str(ctx["user"])]
    doc = {
        "current-context": name,
        "contexts": [{"name": name, "context": dict(ctx)}],
        "clusters": [{"name": str(ctx["cluster"]), "cluster": dict(cluster.body)}],
        "users": [{"name": str(ctx["user"]), "user": dict(user.body)}],
    }
    cfg = Configuration()
    try:
        await kube_config.load_kube_config_from_dict(
            doc, context=name, client_configuration=cfg, temp_file_path=str(user.file.parent)
        )
        token = await cfg.get_api_key_with_prefix("authorization")
    except Exception as exc:  # the loader raises anything: one line for the user
        raise ConfigError(
            f"user {ctx['user']!r}: its auth-provider failed ({exc.__class__.__name__}: "
            f"{str(exc)[:200]}); use an exec plugin instead (kubectl dropped most providers)"
        ) from None
    tls: ssl.SSLContext | bool = False
    if cfg.verify_ssl:
        tls = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        if cfg.cert_file:
            tls.load_cert_chain(cfg.cert_file, cfg.key_file)
    bearer = token.removeprefix("Bearer ") if token else ""
    return Connection(str(cfg.host).rstrip("/"), tls, StaticToken(bearer) if bearer else None)


async def connect_settings(
    kubeconfig: str | os.PathLike[str] | None, context: str | None
) -> Connection:
    """`resolve`, with auth providers run through kubernetes_asyncio."""
    conn = resolve(kubeconfig, context)
    if conn.auth_provider:
        return await via_kubernetes_asyncio(load_kubeconfig(kubeconfig), context)
    return conn
