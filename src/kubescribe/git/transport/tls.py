"""A server certificate checked against the private CAs of a Secret (`ca.crt`).

`cryptography` is imported by the first check (a remote with private CAs), not at start-up.
"""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from kubescribe.git.transport.errors import GitFailure, TransportRefused

if TYPE_CHECKING:
    from cryptography import x509


def verify_tls(cas: tuple[x509.Certificate, ...], der: bytes, host: str) -> None:
    """Accept the DER leaf for `host` if it chains to one of `cas`, else `TransportRefused`."""
    from cryptography import x509  # noqa: PLC0415
    from cryptography.x509 import verification  # noqa: PLC0415

    # Web PKI rules, except that private CAs often issue leaves without an authority key id.
    ca_policy = verification.ExtensionPolicy.webpki_defaults_ca()
    leaf_policy = verification.ExtensionPolicy.webpki_defaults_ee().may_be_present(
        x509.AuthorityKeyIdentifier, verification.Criticality.AGNOSTIC, None
    )
    try:
        subject: x509.DNSName | x509.IPAddress = x509.IPAddress(
            ipaddress.ip_address(host.strip("[]"))
        )
    except ValueError:
        subject = x509.DNSName(host)
    try:
        leaf = x509.load_der_x509_certificate(der)
        verifier = (
            verification.PolicyBuilder()
            .store(verification.Store(list(cas)))
            .extension_policies(ca_policy=ca_policy, ee_policy=leaf_policy)
            .build_server_verifier(subject)
        )
        verifier.verify(leaf, [])
    except (ValueError, verification.VerificationError) as exc:
        raise TransportRefused(
            GitFailure.CERTIFICATE_UNTRUSTED,
            f"the TLS certificate of {host} does not verify against the Secret's CA: {exc}",
        ) from None
