"""What a GitProvider's Secrets and ConfigMaps hold: transport credentials, known hosts and the
signing key, read by a direct GET (`keysecrets`) and turned into `Credentials` and `SigningKey`
at once. Their data lives only there: never in a cache of objects, a log line, a condition
message or an exception."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from kubescribe.api import conditions as c
from kubescribe.api.models import GitProviderSpec, SigningSpec
from kubescribe.controller.keysecrets import read_object, write_generated
from kubescribe.controller.ownership import created_by_kubescribe, not_ours_message, secret_data
from kubescribe.controller.plan import ObjKey, Problem
from kubescribe.controller.status import Cond
from kubescribe.git.signing import SigningKey
from kubescribe.git.transport.errors import InvalidCredentials
from kubescribe.git.transport.secret import Credentials
from kubescribe.kube.client import KubeClient

log = structlog.get_logger(__name__)

SIGNING_PUBLIC_KEY = "signing.pub"
BACKUP_NOTE = (
    "The key that signs kubescribe's commits; its public half is in the GitProvider status"
)

Version = tuple[str, ...]
"""(plural, name, uid, resourceVersion) of an object read; (plural, name, "") if missing."""


@dataclass(frozen=True)
class Sources:
    """Credentials and signing key of one provider, and the versions they were read at."""

    versions: tuple[Version, ...]
    creds: Credentials = field(default_factory=Credentials)
    problem: Problem | None = None
    signer: SigningKey | None = None
    signing_problem: Problem | None = None


async def read_sources(
    client: KubeClient, key: ObjKey, spec: GitProviderSpec, previous: Sources | None
) -> Sources:
    """Read what `spec` refers to; `previous` is returned when no version changed. Raises
    `keysecrets.SecretUnavailable` when the API server cannot be asked."""
    namespace = key[0]
    versions: list[Version] = []
    problem: Problem | None = None
    data: dict[str, bytes] = {}
    if spec.secret_ref is not None:
        name = spec.secret_ref.name
        secret = await read_object(client, "secrets", namespace, name)
        versions.append(_version("secrets", name, secret))
        if secret is None:
            problem = Problem(c.SECRET_NOT_FOUND, f"Secret {name!r} (spec.secretRef) not found")
        else:
            data = secret_data(secret)
    known_hosts: bytes | None = None
    ref = spec.known_hosts_ref
    if ref is not None:
        plural = "secrets" if ref.kind == "Secret" else "configmaps"
        obj = await read_object(client, plural, namespace, ref.name)
        versions.append(_version(plural, ref.name, obj))
        values = (secret_data(obj) if ref.kind == "Secret" else _configmap_data(obj)) or {}
        known_hosts = values.get(ref.key)
        if known_hosts is None and problem is None:
            where = f"{ref.kind} {ref.name!r}"
            problem = Problem(
                c.KNOWN_HOSTS_NOT_FOUND,
                f"{where} (spec.knownHostsRef) not found"
                if obj is None
                else f"{where} (spec.knownHostsRef) has no key {ref.key!r}",
            )
    creds = Credentials()
    if problem is None:
        try:
            creds = Credentials.from_secret_data(data, known_hosts=known_hosts)
        except InvalidCredentials as exc:
            problem = Problem(c.INVALID_CREDENTIALS, f"Secret {_ref_name(spec)}: {exc}")
    signer, signing_problem = None, None
    if spec.signing is not None:
        signer, signing_problem, version = await _signing_key(
            client, namespace, spec.signing, previous
        )
        versions.append(version)
    versions_t = tuple(versions)
    if previous is not None and previous.versions == versions_t:
        return previous
    return Sources(versions_t, creds, problem, signer, signing_problem)


def signing_condition(spec: SigningSpec, sources: Sources | None) -> Cond:
    """`SigningKeyLoaded` of a provider with `spec.signing`."""
    if sources is None:
        return Cond(c.SIGNING_KEY_LOADED, "Unknown", c.PROBING, "Signing key not read yet")
    if sources.signing_problem is not None:
        problem = sources.signing_problem
        return Cond(c.SIGNING_KEY_LOADED, "False", problem.reason, problem.message)
    assert sources.signer is not None
    return Cond(
        c.SIGNING_KEY_LOADED,
        "True",
        c.SIGNING_KEY_LOADED,
        f"Signing commits with {sources.signer.fingerprint} "
        f"(Secret {spec.secret_ref.name!r}, key {spec.key!r})",
    )


async def _signing_key(
    client: KubeClient, namespace: str, spec: SigningSpec, previous: Sources | None
) -> tuple[SigningKey | None, Problem | None, Version]:
    name, data_key = spec.secret_ref.name, spec.key
    secret = await read_object(client, "secrets", namespace, name)
    version = _version("secrets", name, secret)
    if previous is not None and version in previous.versions and previous.signer:
        return previous.signer, None, version
    raw = secret_data(secret).get(data_key) if secret is not None else None
    if raw is None:
        where = f"Secret {name!r}" if secret is None else f"key {data_key!r} of Secret {name!r}"
        if not spec.generate_when_missing:
            return (
                None,
                Problem(
                    c.SIGNING_KEY_MISSING,
                    f"{where} (spec.signing) not found; commits are not written unsigned",
                ),
                version,
            )
        if secret is not None and not created_by_kubescribe(secret):
            return (
                None,
                Problem(c.SIGNING_KEY_MISSING, not_ours_message(name, f"key {data_key!r}")),
                version,
            )
        return await _generate(client, namespace, spec, secret)
    try:
        return SigningKey.from_openssh(raw, comment=f"kubescribe {namespace}"), None, version
    except (ValueError, TypeError):
        return (
            None,
            Problem(
                c.SIGNING_KEY_INVALID,
                f"key {data_key!r} of Secret {name!r} (spec.signing) is not an unencrypted"
                " ed25519 private key in OpenSSH format",
            ),
            version,
        )


async def _generate(
    client: KubeClient, namespace: str, spec: SigningSpec, secret: Mapping[str, Any] | None
) -> tuple[SigningKey | None, Problem | None, Version]:
    """A new ed25519 key stored in the Secret (created, or added with a precondition on
    its resourceVersion so two writers cannot both add one)."""
    name = spec.secret_ref.name
    key = SigningKey.generate(comment=f"kubescribe {namespace}")
    written = await write_generated(
        client,
        namespace,
        name,
        {
            spec.key: key.private_openssh().encode(),
            SIGNING_PUBLIC_KEY: key.public_key_line.encode(),
        },
        backup_note=BACKUP_NOTE,
        existing=secret,
        precondition=True,
    )
    log.info(
        "provider.signing_key_generated",
        namespace=namespace,
        secret=name,
        fingerprint=key.fingerprint,
    )
    return key, None, _version("secrets", name, written)


def _ref_name(spec: GitProviderSpec) -> str:
    return repr(spec.secret_ref.name) if spec.secret_ref else "(none)"


def _version(plural: str, name: str, obj: Mapping[str, Any] | None) -> Version:
    if obj is None:
        return (plural, name, "")
    meta = obj.get("metadata") or {}
    return (plural, name, str(meta.get("uid", "")), str(meta.get("resourceVersion", "")))


def _configmap_data(obj: Mapping[str, Any] | None) -> dict[str, bytes]:
    if obj is None:
        return {}
    out = {name: str(value).encode() for name, value in (obj.get("data") or {}).items()}
    out.update(secret_data({"data": obj.get("binaryData") or {}}))
    return out
