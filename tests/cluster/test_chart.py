"""The chart lints, and deploy/kubescribe.yaml is what it renders (needs the cached helm)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from kubescribe.devenv.cluster import ClusterTools
from kubescribe.devenv.controlplane import KUBE_VERSION
from kubescribe.devenv.manifests import CHART, DEPLOY, render_deploy

pytestmark = pytest.mark.cluster


def test_helm_lint_passes(tools: ClusterTools) -> None:
    for values in (
        [],
        ["--set=rbac.watch=selected", "--set=replicas=2"],
        ["--set=audit.enabled=true", "--set=admission.enabled=true"],
        ["--set=admission.enabled=true", "--set=certificates.source=cert-manager"],
        ["--set=redis.url=rediss://redis:6380/0", "--set=redis.existingSecret=r"],
        ["--set=tenantServiceAccount=kubescribe-reader"],
    ):
        done = subprocess.run(
            [str(tools.helm), "lint", "--strict", str(CHART), *values],
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_plain_manifests_are_rendered_from_the_chart(tools: ClusterTools) -> None:
    assert DEPLOY.read_text() == render_deploy(tools.helm), (
        "run: uv run python -m kubescribe.devenv.manifests"
    )


def test_no_secret_is_readable_cluster_wide_in_the_plain_manifests() -> None:
    for doc in yaml.safe_load_all(DEPLOY.read_text()):
        if not doc or doc["kind"] != "ClusterRole":
            continue
        bound_cluster_wide = not doc["metadata"]["name"].endswith("-secrets")
        for rule in doc["rules"]:
            core = "" in rule["apiGroups"] or "*" in rule["apiGroups"]
            if bound_cluster_wide and core:
                assert "secrets" not in rule["resources"], rule
                assert "*" not in rule["resources"], rule


def render(
    tools: ClusterTools, *values: str, chart: Path = CHART
) -> subprocess.CompletedProcess[str]:
    """`helm template` as for the test cluster's Kubernetes (Helm's own default is v1.20)."""
    return subprocess.run(
        [str(tools.helm), "template", "k", str(chart), f"--kube-version={KUBE_VERSION}", *values],
        capture_output=True,
        text=True,
        check=False,
    )


def test_redis_secrets_reach_the_pod_through_the_environment_only(tools: ClusterTools) -> None:
    done = render(
        tools,
        "--set=redis.url=rediss://redis.example:6380/0",
        "--set=redis.existingSecret=kubescribe-redis",
        "--set=redis.keyPrefix=team-a:",
        "--set=redis.caSecret=redis-ca",
    )
    assert done.returncode == 0, done.stderr
    [deployment] = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    args = container["args"]
    assert "--redis-key-prefix=team-a:" in args
    assert "--redis-ca-file=/etc/kubescribe/redis-ca/ca.crt" in args
    assert not [a for a in args if a.startswith("--redis-url")]
    env = {e["name"]: e for e in container["env"]}
    assert env["KUBESCRIBE_REDIS_URL"]["value"] == "rediss://redis.example:6380/0"
    hmac_key = env["KUBESCRIBE_REDIS_HMAC_KEY"]["valueFrom"]["secretKeyRef"]
    assert hmac_key == {"name": "kubescribe-redis", "key": "hmac-key"}
    password = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert password == {"name": "kubescribe-redis", "key": "password", "optional": True}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["redis-ca"] == "/etc/kubescribe/redis-ca"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["redis-ca"]["secret"]["secretName"] == "redis-ca"


def test_redis_without_a_signing_key_secret_or_with_a_password_in_the_url_is_refused(
    tools: ClusterTools,
) -> None:
    no_secret = render(tools, "--set=redis.url=redis://redis:6379/0")
    assert no_secret.returncode != 0
    assert "redis.existingSecret" in no_secret.stderr
    inline = render(
        tools, "--set=redis.url=redis://u:hunter2@redis:6379/0", "--set=redis.existingSecret=s"
    )
    assert inline.returncode != 0
    assert "/redis/url" in inline.stderr
    user_only = render(
        tools, "--set=redis.url=redis://kubescribe@redis:6379/0", "--set=redis.existingSecret=s"
    )
    assert user_only.returncode == 0, user_only.stderr


def test_subject_access_reviews_are_granted_only_with_a_tenant_service_account(
    tools: ClusterTools,
) -> None:
    def grants_reviews(*values: str) -> bool:
        done = subprocess.run(
            [
                str(tools.helm),
                "template",
                "kubescribe",
                str(CHART),
                f"--kube-version={KUBE_VERSION}",
                *values,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        role = next(
            d
            for d in yaml.safe_load_all(done.stdout)
            if d and d["kind"] == "ClusterRole" and d["metadata"]["name"] == "kubescribe"
        )
        return any("subjectaccessreviews" in r["resources"] for r in role["rules"])

    assert not grants_reviews()
    assert grants_reviews("--set=tenantServiceAccount=kubescribe-reader")


def test_the_shutdown_timeout_reaches_the_pod_and_fits_in_its_grace_period(
    tools: ClusterTools,
) -> None:
    done = render(tools, "--set=shutdownTimeout=12", "--set=terminationGracePeriodSeconds=20")
    assert done.returncode == 0, done.stderr
    [deployment] = [d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 20
    assert "--shutdown-timeout=12" in pod["containers"][0]["args"]
    too_long = render(tools, "--set=shutdownTimeout=26")  # the default grace period is 30 s
    assert too_long.returncode != 0
    assert "terminationGracePeriodSeconds" in too_long.stderr
