"""The chart lints, and deploy/kubescribe.yaml is what it renders (needs the cached helm)."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from kubescribe.devenv.cluster import ClusterTools
from kubescribe.devenv.manifests import CHART, DEPLOY, render_deploy

pytestmark = pytest.mark.cluster


def test_helm_lint_passes(tools: ClusterTools) -> None:
    for values in (
        [],
        ["--set=rbac.watch=selected", "--set=replicas=2"],
        ["--set=audit.enabled=true", "--set=admission.enabled=true"],
        ["--set=admission.enabled=true", "--set=certificates.source=cert-manager"],
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


def test_subject_access_reviews_are_granted_only_with_a_tenant_service_account(
    tools: ClusterTools,
) -> None:
    def grants_reviews(*values: str) -> bool:
        done = subprocess.run(
            [str(tools.helm), "template", "kubescribe", str(CHART), *values],
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
