"""One operator mirrors two real clusters into one repository, each cluster's authors from its
own audit stream; a cluster that goes away keeps its files; untrusted kubeconfigs are refused."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from kubescribe.api.crds import render_crds
from kubescribe_devenv.controlplane import AuditWebhook, ControlPlane, free_port
from kubescribe_devenv.gitremote import BareRemote, git
from kubescribe_devenv.pki import webhook_certs
from tests.manifests import CM_RULE, provider, secret, target, watch_rule
from tests.support import Operator, manifest, operators, stays, wait_condition, wait_for

pytestmark = pytest.mark.controlplane

API = "kubescribe.io/v1alpha1"


@dataclass
class Clusters:
    first: ControlPlane  # the operator's own cluster
    second: ControlPlane
    audit_flags: list[str]


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    certs = webhook_certs(tmp_path_factory.mktemp("clusters-certs"))
    port = free_port()
    planes = []
    for route in ("local", "second"):
        hook = AuditWebhook(
            url=f"https://127.0.0.1:{port}/audit-webhook/{route}",
            ca_pem=certs.ca.cert_pem,
            client=certs.client(f"kubescribe-audit-{route}"),
            mode="batch",
        )
        planes.append(
            ControlPlane(
                audit=hook, workdir=tmp_path_factory.mktemp(f"cp-{route}"), keep_workdir=True
            )
        )
    try:
        for cp in planes:
            cp.start()
        first, second = planes
        first.apply(render_crds())
        first.wait_established()
        flags = [
            f"--audit-addr=127.0.0.1:{port}",
            f"--audit-tls-cert={certs.path('tls.crt')}",
            f"--audit-tls-key={certs.path('tls.key')}",
            f"--audit-client-ca={certs.path('client-ca.crt')}",
            "--audit-route=local",
            "--audit-extra-route=second",
            "--attribution-grace=8",
        ]
        yield Clusters(first, second, flags)
    finally:
        for cp in planes:
            cp.stop()


@pytest.fixture
def start_operator(clusters: Clusters, tmp_path: Path) -> Iterator[Callable[..., Operator]]:
    with operators(clusters.first, tmp_path / "operator", *clusters.audit_flags) as start:
        yield start


def cluster_provider(name: str, ns: str, secret_name: str, **spec: object) -> dict[str, object]:
    return {
        "apiVersion": API,
        "kind": "ClusterProvider",
        "metadata": {"name": name},
        "spec": {"kubeconfigSecretRef": {"namespace": ns, "name": secret_name}, **spec},
    }


def creator(remote: BareRemote, path: str) -> str:
    """The author of the commit that added `path`."""
    return git("log", "--format=%an", remote.branch, "--", path, cwd=remote.path).split("\n")[-2]


def test_two_clusters_into_one_repository_with_their_own_authors(
    clusters: Clusters, start_operator: Callable[..., Operator], tmp_path: Path
) -> None:
    first, second = clusters.first, clusters.second
    ns, remote_ns = f"mc-{uuid.uuid4().hex[:6]}", f"team-{uuid.uuid4().hex[:6]}"
    first.kubectl("create", "namespace", ns)
    second.kubectl("create", "namespace", remote_ns)
    remote = BareRemote.create(tmp_path / "remote.git")
    kubeconfig = second.kubeconfig.read_text()
    name = f"second-{uuid.uuid4().hex[:6]}"
    first.apply(
        manifest(
            secret("second-kubeconfig", ns, {"kubeconfig": kubeconfig}),
            cluster_provider(
                name, ns, "second-kubeconfig", allowedNamespaces=[ns], auditRoute="second"
            ),
            provider("git", ns, remote.url, attribution={"mode": "attributed-author"}),
            target("local", ns, "git", "clusters/local"),
            target(
                "second",
                ns,
                "git",
                "clusters/second",
                placement={"default": "{cluster}/{namespace}/{resource}/{name}.yaml"},
            ),
            watch_rule("local", ns, "local", CM_RULE),
            {
                **watch_rule("second", ns, "second", {**CM_RULE, "sourceNamespace": remote_ns}),
                "spec": {
                    "targetRef": {"name": "second"},
                    "clusterRef": {"name": name},
                    "rules": [{**CM_RULE, "sourceNamespace": remote_ns}],
                },
            },
        )
    )
    start_operator()
    for name_ in ("local", "second"):  # streams running: what follows are changes, not snapshots
        wait_condition(first, "gittarget", name_, ns, "StreamsRunning", "True", timeout=90)
    masters = ("--as-group", "system:masters")
    first.kubectl(
        "create", "configmap", "here", "-n", ns, "--from-literal=k=v", "--as", "alice", *masters
    )
    second.kubectl(
        "create",
        "configmap",
        "there",
        "-n",
        remote_ns,
        "--from-literal=k=v",
        "--as",
        "bob",
        *masters,
    )
    here = f"clusters/local/{ns}/core/configmaps/here.yaml"
    there = f"clusters/second/{name}/{remote_ns}/configmaps/there.yaml"
    wait_for(lambda: {here, there} <= set(remote.files()), timeout=90, what="both clusters")
    wait_condition(first, "clusterprovider", name, "", "SourceClusterReachable", "True")
    assert creator(remote, here) == "alice"
    assert creator(remote, there) == "bob"  # from the second cluster's audit route only

    # The second cluster goes away for 60 s: nothing of it is swept, and status says why.
    second.pause()
    try:
        wait_condition(
            first, "clusterprovider", name, "", "SourceClusterReachable", "False", timeout=30
        )
        wait_condition(first, "gittarget", "second", ns, "SourceClusterReachable", "False")
        deadline = time.monotonic() + 60
        stays(lambda: there in remote.files(), seconds=deadline - time.monotonic(), what="kept")
    finally:
        second.resume()
    second.kubectl(
        "patch", "configmap", "there", "-n", remote_ns, "-p", '{"data":{"k":"back"}}',
        "--as", "bob", *masters,
    )  # fmt: skip
    wait_for(
        lambda: yaml.safe_load(remote.read(there))["data"] == {"k": "back"},
        timeout=90,
        what="the second cluster's change after it came back",
    )
    assert there in remote.files()
    wait_condition(first, "clusterprovider", name, "", "SourceClusterReachable", "True")


def test_a_kubeconfig_with_an_exec_plugin_is_refused_with_a_reason(
    clusters: Clusters, start_operator: Callable[..., Operator]
) -> None:
    first = clusters.first
    ns = f"mc-{uuid.uuid4().hex[:6]}"
    first.kubectl("create", "namespace", ns)
    config = json.loads(clusters.second.kubeconfig.read_text())
    config["users"][0]["user"] = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/sh"}
    }
    name = f"evil-{uuid.uuid4().hex[:6]}"
    first.apply(
        manifest(
            secret("evil", ns, {"kubeconfig": json.dumps(config)}),
            cluster_provider(name, ns, "evil", allowedNamespaces=[ns]),
        )
    )
    start_operator()
    refused = wait_condition(
        first, "clusterprovider", name, "", "SourceClusterReachable", "False", "KubeconfigRefused"
    )
    assert "exec" in refused["message"]
    ready = wait_condition(first, "clusterprovider", name, "", "Ready", "False")
    assert ready["reason"] == "KubeconfigRefused"
    stalled = wait_condition(first, "clusterprovider", name, "", "Stalled", "True")
    assert base64.b64encode(b"/bin/sh").decode() not in stalled["message"]
