"""Operator-managed webhook certificates: what to issue, when to renew, what to trust. Pure.

A long-lived CA of the operator signs a short-lived serving certificate (audit receiver and
admission webhook) and the client certificates kube-apiserver presents. Kept in one Secret:

* the serving certificate is renewed at 2/3 of its life (`Policy.renew_fraction`), when its
  names change, when the configured validity became shorter, or when another CA signs now;
* the CA is rolled over without a gap: at 2/3 of its life a *next* CA is staged (trusted
  next to the current one in every `caBundle` and client CA, signing nothing yet); at 5/6 it
  becomes the signer (serving and client certificates are reissued) and the old CA stays
  trusted as *previous* until it expires. So kube-apiserver's files, which hold the bundle,
  must be refreshed once between staging and the old CA's expiry (the last sixth of its life
  and more: the files hold the next CA from the moment it is staged).
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_NAME = "kubescribe-webhook-ca"
SERVING_NAME = "kubescribe-webhooks"
MAX_BACKDATE = dt.timedelta(minutes=5)  # tolerated clock skew between nodes

# What a CA key may do: sign certificates and CRLs (and, as a signature key, nothing else).
CA_KEY_USAGE = x509.KeyUsage(
    digital_signature=True,
    key_cert_sign=True,
    crl_sign=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    encipher_only=False,
    decipher_only=False,
)


@dataclass(frozen=True)
class Policy:
    serving_validity: dt.timedelta
    ca_validity: dt.timedelta
    hosts: tuple[str, ...]  # DNS names and IP addresses of the serving certificate
    renew_fraction: float = 2 / 3
    promote_fraction: float = 5 / 6


@dataclass(frozen=True)
class Issued:
    """A certificate (PEM) with its private key (PEM; empty for a CA kept only as trusted)."""

    cert_pem: bytes
    key_pem: bytes
    cert: x509.Certificate

    @classmethod
    def parse(cls, cert_pem: bytes, key_pem: bytes = b"") -> Issued:
        """Raises ValueError on anything that is not one PEM certificate (and matching key)."""
        cert = x509.load_pem_x509_certificate(cert_pem)
        if key_pem:
            key = serialization.load_pem_private_key(key_pem, password=None)
            if key.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            ) != cert.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            ):
                raise ValueError("the private key does not match the certificate")
        return cls(cert_pem, key_pem, cert)

    @property
    def not_before(self) -> dt.datetime:
        return self.cert.not_valid_before_utc

    @property
    def not_after(self) -> dt.datetime:
        return self.cert.not_valid_after_utc

    @property
    def fingerprint(self) -> str:
        return self.cert.fingerprint(hashes.SHA256()).hex()

    def at(self, fraction: float) -> dt.datetime:
        """The moment `fraction` of the certificate's life has passed."""
        return self.not_before + (self.not_after - self.not_before) * fraction

    def issued_by(self, ca: Issued) -> bool:
        try:
            self.cert.verify_directly_issued_by(ca.cert)
        except (ValueError, TypeError, InvalidSignature):
            return False
        return True

    def names(self) -> tuple[str, ...]:
        try:
            sans = self.cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        except x509.ExtensionNotFound:
            return ()
        dns = sans.value.get_values_for_type(x509.DNSName)
        ips = [str(ip) for ip in sans.value.get_values_for_type(x509.IPAddress)]
        return tuple(sorted({*dns, *ips}))


@dataclass(frozen=True)
class Material:
    """What the certificate Secret holds."""

    ca: Issued  # signs
    serving: Issued
    next_ca: Issued | None = None  # staged: trusted, signs nothing yet
    previous_ca: Issued | None = None  # replaced: trusted until it expires (no key kept)

    def trusted(self, now: dt.datetime) -> list[Issued]:
        """The CAs to trust, the signer first; expired ones are left out."""
        return [ca for ca in (self.ca, self.next_ca, self.previous_ca) if ca and ca.not_after > now]

    def bundle(self, now: dt.datetime) -> bytes:
        """`caBundle` and client CA: every trusted CA, PEM."""
        return b"".join(_pem_line(ca.cert_pem) for ca in self.trusted(now))

    def to_data(self, now: dt.datetime) -> dict[str, str]:
        """Secret `data` (base64). `ca-bundle.crt` is derived, for consumers of the Secret."""
        raw = {
            "ca.crt": self.ca.cert_pem,
            "ca.key": self.ca.key_pem,
            "tls.crt": self.serving.cert_pem,
            "tls.key": self.serving.key_pem,
            "ca-bundle.crt": self.bundle(now),
        }
        if self.next_ca is not None:
            raw["ca-next.crt"], raw["ca-next.key"] = self.next_ca.cert_pem, self.next_ca.key_pem
        if self.previous_ca is not None:
            raw["ca-previous.crt"] = self.previous_ca.cert_pem
        return {k: base64.b64encode(v).decode() for k, v in raw.items()}

    @classmethod
    def from_data(cls, data: Mapping[str, str] | None) -> Material | None:
        """None when the Secret has no usable material (missing or broken keys)."""
        if not data:
            return None
        try:
            raw = {k: base64.b64decode(v, validate=True) for k, v in data.items()}
            ca = Issued.parse(raw["ca.crt"], raw["ca.key"])
            serving = Issued.parse(raw["tls.crt"], raw["tls.key"])
            next_ca = (
                Issued.parse(raw["ca-next.crt"], raw["ca-next.key"])
                if "ca-next.crt" in raw
                else None
            )
            previous = Issued.parse(raw["ca-previous.crt"]) if "ca-previous.crt" in raw else None
        except (KeyError, ValueError, TypeError):
            return None
        return cls(ca, serving, next_ca, previous)


def advance(
    material: Material | None, now: dt.datetime, policy: Policy
) -> tuple[Material, list[str]]:
    """The material to hold at `now`, and why it changed (empty: keep what is there)."""
    events: list[str] = []
    if material is None:
        ca = issue_ca(now, policy.ca_validity)
        return Material(ca, issue_serving(ca, now, policy)), ["created"]
    m = material
    if m.previous_ca is not None and m.previous_ca.not_after <= now:
        m = replace(m, previous_ca=None)
        events.append("ca_dropped")
    if m.next_ca is None and now >= m.ca.at(policy.renew_fraction):
        m = replace(m, next_ca=issue_ca(now, policy.ca_validity))
        events.append("ca_staged")
    if m.next_ca is not None and now >= m.ca.at(policy.promote_fraction):
        m = Material(m.next_ca, m.serving, None, _cert_only(m.ca))
        events.append("ca_promoted")
    if reason := serving_renewal(m, now, policy):
        m = replace(m, serving=issue_serving(m.ca, now, policy))
        events.append(f"serving_{reason}")
    return m, events


def serving_renewal(m: Material, now: dt.datetime, policy: Policy) -> str:
    """Why the serving certificate must be reissued now ('' = it need not)."""
    serving = m.serving
    if not serving.issued_by(m.ca):
        return "issuer_changed"
    if serving.names() != tuple(sorted(set(policy.hosts))):
        return "hosts_changed"
    if now >= serving.at(policy.renew_fraction):
        return "expiring"
    if serving.not_after > now + policy.serving_validity + MAX_BACKDATE:
        return "validity_shortened"
    return ""


def next_due(m: Material, now: dt.datetime, policy: Policy) -> dt.datetime:
    """When `advance` will next change something (for the loop's sleep)."""
    moments = [m.serving.at(policy.renew_fraction)]
    if m.next_ca is None:
        moments.append(m.ca.at(policy.renew_fraction))
    else:
        moments.append(m.ca.at(policy.promote_fraction))
    if m.previous_ca is not None:
        moments.append(m.previous_ca.not_after)
    return max(now, min(moments))


def client_needs_issue(current: Issued | None, m: Material, now: dt.datetime) -> bool:
    """A client certificate for kube-apiserver is (re)issued only when missing, not from the
    signing CA (a CA rollover: its holder must refresh kube-apiserver's files), or expired."""
    return current is None or not current.issued_by(m.ca) or current.not_after <= now


# -- issuing ---------------------------------------------------------------------------------


def _backdate(validity: dt.timedelta) -> dt.timedelta:
    return min(MAX_BACKDATE, validity / 10)


def issue_ca(now: dt.datetime, validity: dt.timedelta) -> Issued:
    key = ec.generate_private_key(ec.SECP256R1())
    # A name per generation: the next CA must not be confused with the current one.
    name = _name(f"{CA_NAME}-{now.strftime('%Y%m%d%H%M%S')}")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - _backdate(validity))
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            CA_KEY_USAGE,
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return _issued(cert, key)


def issue_serving(ca: Issued, now: dt.datetime, policy: Policy) -> Issued:
    """A serving certificate for `policy.hosts`, never outliving its CA."""
    sans: list[x509.GeneralName] = []
    for host in sorted(set(policy.hosts)):
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            sans.append(x509.DNSName(host))
    extensions: list[x509.ExtensionType] = [x509.SubjectAlternativeName(sans)] if sans else []
    return _leaf(ca, SERVING_NAME, ExtendedKeyUsageOID.SERVER_AUTH, now, policy, extensions)


def issue_client(ca: Issued, common_name: str, now: dt.datetime, policy: Policy) -> Issued:
    """A client certificate valid as long as its CA: kube-apiserver holds it in files that a
    person installs, so it changes only with a CA rollover."""
    return _leaf(ca, common_name, ExtendedKeyUsageOID.CLIENT_AUTH, now, policy, [], client=True)


def _leaf(
    ca: Issued,
    common_name: str,
    usage: x509.ObjectIdentifier,
    now: dt.datetime,
    policy: Policy,
    extensions: Iterable[x509.ExtensionType],
    *,
    client: bool = False,
) -> Issued:
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    validity = policy.ca_validity if client else policy.serving_validity
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(max(now - _backdate(validity), ca.not_before))
        .not_valid_after(min(now + validity, ca.not_after))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
    )
    for extension in extensions:
        builder = builder.add_extension(extension, critical=False)
    return _issued(builder.sign(ca_key, hashes.SHA256()), key)


def _issued(cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> Issued:
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return Issued(cert.public_bytes(serialization.Encoding.PEM), key_pem, cert)


def _cert_only(ca: Issued) -> Issued:
    return Issued(ca.cert_pem, b"", ca.cert)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_line(pem: bytes) -> bytes:
    return pem if pem.endswith(b"\n") else pem + b"\n"


# -- kube-apiserver's files ------------------------------------------------------------------

AUDIT_CLIENT = "audit-client"
ADMISSION_CLIENT = "admission-client"


def apiserver_files(
    static: Mapping[str, bytes],
    bundle: bytes,
    clients: Mapping[str, Issued],
    audit_url: str,
) -> dict[str, bytes]:
    """The files a cluster administrator installs for kube-apiserver: `static` ones (audit
    policy, AdmissionConfiguration) as they are, the client certificates, and kubeconfigs
    that trust `bundle` (every CA the operator trusts, so a CA rollover keeps working)."""
    files = dict(static)
    for name, issued in clients.items():
        files[f"{name}.crt"], files[f"{name}.key"] = issued.cert_pem, issued.key_pem
    if (audit := clients.get(AUDIT_CLIENT)) is not None and audit_url:
        files["audit-webhook.kubeconfig"] = _kubeconfig(
            {"server": audit_url, "certificate-authority-data": _b64(bundle)}, audit, "kubescribe"
        )
    if (admission := clients.get(ADMISSION_CLIENT)) is not None:
        files["admission.kubeconfig"] = _kubeconfig(None, admission, "*")
    files["ca.crt"] = bundle
    return files


def _kubeconfig(cluster: dict[str, str] | None, user: Issued, user_name: str) -> bytes:
    credentials = {
        "client-certificate-data": _b64(user.cert_pem),
        "client-key-data": _b64(user.key_pem),
    }
    config: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [{"name": user_name, "user": credentials}],
    }
    if cluster is not None:
        config |= {
            "clusters": [{"name": "kubescribe", "cluster": cluster}],
            "contexts": [
                {"name": "kubescribe", "context": {"cluster": "kubescribe", "user": user_name}}
            ],
            "current-context": "kubescribe",
        }
    return json.dumps(config, indent=2, sort_keys=True).encode() + b"\n"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
