"""End-to-end fixtures: CRDs installed once per control plane, the operator as a process."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kubescribe.api.crds import render_crds
from kubescribe_devenv.controlplane import AuditWebhook, ControlPlane, free_port
from kubescribe_devenv.httpgit import HttpsGitServer, missing_binaries
from kubescribe_devenv.pki import CertificateAuthority, KeyPair
from tests.manifests import PASSWORD
from tests.support import Operator, operators

pytestmark = pytest.mark.controlplane


@pytest.fixture(scope="session")
def crds(controlplane: ControlPlane) -> ControlPlane:
    controlplane.apply(render_crds())
    controlplane.wait_established(
        *(
            f"{plural}.kubescribe.io"
            for plural in (
                "gitproviders",
                "gittargets",
                "watchrules",
                "clusterwatchrules",
                "commitrequests",
                "clusterproviders",
            )
        )
    )
    return controlplane


@pytest.fixture
def operator(
    crds: ControlPlane, tmp_path: Path, namespace: str
) -> Iterator[Callable[..., Operator]]:
    """Start `kubescribe run` (call it; extra CLI args allowed; file:// remotes allowed unless
    `allow_file_urls=False`). Stopped and cleaned up after."""
    with operators(crds, tmp_path / "operator") as start:
        yield start
    crds.kubectl(
        "delete",
        "gitproviders,gittargets,watchrules,commitrequests",
        "--all",
        "-n",
        namespace,
        "--wait=false",
        check=False,
    )


@pytest.fixture(scope="module")
def https_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpsGitServer]:
    missing = missing_binaries()
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (Debian packages nginx, fcgiwrap)")
    with HttpsGitServer(tmp_path_factory.mktemp("https")) as server:
        server.add_user("writer", PASSWORD)
        server.add_user("reader", PASSWORD, read_only=True)
        yield server


MASTERS = ("--as-group", "system:masters")


@dataclass
class Audited:
    """A control plane whose audit webhook and CommitRequest admission webhook point at the
    operator's ports (the operator is started per test, on these ports)."""

    cp: ControlPlane
    audit_port: int
    webhook_port: int
    certs: Path
    ca: CertificateAuthority
    client_ca: CertificateAuthority
    client: KeyPair

    def flags(self, *, route: str = "local", grace: str = "8") -> list[str]:
        return [
            f"--audit-addr=127.0.0.1:{self.audit_port}",
            f"--audit-tls-cert={self.certs / 'tls.crt'}",
            f"--audit-tls-key={self.certs / 'tls.key'}",
            f"--audit-client-ca={self.certs / 'client-ca.crt'}",
            f"--audit-route={route}",
            f"--attribution-grace={grace}",
            f"--webhook-addr=127.0.0.1:{self.webhook_port}",
            f"--webhook-tls-cert={self.certs / 'tls.crt'}",
            f"--webhook-tls-key={self.certs / 'tls.key'}",
            f"--webhook-client-ca={self.certs / 'client-ca.crt'}",
        ]

    def kubectl_as(self, who: str, *args: str, extra: tuple[str, ...] = ()) -> str:
        flags = ["--as", who, *MASTERS, *(f"--as-user-extra={e}" for e in extra)]
        return self.cp.kubectl(*args, *flags).stdout


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Audited]:
    with audited_plane(tmp_path_factory) as plane:
        yield plane


@contextlib.contextmanager
def audited_plane(
    tmp_path_factory: pytest.TempPathFactory, extra_apiserver_args: tuple[str, ...] = ()
) -> Iterator[Audited]:
    """A started control plane with the operator's CRDs, its audit webhook and CommitRequest
    admission webhook pointed at the ports `Audited.flags` gives the operator."""
    certs = tmp_path_factory.mktemp("attribution-certs")
    ca = CertificateAuthority("kubescribe-webhooks-ca")
    client_ca = CertificateAuthority("kubescribe-audit-clients-ca")
    serving = ca.issue("kubescribe", hosts=("127.0.0.1", "localhost"))
    (certs / "tls.crt").write_bytes(serving.cert_pem)
    (certs / "tls.key").write_bytes(serving.key_pem)
    (certs / "client-ca.crt").write_bytes(client_ca.cert_pem)
    # The names the operator binds by default: route `local`, and the admission webhook.
    client = client_ca.issue("kubescribe-audit-local", client=True)
    admission_client = client_ca.issue("kubescribe-admission", client=True)
    audit_port, webhook_port = free_port(), free_port()
    hook = AuditWebhook(
        url=f"https://127.0.0.1:{audit_port}/audit-webhook/local",
        ca_pem=ca.cert_pem,
        client=client,
        mode="batch",  # blocking mode would stall the apiserver while no operator listens
    )
    cp = ControlPlane(
        audit=hook,
        admission_client=admission_client,
        workdir=tmp_path_factory.mktemp("attribution-cp"),
        keep_workdir=True,
        extra_apiserver_args=extra_apiserver_args,
    )
    cp.start()
    try:
        cp.apply(render_crds())
        cp.wait_established(
            *(
                f"{p}.kubescribe.io"
                for p in ("gitproviders", "gittargets", "watchrules", "commitrequests")
            )
        )
        cp.register_validating_webhook(
            "kubescribe-commitrequests",
            f"https://127.0.0.1:{webhook_port}/validate-commitrequests",
            ca.cert_pem,
            [
                {
                    "apiGroups": ["kubescribe.io"],
                    "apiVersions": ["*"],
                    "operations": ["CREATE"],
                    "resources": ["commitrequests"],
                }
            ],
        )
        yield Audited(cp, audit_port, webhook_port, certs, ca, client_ca, client)
    finally:
        cp.stop()


@pytest.fixture
def ns(audited: Audited) -> str:
    name = f"attr-{uuid.uuid4().hex[:8]}"
    audited.cp.kubectl("create", "namespace", name)
    return name


@pytest.fixture
def start_operator(audited: Audited, tmp_path: Path) -> Iterator[Callable[..., Operator]]:
    with operators(audited.cp, tmp_path / "operator", serving=True) as start:
        yield start
