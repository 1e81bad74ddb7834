"""Throw-away certificates for local servers: a CA, serving and client certificates."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from kubescribe.controller.certrotation import CA_KEY_USAGE


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes


def _key_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attrs)


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(self, common_name: str = "kubescribe-dev-ca") -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        self._name = _name(common_name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                CA_KEY_USAGE,
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        *,
        organization: str | None = None,
        hosts: tuple[str, ...] = (),
        client: bool = False,
    ) -> KeyPair:
        """Issue a serving certificate (with `hosts` as SANs) or a client certificate."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = dt.datetime.now(dt.UTC)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organization))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]
                ),
                critical=False,
            )
        )
        if hosts:
            sans: list[x509.GeneralName] = []
            for host in hosts:
                try:
                    sans.append(x509.IPAddress(ipaddress.ip_address(host)))
                except ValueError:
                    sans.append(x509.DNSName(host))
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def rsa_key_pair() -> tuple[bytes, bytes]:
    """An RSA private key and its public key in PEM (service-account token signing)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _key_pem(key), public


@dataclass(frozen=True)
class WebhookCerts:
    """Files for the operator's HTTPS webhooks on loopback: `tls.crt`/`tls.key` (serving, for
    127.0.0.1 and localhost, signed by `ca`, also in `ca.crt`) and `client-ca.crt` (the CA of
    the client certificates the API server presents, issued with `client`)."""

    dir: Path
    ca: CertificateAuthority
    client_ca: CertificateAuthority

    def client(self, name: str) -> KeyPair:
        return self.client_ca.issue(name, client=True)

    def path(self, name: str) -> Path:
        return self.dir / name


def webhook_certs(directory: Path) -> WebhookCerts:
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority("kubescribe-webhooks-ca")
    client_ca = CertificateAuthority("kubescribe-webhook-clients-ca")
    serving = ca.issue("kubescribe", hosts=("127.0.0.1", "localhost"))
    for name, data in (
        ("tls.crt", serving.cert_pem),
        ("tls.key", serving.key_pem),
        ("ca.crt", ca.cert_pem),
        ("client-ca.crt", client_ca.cert_pem),
    ):
        (directory / name).write_bytes(data)
    return WebhookCerts(directory, ca, client_ca)
