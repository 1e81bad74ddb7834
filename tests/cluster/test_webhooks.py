"""The chart's audit receiver and admission webhook, wired the way its NOTES tell a cluster
administrator: kube-apiserver restarted with the files from the chart's Secret; a change by a
user is committed with that user as author, and a CommitRequest names its requester."""

from __future__ import annotations

import base64
import json
import subprocess
from collections.abc import Callable

import pytest

from kubescribe.devenv.cluster import NODE_IP, Cluster
from tests.cluster.conftest import NAMESPACE, Release, Repo
from tests.manifests import commit_request
from tests.support import wait_condition, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def test_audit_and_admission_wired_from_the_charts_artifacts(
    cluster: Cluster, repo: Repo, install: Callable[..., Release]
) -> None:
    ns = "team-d"
    cluster.kubectl("create", "namespace", ns)
    confdir = cluster.workdir / "kubescribe-apiserver"
    install(
        "att", f"rbac.secretNamespaces={{{ns}}}", "audit.enabled=true", "admission.enabled=true",
        "audit.hostPort=9443", "admission.hostPort=9444", f"certificates.extraSANs={{{NODE_IP}}}",
        f"audit.url=https://{NODE_IP}:9443/audit-webhook/local",
        f"admission.url=https://{NODE_IP}:9444/validate-commitrequests",
        f"apiserverConfigDir={confdir}",
    )  # fmt: skip
    # the administrator's part: files from the Secret, kube-apiserver flags
    secret = cluster.get_json("secret", "att-kubescribe-apiserver-config", "-n", NAMESPACE)
    confdir.mkdir()
    for name, value in secret["data"].items():
        (confdir / name).write_bytes(base64.b64decode(value))
    cluster.restart_apiserver(
        f"--audit-policy-file={confdir}/audit-policy.yaml",
        f"--audit-webhook-config-file={confdir}/audit-webhook.kubeconfig",
        "--audit-webhook-batch-max-wait=1s",
        f"--admission-control-config-file={confdir}/admission-configuration.yaml",
    )
    hook = cluster.get_json("validatingwebhookconfiguration", "att-kubescribe-commitrequests")
    assert hook["webhooks"][0]["clientConfig"]["caBundle"]

    alice = cluster.user_kubeconfig("alice")
    for verbs, resource in (("create,update,patch,get", "configmaps"),
                            ("create,get", "commitrequests.kubescribe.io")):  # fmt: skip
        role = resource.split(".")[0]
        cluster.kubectl(
            "create", "role", role, "-n", ns, f"--verb={verbs}", f"--resource={resource}"
        )
        cluster.kubectl("create", "rolebinding", role, "-n", ns, f"--role={role}", "--user=alice")
    attributed = {"mode": "attributed-author"}
    cluster.kubectl("apply", "-f", "-", input=repo.mirror(ns, attribution=attributed))
    wait_condition(cluster, "gittarget", "mirror", ns, "Ready", "True", timeout=90)  # type: ignore[arg-type]

    def as_alice(*args: str, stdin: str | None = None) -> None:
        assert cluster.tools is not None
        subprocess.run(
            [str(cluster.tools.kubectl), f"--kubeconfig={alice}", *args],
            input=stdin, text=True, capture_output=True, check=True,
        )  # fmt: skip

    as_alice("create", "configmap", "by-alice", "-n", ns, "--from-literal=a=1")

    def alices_commit() -> dict[str, str] | None:
        return next((c for c in repo.remote.log() if "by-alice" in c["message"]), None)

    commit = wait_for(alices_commit, timeout=60, what="the commit of alice's change")
    assert commit["author"] == "alice", commit
    assert commit["committer"] != "alice"

    as_alice("create", "-f", "-", stdin=json.dumps(
        commit_request(ns, "mirror", "Save by alice", name="save-1")))  # fmt: skip
    cond = wait_condition(cluster, "commitrequest", "save-1", ns, "AuthorAttributed", "True")  # type: ignore[arg-type]
    assert "alice" in cond["message"]
