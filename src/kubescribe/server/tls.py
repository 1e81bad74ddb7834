"""TLS for the operator's HTTPS sites (audit receiver, admission webhook)."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

log = structlog.get_logger(__name__)


def server_context(cert: Path, key: Path, client_ca: Path | None = None) -> ssl.SSLContext:
    """A serving context; with `client_ca`, client certificates signed by it are verified.

    Verification is `CERT_OPTIONAL`: a certificate that does not verify fails the handshake,
    a missing one reaches the handler, which answers 401 (a clearer error than a reset); the
    handler also checks the certificate's identity (`ClientPolicy`, 403).
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(cert, key)
    if client_ca is not None:
        ctx.load_verify_locations(cafile=str(client_ca))
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


ANY_CLIENT = "*"


@dataclass(frozen=True)
class ClientPolicy:
    """Which verified client certificates may call: those whose subject CN, or one of whose
    DNS or URI subject alternative names, is in `names` (`*`: any the client CA verifies)."""

    names: frozenset[str]
    anonymous: bool = False  # no client authentication at all (managed clusters: see docs)

    def allows(self, peer: frozenset[str]) -> bool:
        return self.anonymous or ANY_CLIENT in self.names or not self.names.isdisjoint(peer)


def peer_identities(transport: Any) -> frozenset[str] | None:
    """The verified client certificate's subject CN and DNS/URI SANs; None without one."""
    if transport is None:
        return None
    cert = transport.get_extra_info("peercert")
    if not cert:
        return None
    names = {
        str(value) for rdn in cert.get("subject", ()) for attr, value in rdn if attr == "commonName"
    }
    names.update(str(v) for kind, v in cert.get("subjectAltName", ()) if kind in ("DNS", "URI"))
    return frozenset(names)


async def reload_on_change(
    ctx: ssl.SSLContext,
    cert: Path,
    key: Path,
    client_ca: Path | None = None,
    interval: float = 10.0,
) -> None:
    """Reload the serving certificate when its files change (mounted Secrets rotate, or the
    operator's own certificates); new handshakes get the new certificate. A changed client CA
    file is added to the trusted CAs (a CA rollover trusts old and new; a CA that was
    trusted stays so until the process ends, and certificates it signed until it expires).
    Runs until cancelled."""
    files = (cert, key) + ((client_ca,) if client_ca is not None else ())

    def stamp() -> tuple[float, ...]:
        return tuple(f.stat().st_mtime for f in files)

    last: tuple[float, ...] = ()
    with contextlib.suppress(OSError):
        last = stamp()
    while True:
        await asyncio.sleep(interval)
        try:
            now = stamp()
            if now != last:
                ctx.load_cert_chain(cert, key)
                if client_ca is not None:
                    ctx.load_verify_locations(cafile=str(client_ca))
                last = now
                log.info("tls.reloaded", cert=str(cert))
        except (OSError, ssl.SSLError) as exc:
            log.warning("tls.reload_failed", cert=str(cert), error=str(exc))
