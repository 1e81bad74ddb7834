"""`--webhook-cert-secret`: which flags it replaces, which it needs, what the sites serve."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from click.testing import CliRunner

from kubescribe import cli
from kubescribe.app import managed_certificates
from kubescribe.controller.certrotation import ADMISSION_CLIENT, AUDIT_CLIENT, Policy
from kubescribe.controller.webhookcerts import CertificateOptions
from kubescribe.server.attribution import AttributionOptions

POLICY = Policy(dt.timedelta(days=1), dt.timedelta(days=10), ("webhooks.ns.svc",))


def test_managed_certificates_refuse_certificate_files(tmp_path: Path) -> None:
    pem = tmp_path / "tls.crt"
    pem.write_text("x")
    args = ["run", "--webhook-addr=:9444", "--webhook-cert-secret=certs"]
    result = CliRunner().invoke(cli.main, [*args, f"--webhook-tls-cert={pem}"])
    assert result.exit_code == 2
    assert "drop --webhook-tls-cert" in result.output
    result = CliRunner().invoke(cli.main, args)
    assert result.exit_code == 2
    assert "needs --webhook-cert-host" in result.output


def test_the_sites_serve_the_managed_files_and_clients_are_named(tmp_path: Path) -> None:
    options = AttributionOptions(
        audit_addr=":9443",
        audit_route="prod",
        webhook_addr=":9444",
        changes_webhook_url="https://webhooks.ns.svc:9444/validate-changes",
    )
    served, certs = managed_certificates(
        options, CertificateOptions("ns", "certs", POLICY, tmp_path)
    )
    assert served.problems() == []
    assert served.audit_tls_cert == served.webhook_tls_cert == tmp_path / "tls.crt"
    assert served.audit_tls_key == served.webhook_tls_key == tmp_path / "tls.key"
    cas = {served.audit_client_ca, served.webhook_client_ca, served.changes_webhook_ca}
    assert cas == {tmp_path / "ca.crt"}
    assert certs.clients == {
        AUDIT_CLIENT: "kubescribe-audit-prod",
        ADMISSION_CLIENT: "kubescribe-admission",
    }
    bound = AttributionOptions(audit_addr=":9443", audit_route="prod=apiserver-a,apiserver-b")
    _, certs = managed_certificates(bound, CertificateOptions("ns", "certs", POLICY, tmp_path))
    assert certs.clients == {AUDIT_CLIENT: "apiserver-a"}
