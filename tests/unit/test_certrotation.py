"""Operator-managed webhook certificates: when to renew, what to trust (no I/O)."""

from __future__ import annotations

import base64
import datetime as dt
import json

from cryptography import x509

from kubescribe.controller.certrotation import (
    ADMISSION_CLIENT,
    AUDIT_CLIENT,
    Issued,
    Material,
    Policy,
    advance,
    apiserver_files,
    client_needs_issue,
    issue_client,
    next_due,
)

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)
HOSTS = ("kubescribe-webhooks.system.svc", "10.0.0.7")
POLICY = Policy(serving_validity=90 * DAY, ca_validity=3000 * DAY, hosts=HOSTS)


def created() -> Material:
    m, events = advance(None, T0, POLICY)
    assert events == ["created"]
    return m


def pems(bundle: bytes) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(bundle)


def test_a_missing_secret_gets_a_ca_and_a_serving_certificate_for_the_hosts() -> None:
    m = created()
    assert m.serving.issued_by(m.ca)
    assert m.serving.names() == tuple(sorted(HOSTS))
    assert m.serving.not_after == T0 + 90 * DAY
    assert m.ca.not_after == T0 + 3000 * DAY
    assert m.serving.not_before <= T0  # backdated for clock skew
    assert [c.subject for c in pems(m.bundle(T0))] == [m.ca.cert.subject]
    assert m.next_ca is None
    assert m.previous_ca is None


def test_nothing_changes_before_two_thirds_of_the_serving_life() -> None:
    m = created()
    for later in (T0, T0 + 30 * DAY, m.serving.at(2 / 3) - dt.timedelta(seconds=1)):
        kept, events = advance(m, later, POLICY)
        assert (kept, events) == (m, [])


def test_the_serving_certificate_is_renewed_at_two_thirds_and_the_ca_kept() -> None:
    m = created()
    due = m.serving.at(2 / 3)
    assert next_due(m, T0, POLICY) == due
    renewed, events = advance(m, due, POLICY)
    assert events == ["serving_expiring"]
    assert renewed.ca == m.ca
    assert renewed.serving.fingerprint != m.serving.fingerprint
    assert renewed.serving.issued_by(m.ca)
    assert renewed.serving.not_after == due + 90 * DAY
    assert renewed.bundle(due) == m.bundle(due)  # caBundle unchanged: nothing to re-patch


def test_new_hosts_or_a_shorter_validity_reissue_the_serving_certificate() -> None:
    m = created()
    more = Policy(POLICY.serving_validity, POLICY.ca_validity, (*HOSTS, "node.example"))
    renewed, events = advance(m, T0 + DAY, more)
    assert events == ["serving_hosts_changed"]
    assert "node.example" in renewed.serving.names()
    shorter = Policy(dt.timedelta(seconds=60), POLICY.ca_validity, HOSTS)
    renewed, events = advance(m, T0 + DAY, shorter)
    assert events == ["serving_validity_shortened"]
    assert renewed.serving.not_after == T0 + DAY + dt.timedelta(seconds=60)


def test_a_serving_certificate_never_outlives_its_ca() -> None:
    m = created()
    late = m.ca.at(0.99)
    m2, _ = advance(m, late, Policy(POLICY.serving_validity, POLICY.ca_validity, HOSTS, 2 / 3, 1.5))
    assert m2.serving.not_after <= m2.ca.not_after


def test_a_ca_rollover_trusts_both_cas_before_the_new_one_signs() -> None:
    m = created()
    stage = m.ca.at(2 / 3)
    staged, events = advance(m, stage, POLICY)
    assert "ca_staged" in events
    assert staged.ca == m.ca
    assert staged.next_ca is not None
    assert staged.serving.issued_by(m.ca)  # still signed by the current CA
    subjects = [c.subject for c in pems(staged.bundle(stage))]
    assert subjects == [m.ca.cert.subject, staged.next_ca.cert.subject]

    promote = m.ca.at(5 / 6)
    assert next_due(staged, stage, POLICY) <= promote
    promoted, events = advance(staged, promote, POLICY)
    assert events[:2] == ["ca_promoted", "serving_issuer_changed"]
    assert promoted.ca.fingerprint == staged.next_ca.fingerprint
    assert promoted.serving.issued_by(promoted.ca)
    assert promoted.previous_ca is not None
    assert promoted.previous_ca.fingerprint == m.ca.fingerprint
    assert promoted.previous_ca.key_pem == b""  # the old CA signs nothing any more
    # replicas still serving the old certificate verify until they reload
    subjects = [c.subject for c in pems(promoted.bundle(promote))]
    assert subjects == [promoted.ca.cert.subject, m.ca.cert.subject]

    expired = m.ca.not_after
    dropped, events = advance(promoted, expired, POLICY)
    assert "ca_dropped" in events
    assert dropped.previous_ca is None
    assert [c.subject for c in pems(dropped.bundle(expired))] == [promoted.ca.cert.subject]


def test_client_certificates_change_only_with_the_signing_ca() -> None:
    m = created()
    client = issue_client(m.ca, "kubescribe-admission", T0, POLICY)
    assert client.not_after == m.ca.not_after  # as long as the CA: a person installs it
    assert not client_needs_issue(client, m, T0 + 1000 * DAY)
    assert client_needs_issue(None, m, T0)
    staged, _ = advance(m, m.ca.at(2 / 3), POLICY)
    assert not client_needs_issue(client, staged, m.ca.at(2 / 3))
    promoted, _ = advance(staged, m.ca.at(5 / 6), POLICY)
    assert client_needs_issue(client, promoted, m.ca.at(5 / 6))


def test_secret_data_round_trips_and_broken_data_is_replaced() -> None:
    m = created()
    staged, _ = advance(m, m.ca.at(2 / 3), POLICY)
    promoted, _ = advance(staged, m.ca.at(5 / 6), POLICY)
    for material in (m, staged, promoted):
        data = material.to_data(T0)
        assert Material.from_data(data) == material
        assert base64.b64decode(data["ca-bundle.crt"]) == material.bundle(T0)
    assert Material.from_data(None) is None
    assert Material.from_data({}) is None
    data = m.to_data(T0)
    assert Material.from_data({**data, "tls.crt": "not base64!"}) is None
    assert Material.from_data({**data, "tls.crt": base64.b64encode(b"junk").decode()}) is None
    other, _ = advance(None, T0, POLICY)
    wrong_key = {**data, "tls.key": other.to_data(T0)["tls.key"]}
    assert Material.from_data(wrong_key) is None
    assert Material.from_data({k: v for k, v in data.items() if k != "ca.key"}) is None


def test_kube_apiserver_files_trust_every_trusted_ca() -> None:
    m = created()
    staged, _ = advance(m, m.ca.at(2 / 3), POLICY)
    bundle = staged.bundle(T0)
    clients = {
        AUDIT_CLIENT: issue_client(m.ca, "kubescribe-audit-local", T0, POLICY),
        ADMISSION_CLIENT: issue_client(m.ca, "kubescribe-admission", T0, POLICY),
    }
    static = {"audit-policy.yaml": b"kind: Policy\n"}
    url = "https://kubescribe-webhooks.system.svc:9443/audit-webhook/local"
    files = apiserver_files(static, bundle, clients, url)
    assert files["audit-policy.yaml"] == b"kind: Policy\n"
    assert files["ca.crt"] == bundle
    audit = json.loads(files["audit-webhook.kubeconfig"])
    cluster = audit["clusters"][0]["cluster"]
    assert cluster["server"] == url
    assert base64.b64decode(cluster["certificate-authority-data"]) == bundle
    user = audit["users"][0]["user"]
    assert base64.b64decode(user["client-certificate-data"]) == files["audit-client.crt"]
    cert = Issued.parse(files["audit-client.crt"], files["audit-client.key"])
    assert cert.issued_by(m.ca)
    admission = json.loads(files["admission.kubeconfig"])
    assert admission["users"][0]["name"] == "*"
    assert "clusters" not in admission
    admission_only = {ADMISSION_CLIENT: clients[ADMISSION_CLIENT]}
    without_audit = apiserver_files(static, bundle, admission_only, "")
    assert "audit-webhook.kubeconfig" not in without_audit
