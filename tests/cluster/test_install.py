"""The chart in a real cluster: install, mirror, least privilege, upgrade, SIGTERM, uninstall."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

from kubescribe_devenv.cluster import Cluster
from kubescribe_devenv.controlplane import REPO_ROOT
from tests.cluster.conftest import (
    NAMESPACE,
    Release,
    Repo,
    assert_linear_without_empty_commits,
    data_of,
    record,
)
from tests.manifests import cm_path
from tests.support import wait_condition, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def eventually(rel: Release, check: Callable[[], object], what: str, timeout: float = 90) -> None:
    """wait_for, with the operator's logs in the failure."""
    try:
        wait_for(check, timeout=timeout, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{rel.logs()}") from None


def can(cluster: Cluster, sa: str, verb: str, resource: str, namespace: str = "") -> bool:
    """A SubjectAccessReview for the release's ServiceAccount."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{NAMESPACE}:{sa}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
            "resourceAttributes": {"verb": verb, "resource": resource, "namespace": namespace},
        },
    }
    done = cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(review))
    return bool(json.loads(done.stdout)["status"].get("allowed"))


def test_install_mirror_upgrade_sigterm_uninstall(
    cluster: Cluster, repo: Repo, install: Callable[..., Release]
) -> None:
    ns = "team-a"
    cluster.kubectl("create", "namespace", ns)
    rel = install("ks", f"rbac.secretNamespaces={{{ns}}}")
    [pod] = rel.pods()
    assert pod["spec"]["serviceAccountName"] == rel.service_account
    # least privilege, asked of the API server: no Secrets cluster-wide, only where granted
    assert not can(cluster, rel.service_account, "list", "secrets")
    assert not can(cluster, rel.service_account, "get", "secrets", "default")
    assert can(cluster, rel.service_account, "list", "secrets", ns)
    assert not can(cluster, rel.service_account, "create", "secrets", ns)  # generateKeys off
    assert can(cluster, rel.service_account, "list", "configmaps")

    cluster.kubectl("apply", "-f", "-", input=repo.mirror(ns))
    cluster.kubectl("create", "configmap", "hello", "-n", ns, "--from-literal=greeting=hi")
    eventually(
        rel, lambda: data_of(repo, ns, "hello") == {"greeting": "hi"}, "ConfigMap in Git", 90
    )
    wait_condition(cluster, "gittarget", "mirror", ns, "Ready", "True")  # type: ignore[arg-type]
    # `kubescribe check` from the admin's kubeconfig: the Deployment, and the metrics read from
    # its Pod through the API server's proxy.
    done = subprocess.run(
        [sys.executable, "-m", "kubescribe", "check", "--kubeconfig", str(cluster.kubeconfig),
         "--namespace", NAMESPACE, "-o", "json"],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    lines = {line["check"]: line for line in json.loads(done.stdout)["checks"]}
    assert lines[f"Deployment {NAMESPACE}/{rel.name}-kubescribe"]["status"] == "ok", lines
    assert "Metrics" not in lines, lines["Metrics"]  # read from the Pod
    assert lines[f"GitTarget {ns}/mirror"]["detail"].startswith("Ready; last push"), lines

    # helm upgrade with a changed value while changes keep coming: none is lost
    stop = threading.Event()
    made: list[str] = []

    def churn() -> None:
        i = 0
        while not stop.is_set():
            i += 1
            cluster.kubectl("create", "configmap", f"during-{i}", "-n", ns, f"--from-literal=i={i}")
            made.append(f"during-{i}")
            time.sleep(0.3)

    writer = threading.Thread(target=churn)
    writer.start()
    try:
        t0 = time.monotonic()
        chart = str(REPO_ROOT / "charts" / "kubescribe")
        cluster.helm(
            "upgrade", "ks", chart, "-n", NAMESPACE, "--wait", "--timeout=120s",
            *[f"--set={v}" for v in rel.values], f"--set=rbac.secretNamespaces={{{ns}}}",
            "--set=logLevel=info",
        )  # fmt: skip
        record("helm upgrade --wait (rolling, surge 1)", time.monotonic() - t0)
        wait_for(lambda: len(rel.pods(terminating=True)) == 1, timeout=60, what="old Pod gone")
        time.sleep(0.1)
    finally:
        stop.set()
        writer.join()
    [new_pod] = rel.pods()
    assert new_pod["metadata"]["name"] != pod["metadata"]["name"]
    assert "--log-level=info" in new_pod["spec"]["containers"][0]["args"]
    eventually(
        rel,
        lambda: all(cm_path(ns, n) in repo.remote.files() for n in made),
        "every change made during the upgrade in Git",
        90,
    )

    # SIGTERM to exit: delete the Pod (a change is pending in the window of the next test)
    cluster.kubectl("create", "configmap", "before-sigterm", "-n", ns, "--from-literal=a=1")
    sigterm, exit_code = rel.delete_pod_timed(new_pod["metadata"]["name"])
    record("SIGTERM to exit, one replica (finishedAt, 1 s resolution)", sigterm)
    # The outcome, not a time (a loaded machine is slower): it stopped by itself.
    assert exit_code == 0, f"exit code {exit_code} after {sigterm:.1f}s"
    eventually(
        rel,
        lambda: cm_path(ns, "before-sigterm") in repo.remote.files(),
        "the change pending at SIGTERM",
        60,
    )
    assert_linear_without_empty_commits(repo)

    # uninstall: CRDs, kubescribe objects and the repository stay
    wait_for(rel.ready_pods, timeout=60, what="replacement Pod Ready")
    tip = repo.remote.tip()
    cluster.helm("uninstall", "ks", "-n", NAMESPACE, "--wait", "--timeout=60s")
    wait_for(lambda: not rel.pods(terminating=True), timeout=60, what="Pods gone")
    assert cluster.kubectl("get", "crd", "gittargets.kubescribe.io", check=False).returncode == 0
    assert cluster.kubectl("get", "gittarget", "mirror", "-n", ns, check=False).returncode == 0
    cluster.kubectl("create", "configmap", "after-uninstall", "-n", ns, "--from-literal=a=1")
    assert repo.remote.tip() == tip


def test_watch_selected_reports_watch_forbidden(
    cluster: Cluster, repo: Repo, install: Callable[..., Release]
) -> None:
    ns = "team-b"
    cluster.kubectl("create", "namespace", ns)
    rel = install(
        "sel", "rbac.watch=selected", f"rbac.secretNamespaces={{{ns}}}",
        "rbac.resources[0].apiGroups[0]=", "rbac.resources[0].resources[0]=configmaps",
    )  # fmt: skip
    assert not can(cluster, rel.service_account, "list", "secrets")
    assert not can(cluster, rel.service_account, "list", "services", ns)
    assert can(cluster, rel.service_account, "watch", "configmaps", ns)
    cluster.kubectl("apply", "-f", "-", input=repo.mirror(ns))
    cluster.kubectl("create", "configmap", "granted", "-n", ns, "--from-literal=a=1")
    eventually(rel, lambda: data_of(repo, ns, "granted") == {"a": "1"}, "ConfigMap in Git", 90)
    # a rule for a type the role does not grant
    cluster.kubectl(
        "apply",
        "-f",
        "-",
        input=repo.mirror(ns, {"apiGroups": [""], "resources": ["configmaps", "services"]}),
    )
    t0 = time.monotonic()
    cond = wait_condition(cluster, "gittarget", "mirror", ns, "StreamsRunning", "False",  # type: ignore[arg-type]
                          "WatchForbidden", timeout=30)  # fmt: skip
    record("WatchForbidden shown after the rule changed", time.monotonic() - t0)
    assert "v1/services" in cond["message"]
    wait_condition(cluster, "gittarget", "mirror", ns, "Ready", "False", "WatchForbidden")  # type: ignore[arg-type]
    # the granted type keeps flowing, and the operator stays ready
    cluster.kubectl("create", "configmap", "still-flowing", "-n", ns, "--from-literal=a=1")
    eventually(
        rel,
        lambda: cm_path(ns, "still-flowing") in repo.remote.files(),
        "granted type still mirrored",
        60,
    )
    assert rel.ready_pods()
