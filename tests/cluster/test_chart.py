"""The chart lints, deploy/kubescribe.yaml is what it renders, and what its values render
(CRDs, the change webhook's name and owner, the bootstrap objects; needs the cached helm)."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubescribe.api.crds import crd_manifests
from kubescribe_devenv.cluster import ClusterTools
from kubescribe_devenv.controlplane import KUBE_VERSION
from kubescribe_devenv.manifests import CHART, DEPLOY, render_deploy

pytestmark = pytest.mark.cluster


def test_helm_lint_passes(tools: ClusterTools) -> None:
    for values in (
        [],
        ["--set=rbac.watch=selected", "--set=replicas=2"],
        ["--set=audit.enabled=true", "--set=admission.enabled=true"],
        ["--set=admission.enabled=true", "--set=certificates.source=cert-manager"],
        ["--set=redis.url=rediss://redis:6380/0", "--set=redis.existingSecret=r"],
        ["--set=tenantServiceAccount=kubescribe-reader"],
        ["--set=crds.enabled=false"],
        ["--set=crds.keep=false"],
        [
            "--set=bootstrap.enabled=true",
            "--set=bootstrap.url=git@git.example:org/repo.git",
            "--set=bootstrap.existingSecret=creds",
            "--set=bootstrap.namespace=team-a",
        ],
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
        "run: uv run python -m kubescribe_devenv.manifests"
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


def test_subject_access_reviews_are_granted_only_with_tenant_reads_or_admission(
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
    assert grants_reviews("--set=admission.enabled=true")  # a CommitRequest's spec.author


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


def docs_of(tools: ClusterTools, *values: str) -> list[dict[str, Any]]:
    done = render(tools, "--namespace=ks", *values)
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def test_the_crds_are_templates_kept_on_uninstall_unless_told_otherwise(
    tools: ClusterTools,
) -> None:
    crds = [d for d in docs_of(tools) if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == len(crd_manifests())
    for crd in crds:
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    unkept = [d for d in docs_of(tools, "--set=crds.keep=false") if d["kind"].startswith("Custom")]
    assert len(unkept) == len(crds)
    assert all("annotations" not in d["metadata"] for d in unkept)
    kinds = {d["kind"] for d in docs_of(tools, "--set=crds.enabled=false")}
    assert "CustomResourceDefinition" not in kinds
    assert "Deployment" in kinds


def test_the_change_webhook_is_named_after_the_release_and_owned_by_its_cluster_role(
    tools: ClusterTools,
) -> None:
    for values, full in (([], "k-kubescribe"), (["--set=fullnameOverride=acme"], "acme")):
        docs = docs_of(tools, "--set=admission.enabled=true", *values)
        [deployment] = [d for d in docs if d["kind"] == "Deployment"]
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        assert f"--changes-webhook-name={full}-attribution" in args
        assert f"--owner-cluster-role={full}" in args
        [role] = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == full]
        named = {
            (r["resources"][0], tuple(r["verbs"])): r.get("resourceNames")
            for r in role["rules"]
            if r["apiGroups"] != ["kubescribe.io"]
        }
        assert named[("validatingwebhookconfigurations", ("get", "update", "delete"))] == [
            f"{full}-attribution"
        ]
        assert named[("clusterroles", ("get",))] == [full]
    docs = docs_of(tools, "--set=admission.enabled=true", "--set=admission.changes=false")
    [deployment] = [d for d in docs if d["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [a for a in args if a.startswith(("--changes-webhook", "--owner-cluster-role"))]


BOOTSTRAP = ("--set=bootstrap.enabled=true", "--set=bootstrap.url=ssh://git@git.example/r.git")


def test_bootstrap_makes_the_deploy_key_secret_and_the_three_starter_objects(
    tools: ClusterTools, tmp_path: Path
) -> None:
    key, hosts = tmp_path / "key", tmp_path / "known_hosts"
    key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nabc\n-----END OPENSSH PRIVATE KEY-----\n")
    hosts.write_text("git.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB\n")
    docs = docs_of(
        tools, *BOOTSTRAP, f"--set-file=bootstrap.sshKey={key}",
        f"--set-file=bootstrap.knownHosts={hosts}", "--set=bootstrap.namespace=team-a",
        "--set=bootstrap.provider.push.commitWindow=5s", "--set=bootstrap.branch=audit",
        "--set=bootstrap.target.suspend=true", "--set=bootstrap.rules[0].apiGroups[0]=apps",
        "--set=bootstrap.rules[0].resources[0]=deployments",
    )  # fmt: skip
    starters = {d["kind"]: d for d in docs if d["metadata"].get("namespace") == "team-a"}
    assert set(starters) == {"Secret", "GitProvider", "GitTarget", "WatchRule", "RoleBinding"}
    secret = starters["Secret"]
    assert secret["metadata"]["name"] == "k-kubescribe-deploy-key"
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert data == {"ssh-privatekey": key.read_text(), "known_hosts": hosts.read_text()}
    for kind in ("Secret", "GitProvider", "GitTarget", "WatchRule"):
        hook = starters[kind]["metadata"]["annotations"]["helm.sh/hook"]
        assert hook == "post-install,post-upgrade", kind
    assert starters["GitProvider"]["spec"] == {
        "url": "ssh://git@git.example/r.git",
        "secretRef": {"name": "k-kubescribe-deploy-key"},
        "push": {"commitWindow": "5s"},
    }
    assert starters["GitTarget"]["spec"] == {
        "providerRef": {"name": "k-kubescribe"}, "branch": "audit", "path": ".", "suspend": True,
    }  # fmt: skip
    assert starters["WatchRule"]["spec"] == {
        "targetRef": {"name": "k-kubescribe"},
        "rules": [{"apiGroups": ["apps"], "resources": ["deployments"]}],
    }
    # the operator may read the deploy key: the Secrets role is bound in its namespace
    assert starters["RoleBinding"]["roleRef"]["name"] == "k-kubescribe-secrets"
    # an existing Secret instead of files
    docs = docs_of(tools, *BOOTSTRAP, "--set=bootstrap.existingSecret=my-creds")
    [gp] = [d for d in docs if d["kind"] == "GitProvider"]
    assert gp["spec"]["secretRef"] == {"name": "my-creds"}
    assert gp["metadata"]["namespace"] == "ks"  # the release namespace by default
    assert not [d for d in docs if d["kind"] == "Secret" and "deploy-key" in d["metadata"]["name"]]
    assert "GitProvider" not in {d["kind"] for d in docs_of(tools)}  # off by default


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set=bootstrap.enabled=true"], "bootstrap.url"),
        ([*BOOTSTRAP, "--set=bootstrap.sshKey=k"], "bootstrap.knownHosts is required"),
        (
            [*BOOTSTRAP, "--set=bootstrap.sshKey=k", "--set=bootstrap.knownHosts=h",
             "--set=bootstrap.existingSecret=s"],
            "existingSecret, or sshKey and knownHosts",
        ),
        ([*BOOTSTRAP, "--set=bootstrap.provider.url=x"], "/bootstrap/provider/url"),
        ([*BOOTSTRAP, "--set=bootstrap.target.branch=x"], "/bootstrap/target/branch"),
        (["--set=bootstrap.url=http://git.example/r.git"], "/bootstrap/url"),
        (["--set=bootstrap.namespace=Team_A"], "/bootstrap/namespace"),
        (["--set=bootstrap.rules={}"], "/bootstrap/rules"),
        (["--set=crds.keep=sure"], "/crds/keep"),
    ],
    ids=lambda v: v[-1].removeprefix("--set=") if isinstance(v, list) else "",
)  # fmt: skip
def test_bootstrap_and_crd_values_that_cannot_work_are_refused(
    tools: ClusterTools, values: list[str], message: str
) -> None:
    done = render(tools, *values)
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
