"""`kubescribe check` against a real control plane: green on a healthy install, and each fault
named on its own line: a CRD missing, a webhook certificate expired, audit not wired, Redis
down, a remote not writable, RBAC forbidding a watched type."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from kubescribe.api.crds import render_crds
from kubescribe_devenv.controlplane import free_port
from kubescribe_devenv.gitremote import BareRemote
from kubescribe_devenv.httpgit import HttpsGitServer
from kubescribe_devenv.redis import RedisServer
from tests.e2e.conftest import Audited
from tests.manifests import CM_RULE, PASSWORD, https_secret, provider, target, watch_rule
from tests.support import Operator, manifest, wait_condition, wait_for, wait_ready

pytestmark = pytest.mark.controlplane

DEPLOY = Path(__file__).parents[2] / "deploy" / "kubescribe.yaml"
SERVICES = {"apiGroups": [""], "resources": ["services"]}


def check(audited: Audited, op: Operator, ns: str) -> tuple[int, dict[str, dict[str, Any]]]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kubescribe",
            "check",
            "--kubeconfig",
            str(audited.cp.kubeconfig),
            "--namespace",
            ns,
            "--operator-url",
            f"http://127.0.0.1:{op.metrics_port}",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert "Traceback" not in done.stderr, done.stderr
    report = json.loads(done.stdout)
    assert report["ok"] is (done.returncode == 0)
    return done.returncode, {line["check"]: line for line in report["checks"]}


def sample(op: Operator, name: str) -> float | None:
    for line in op.metrics().splitlines():
        if line.startswith(name):
            return float(line.rsplit(" ", 1)[1])
    return None


@pytest.fixture
def ns(audited: Audited) -> Iterator[str]:
    name = f"check-{uuid.uuid4().hex[:8]}"
    audited.cp.kubectl("create", "namespace", name)
    yield name
    audited.cp.kubectl(
        "delete", "gitproviders,gittargets,watchrules", "--all", "-n", name, check=False
    )


def test_a_healthy_install_is_all_green(
    audited: Audited,
    ns: str,
    start_operator: Callable[..., Operator],
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    remote = BareRemote.create(tmp_path / "remote.git")
    op = start_operator(*audited.flags(), f"--redis-url={redis_server.url}")
    audited.cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror"),
            watch_rule("cms", ns, "mirror", CM_RULE),
        )
    )
    wait_ready(audited.cp, ns)
    audited.cp.kubectl("create", "configmap", "hello", "-n", ns, "--from-literal=k=v")
    wait_for(
        lambda: (sample(op, "kubescribe_audit_last_event_timestamp_seconds") or 0) > 0,
        timeout=60,
        what="an audit event",
    )
    wait_for(lambda: sample(op, "kubescribe_redis_up") == 1, timeout=60, what="Redis up")
    code, lines = check(audited, op, ns)
    assert code == 0, [line for line in lines.values() if line["status"] != "ok"]
    assert {line["status"] for line in lines.values()} == {"ok"}
    for name in ("Audit", "Redis", "RBAC", f"GitProvider {ns}/git", f"GitTarget {ns}/mirror"):
        assert name in lines
    assert "Webhook kubescribe-commitrequests.kubescribe.io" in lines
    assert lines[f"GitTarget {ns}/mirror"]["detail"].startswith("Ready; last push")


def expired_ca() -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "expired-ca")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=10))
        .not_valid_after(now - dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def limited_user(audited: Audited, user: str) -> Path:
    """A user with the chart's ClusterRole, ConfigMaps and Secrets: Services are not granted."""
    base = next(
        d
        for d in yaml.safe_load_all(DEPLOY.read_text())
        if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "kubescribe"
    )
    cms = {
        "apiGroups": [""],
        "resources": ["configmaps", "secrets"],
        "verbs": ["get", "list", "watch"],
    }
    rbac = "rbac.authorization.k8s.io"
    audited.cp.apply(
        manifest(
            {
                "apiVersion": f"{rbac}/v1",
                "kind": "ClusterRole",
                "metadata": {"name": user},
                "rules": [*base["rules"], cms],
            },
            {
                "apiVersion": f"{rbac}/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": user},
                "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": user},
                "subjects": [{"apiGroup": rbac, "kind": "User", "name": user}],
            },
        )
    )
    return audited.cp.user_kubeconfig(user)


def test_each_fault_is_named_on_its_own_line(
    audited: Audited, ns: str, https_server: HttpsGitServer, tmp_path: Path
) -> None:
    cp = audited.cp
    user = f"limited-{ns[-8:]}"
    hook = f"kubescribe-expired-{ns[-8:]}"
    flags = [
        *audited.flags(),
        f"--audit-addr=127.0.0.1:{free_port()}",  # the API server posts its audit elsewhere
        f"--redis-url=redis://127.0.0.1:{free_port()}",  # nothing listens: Redis is down
    ]
    cp.register_validating_webhook(
        hook,
        f"https://127.0.0.1:{audited.webhook_port}/validate-commitrequests",
        expired_ca(),
        [
            {
                "apiGroups": ["example.com"],
                "apiVersions": ["*"],
                "operations": ["CREATE"],
                "resources": ["nothing"],
            }
        ],
    )
    op = Operator(cp, tmp_path / "operator", *flags)
    op.kubeconfig = limited_user(audited, user)
    op.start()
    try:
        wait_for(op.metrics, timeout=30, what="the operator's metrics endpoint")
        repo = https_server.create_repo(f"{ns}-ro")
        cp.apply(
            manifest(
                https_secret("git-creds", ns, https_server, "reader", PASSWORD),
                provider(
                    "git", ns, https_server.url_for(repo.path.name), secretRef={"name": "git-creds"}
                ),
                target("mirror", ns, "git", "mirror"),
                watch_rule("svcs", ns, "mirror", SERVICES),
                watch_rule("cms", ns, "mirror", CM_RULE),
            )
        )
        cp.kubectl("create", "configmap", "refused", "-n", ns, "--from-literal=a=1")
        wait_condition(cp, "gitprovider", "git", ns, "Writable", "False", "PermissionDenied")
        wait_condition(cp, "watchrule", "svcs", ns, "StreamsRunning", "False", "WatchForbidden")
        wait_for(lambda: sample(op, "kubescribe_redis_up") == 0, timeout=60, what="Redis down")
        code, lines = check(audited, op, ns)
    finally:
        op.stop()
        cp.kubectl("delete", "validatingwebhookconfiguration", hook, check=False)
        cp.kubectl("delete", "clusterrolebinding,clusterrole", user, check=False)
    assert code == 1
    expired = lines[f"Webhook {hook}.kubescribe.io"]
    assert (expired["status"], expired["detail"]) == ("fail", "CA certificate expired 24 h ago")
    assert lines["Audit"]["status"] == "fail"
    assert lines["Audit"]["detail"].startswith("audit not wired")
    assert lines["Redis"]["status"] == "fail"
    assert lines["Redis"]["detail"].startswith("unreachable (facts)")
    provider_line = lines[f"GitProvider {ns}/git"]
    assert provider_line["status"] == "fail"
    assert provider_line["detail"].startswith("Writable=False PermissionDenied")
    rbac = lines[f"RBAC {ns}/svcs"]
    assert rbac["status"] == "fail"
    assert f"core/v1/services in {ns}" in rbac["detail"]
    assert lines["Webhook kubescribe-commitrequests.kubescribe.io"]["status"] == "ok"


def test_a_missing_crd_is_named_with_its_fix(
    audited: Audited, ns: str, start_operator: Callable[..., Operator]
) -> None:
    op = start_operator(*audited.flags())
    cp = audited.cp
    cp.kubectl("delete", "crd", "commitrequests.kubescribe.io")
    try:
        code, lines = check(audited, op, ns)
    finally:
        cp.apply(render_crds())
        cp.wait_established("commitrequests.kubescribe.io")
    assert code == 1
    line = lines["CRD commitrequests.kubescribe.io"]
    assert (line["status"], line["detail"]) == ("fail", "not installed")
    assert "kubescribe crds" in line["fix"]
    assert lines["CRD gittargets.kubescribe.io"]["status"] == "ok"
