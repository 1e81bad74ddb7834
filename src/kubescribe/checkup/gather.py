"""What `kubescribe check` reads, with the user's credentials: the CRDs, the operator's
Deployment, Leases and webhook configurations, its metrics (through the API server's pod proxy,
or `--operator-url` for an operator run as a process), and the status of every GitProvider,
GitTarget and (Cluster)WatchRule. Nothing is written."""

from __future__ import annotations

import asyncio
import base64
import ssl
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
from cryptography import x509
from prometheus_client.parser import text_string_to_metric_families

from kubescribe.api.crds import crd_manifests
from kubescribe.api.models import GROUP, VERSION
from kubescribe.checkup.verdicts import Facts, Samples, WebhookProbe
from kubescribe.kube.client import ApiError, KubeClient

NAME_LABEL = "app.kubernetes.io/name=kubescribe"
_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
_WEBHOOKS = (
    "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations",
    "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
)
_PROBE_TIMEOUT = 5.0


async def gather(
    client: KubeClient, *, namespace: str | None, operator_url: str | None, version: str
) -> Facts:
    scope = f"/namespaces/{namespace}" if namespace else ""
    wanted = crd_manifests()
    live = {
        crd["metadata"]["name"]: await _get_or_none(client, _CRD_PATH + crd["metadata"]["name"])
        for crd in wanted
    }
    deployments: list[dict[str, Any]] = []
    if operator_url is None:
        deployments = await _items(client, f"/apis/apps/v1{scope}/deployments", NAME_LABEL)
    leases = await _items(
        client, f"/apis/coordination.k8s.io/v1{scope}/leases", "kubescribe.io/lease"
    )
    if operator_url is not None:
        samples, error = await _metrics_at(operator_url)
    else:
        samples, error = await _metrics_of_pods(client, deployments)
    webhooks = await _webhook_probes(client, samples)
    # Every namespace's: `namespace` is where the operator runs, not where tenants work.
    kinds = {
        kind: await _items(client, f"/apis/{GROUP}/{VERSION}/{kind}")
        for kind in ("gitproviders", "gittargets", "watchrules", "clusterwatchrules")
    }
    return Facts(
        now=datetime.now(UTC),
        wanted_crds=wanted,
        live_crds=live,
        deployments=deployments,
        leases=leases,
        webhooks=webhooks,
        samples=samples,
        metrics_error=error,
        providers=kinds["gitproviders"],
        targets=kinds["gittargets"],
        rules=[*kinds["watchrules"], *kinds["clusterwatchrules"]],
        outside_cluster=operator_url is not None,
        version=version,
    )


async def _get_or_none(client: KubeClient, path: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = await client.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise
    return found


async def _items(client: KubeClient, path: str, selector: str = "") -> list[dict[str, Any]]:
    params = {"labelSelector": selector} if selector else None
    try:
        answer = await client.get(path, params=params)
    except ApiError as exc:
        if exc.status == 404:  # a kind whose CRD is missing: the CRD line says so
            return []
        raise
    items: list[dict[str, Any]] = answer.get("items", [])
    return items


# -- metrics -----------------------------------------------------------------------------------
def parse_metrics(texts: Sequence[str]) -> Samples:
    samples: dict[str, list[tuple[Mapping[str, str], float]]] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


async def _metrics_at(url: str) -> tuple[Samples | None, str]:
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(
                url.rstrip("/") + "/metrics", timeout=aiohttp.ClientTimeout(total=_PROBE_TIMEOUT)
            ) as resp,
        ):
            if resp.status != 200:
                return None, f"{url} answered {resp.status}"
            return parse_metrics([await resp.text()]), ""
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        return None, f"{url}: {exc or type(exc).__name__}"


async def _metrics_of_pods(
    client: KubeClient, deployments: Sequence[Mapping[str, Any]]
) -> tuple[Samples | None, str]:
    texts, errors = [], []
    for dep in deployments:
        ns = dep["metadata"]["namespace"]
        labels = dep.get("spec", {}).get("selector", {}).get("matchLabels", {})
        selector = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        for pod in await _items(client, f"/api/v1/namespaces/{ns}/pods", selector):
            if pod.get("status", {}).get("phase") != "Running":
                continue
            port = _metrics_port(pod)
            name = pod["metadata"]["name"]
            try:
                texts.append(
                    await client.get_text(
                        f"/api/v1/namespaces/{ns}/pods/{name}:{port}/proxy/metrics"
                    )
                )
            except (ApiError, aiohttp.ClientError, TimeoutError) as exc:
                errors.append(f"{ns}/{name}: {exc}")
    if not texts:
        return None, "; ".join(errors) or "no running operator Pod"
    return parse_metrics(texts), ""


def _metrics_port(pod: Mapping[str, Any]) -> int:
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports", []):
            if port.get("name") == "metrics":
                return int(port["containerPort"])
    return 8080


# -- webhooks ----------------------------------------------------------------------------------
async def _webhook_probes(client: KubeClient, samples: Samples | None) -> list[WebhookProbe]:
    probes = []
    served = _served_expiry(samples)
    for path in _WEBHOOKS:
        for config in await _items(client, path):
            if "kubescribe" not in config["metadata"]["name"]:
                continue
            for hook in config.get("webhooks", []):
                probes.append(await _probe(client, hook, served))
    return probes


def _served_expiry(samples: Samples | None) -> datetime | None:
    """The operator's own serving certificate expiry (metric), for service webhooks whose
    certificate cannot be seen through the API server's proxy."""
    values = [
        v
        for _, v in (samples or {}).get(
            "kubescribe_webhook_certificate_expiry_timestamp_seconds", []
        )
        if v > 0
    ]
    return datetime.fromtimestamp(min(values), UTC) if values else None


async def _probe(
    client: KubeClient, hook: Mapping[str, Any], served: datetime | None
) -> WebhookProbe:
    name = str(hook.get("name", "?"))
    config = hook.get("clientConfig", {})
    bundle = base64.b64decode(config.get("caBundle") or "")
    ca_expires = _earliest_expiry(bundle)
    if ca_expires is None:
        return WebhookProbe(name, None, None)
    if url := config.get("url"):
        expires, error = await _tls_probe(str(url), bundle)
        return WebhookProbe(name, ca_expires, expires, error)
    service = config.get("service") or {}
    path = (
        f"/api/v1/namespaces/{service.get('namespace')}/services/"
        f"https:{service.get('name')}:{service.get('port', 443)}/proxy/healthz"
    )
    try:
        await client.get_text(path)
    except ApiError as exc:
        if exc.status in (502, 503):  # the proxy reached no endpoint
            return WebhookProbe(name, ca_expires, served, f"endpoint not answering: {exc}")
    except (aiohttp.ClientError, TimeoutError) as exc:
        return WebhookProbe(name, ca_expires, served, f"endpoint not answering: {exc}")
    return WebhookProbe(name, ca_expires, served)  # any HTTP answer: it serves


def _earliest_expiry(bundle: bytes) -> datetime | None:
    try:
        certs = x509.load_pem_x509_certificates(bundle)
    except ValueError:
        return None
    return min(cert.not_valid_after_utc for cert in certs) if certs else None


async def _tls_probe(url: str, bundle: bytes) -> tuple[datetime | None, str]:
    """The certificate the endpoint serves, and an error when it does not verify against the
    webhook's CA bundle (as the API server would see it)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 443
    served: datetime | None = None
    try:
        look = ssl.create_default_context()
        look.check_hostname, look.verify_mode = False, ssl.CERT_NONE
        der = await _peer_certificate(host, port, look)
        if der is not None:
            served = x509.load_der_x509_certificate(der).not_valid_after_utc
        verify = ssl.create_default_context(cadata=bundle.decode("ascii", "replace"))
        await _peer_certificate(host, port, verify)
    except ssl.SSLCertVerificationError as exc:
        return served, f"certificate does not verify: {exc.verify_message}"
    except (OSError, TimeoutError, ssl.SSLError) as exc:
        return served, f"endpoint not answering at {quote(host)}:{port}: {exc}"
    return served, ""


async def _peer_certificate(host: str, port: int, context: ssl.SSLContext) -> bytes | None:
    async with asyncio.timeout(_PROBE_TIMEOUT):
        _, writer = await asyncio.open_connection(host, port, ssl=context, server_hostname=host)
    try:
        tls = writer.get_extra_info("ssl_object")
        return tls.getpeercert(binary_form=True) if tls is not None else None
    finally:
        writer.close()
