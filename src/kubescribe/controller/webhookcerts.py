"""Operator-managed webhook certificates (`--webhook-cert-secret`), kept in one Secret.

Every replica runs the same loop: read the Secret, `advance` it (`certrotation`), write it back
when something is due (create, or replace with its resourceVersion: of replicas racing, one
wins and the others read the winner's), then serve what the Secret holds: the PEM files the
HTTPS sites reload (`server.tls.reload_on_change`), the `caBundle` of the
ValidatingWebhookConfigurations it is told to keep, and kube-apiserver's files (client
certificates and kubeconfigs) in a second Secret for the cluster administrator. A write that
fails (RBAC, API down) is logged with a reason and counted; the replica keeps serving the
certificate it has until the write succeeds.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from kubescribe import metrics
from kubescribe.api import conditions as c
from kubescribe.controller.certrotation import (
    Issued,
    Material,
    Policy,
    advance,
    apiserver_files,
    client_needs_issue,
    issue_client,
    next_due,
)
from kubescribe.controller.ownership import MANAGED_BY
from kubescribe.kube.client import ApiError, KubeClient

log = structlog.get_logger(__name__)

WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
SERVING_FILES = ("tls.crt", "tls.key", "ca.crt")
RETRY = 2.0
FAILED_WRITE_RETRY = 10.0  # a refused renewal is tried again at this pace, not in a loop


@dataclass(frozen=True)
class CertificateOptions:
    namespace: str
    secret: str
    policy: Policy
    directory: Path  # tls.crt, tls.key and ca.crt (the trusted CAs) for the HTTPS sites
    inject: tuple[str, ...] = ()  # ValidatingWebhookConfigurations whose caBundle is kept
    apiserver_secret: str = ""  # kube-apiserver's files ('' = none)
    apiserver_files: Path | None = None  # static files copied into it (a mounted ConfigMap)
    audit_url: str = ""  # the receiver's URL in audit-webhook.kubeconfig
    clients: Mapping[str, str] | None = None  # file stem -> CN of kube-apiserver's clients
    poll: float = 30.0  # seconds between reads of the Secret (a replica picks up a rotation)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class WebhookCertificates:
    def __init__(
        self,
        client: KubeClient,
        options: CertificateOptions,
        clock: Callable[[], dt.datetime] = _now,
    ) -> None:
        self.client = client
        self.options = options
        self.clock = clock
        self.material: Material | None = None
        self._secrets = f"/api/v1/namespaces/{options.namespace}/secrets"

    def bundle(self) -> bytes:
        """The CAs to trust now (PEM); empty before the first material."""
        return self.material.bundle(self.clock()) if self.material else b""

    async def start(self) -> None:
        """Return once there is a certificate to serve (created or read), written to files."""
        while True:
            await self.tick()
            if self.material is not None:
                return
            await asyncio.sleep(RETRY)

    async def run(self) -> None:
        while True:
            wait = await self.tick()
            await asyncio.sleep(wait)

    async def tick(self) -> float:
        """One round; the seconds until the next."""
        opts = self.options
        try:
            found = await self._get(f"{self._secrets}/{opts.secret}")
        except ApiError as exc:
            _failed(_SECRET, exc, secret=opts.secret)
            return RETRY
        current = Material.from_data(found.get("data") if found else None)
        if found is not None and current is None:
            metrics.WEBHOOK_CERT_ERRORS.labels(c.SECRET_INVALID).inc()
            log.error("webhook_certs.invalid", reason=c.SECRET_INVALID, secret=opts.secret)
        now = self.clock()
        wanted, events = advance(current, now, opts.policy)
        soonest = 0.5
        if events:
            written = await self._write(found, wanted, events, now)
            if written is None:
                if current is None:
                    return RETRY
                wanted = current  # keep serving what is there (still valid: renewed early)
                soonest = FAILED_WRITE_RETRY
            elif not written:
                return 0.1  # another replica wrote first: read what it wrote
        self._use(wanted, now)
        await self._inject(wanted.bundle(now))
        if opts.apiserver_secret:
            await self._apiserver_config(wanted, now)
        until = (next_due(wanted, now, opts.policy) - self.clock()).total_seconds()
        return min(opts.poll, max(until, soonest))

    async def _write(
        self, found: dict[str, Any] | None, wanted: Material, events: list[str], now: dt.datetime
    ) -> bool | None:
        """True: written; False: lost a race (409); None: failed (logged)."""
        opts = self.options
        body = _secret(opts.secret, wanted.to_data(now), found)
        try:
            if found is None:
                await self.client.request("POST", self._secrets, body=body)
            else:
                await self.client.request("PUT", f"{self._secrets}/{opts.secret}", body=body)
        except ApiError as exc:
            if exc.status == 409:
                return False
            _failed(_SECRET, exc, secret=opts.secret, events=events)
            return None
        for event in events:
            metrics.WEBHOOK_CERT_ROTATIONS.labels(event).inc()
        log.info(
            "webhook_certs.rotated",
            events=events,
            secret=opts.secret,
            serving_expires=wanted.serving.not_after.isoformat(),
            serving_fingerprint=wanted.serving.fingerprint,
            ca_expires=wanted.ca.not_after.isoformat(),
            trusted_cas=len(wanted.trusted(now)),
        )
        return True

    def _use(self, material: Material, now: dt.datetime) -> None:
        """Serve `material`: write the files the HTTPS sites reload (when they changed)."""
        previous = self.material
        self.material = material
        metrics.WEBHOOK_CERT_EXPIRY.labels("serving").set(material.serving.not_after.timestamp())
        metrics.WEBHOOK_CERT_EXPIRY.labels("ca").set(material.ca.not_after.timestamp())
        files = {
            "tls.crt": material.serving.cert_pem,
            "tls.key": material.serving.key_pem,
            "ca.crt": material.bundle(now),
        }
        if previous is not None and files == {
            "tls.crt": previous.serving.cert_pem,
            "tls.key": previous.serving.key_pem,
            "ca.crt": previous.bundle(now),
        }:
            return
        _write_files(self.options.directory, files)
        log.info(
            "webhook_certs.loaded",
            serving_fingerprint=material.serving.fingerprint,
            serving_expires=material.serving.not_after.isoformat(),
        )

    async def _inject(self, bundle: bytes) -> None:
        """Keep `caBundle` of the named ValidatingWebhookConfigurations equal to `bundle`."""
        encoded = base64.b64encode(bundle).decode()
        for name in self.options.inject:
            try:
                found = await self._get(f"{WEBHOOKS}/{name}")
                if found is None:
                    continue  # not installed (yet)
                changed = False
                for hook in found.get("webhooks") or []:
                    config = hook.setdefault("clientConfig", {})
                    if config.get("caBundle") != encoded:
                        config["caBundle"] = encoded
                        changed = True
                if changed:
                    await self.client.request("PUT", f"{WEBHOOKS}/{name}", body=found)
                    log.info("webhook_certs.ca_bundle_set", webhook_configuration=name)
            except ApiError as exc:
                if exc.status != 409:  # 409: written meanwhile; the next round sets it
                    _failed(_WEBHOOK_CONFIGURATION, exc, webhook_configuration=name)

    async def _apiserver_config(self, material: Material, now: dt.datetime) -> None:
        """Keep kube-apiserver's files in their Secret: client certificates from the signing
        CA (reissued only after a CA rollover), kubeconfigs trusting every trusted CA."""
        opts = self.options
        path = f"{self._secrets}/{opts.apiserver_secret}"
        try:
            found = await self._get(path)
        except ApiError as exc:
            _failed(_APISERVER_CONFIG, exc, secret=opts.apiserver_secret)
            return
        current = _decoded(found.get("data") if found else None)
        clients: dict[str, Issued] = {}
        for stem, common_name in (opts.clients or {}).items():
            held = _issued(current, stem)
            if held is None or client_needs_issue(held, material, now):
                held = issue_client(material.ca, common_name, now, opts.policy)
            clients[stem] = held
        static = _static_files(opts.apiserver_files)
        wanted = apiserver_files(static, material.bundle(now), clients, opts.audit_url)
        if wanted == current:
            return
        data = {k: base64.b64encode(v).decode() for k, v in wanted.items()}
        body = _secret(opts.apiserver_secret, data, found)
        try:
            if found is None:
                await self.client.request("POST", self._secrets, body=body)
            else:
                await self.client.request("PUT", path, body=body)
        except ApiError as exc:
            if exc.status != 409:
                _failed(_APISERVER_CONFIG, exc, secret=opts.apiserver_secret)
            return
        log.info(
            "webhook_certs.apiserver_config_written",
            secret=opts.apiserver_secret,
            files=sorted(wanted),
        )

    async def _get(self, path: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self.client.get(path)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return found


# (reason when refused, reason otherwise) of each thing the upkeep writes
_SECRET = (c.SECRET_FORBIDDEN, c.SECRET_UNAVAILABLE)
_WEBHOOK_CONFIGURATION = (c.WEBHOOK_CONFIGURATION_FORBIDDEN, c.WEBHOOK_CONFIGURATION_UNAVAILABLE)
_APISERVER_CONFIG = (c.APISERVER_CONFIG_FORBIDDEN, c.APISERVER_CONFIG_UNAVAILABLE)


def _failed(reasons: tuple[str, str], exc: ApiError, **context: Any) -> None:
    reason = reasons[0] if exc.status == 403 else reasons[1]
    metrics.WEBHOOK_CERT_ERRORS.labels(reason).inc()
    log.error(
        "webhook_certs.failed", reason=reason, status=exc.status, error=exc.message, **context
    )


def _secret(name: str, data: dict[str, str], found: dict[str, Any] | None) -> dict[str, Any]:
    """A Secret to create, or `found` (with its resourceVersion: compare-and-swap) replaced."""
    if found is None:
        meta: dict[str, Any] = {"name": name, "labels": dict(MANAGED_BY)}
        return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "data": data}
    return {**found, "data": data}


def _decoded(data: Mapping[str, str] | None) -> dict[str, bytes]:
    out = {}
    for key, value in (data or {}).items():
        try:
            out[key] = base64.b64decode(value, validate=True)
        except ValueError:
            continue
    return out


def _issued(files: Mapping[str, bytes], stem: str) -> Issued | None:
    try:
        return Issued.parse(files[f"{stem}.crt"], files[f"{stem}.key"])
    except (KeyError, ValueError, TypeError):
        return None


def _static_files(directory: Path | None) -> dict[str, bytes]:
    """Regular files of a mounted ConfigMap (its `..data` bookkeeping left out)."""
    if directory is None:
        return {}
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if not p.name.startswith(".") and p.is_file()
    }


def _write_files(directory: Path, files: Mapping[str, bytes]) -> None:
    """Replace each file atomically; keys readable by the operator only."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for name, content in files.items():
        tmp = directory / f".{name}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(content)
        os.replace(tmp, directory / name)
