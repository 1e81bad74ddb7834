"""The chart's NOTES with `certificates.source: cert-manager`: the commands they print for the
cluster administrator are run as printed (bash, kubectl) against a real API server holding
Secrets shaped like cert-manager's, and write every file kube-apiserver's flags then name. In
that mode no `<release>-apiserver-config` Secret exists and the chart renders no audit policy,
so the NOTES must not point at either.

`helm template` does not render NOTES.txt: the test renders it through `tpl` from a copy of
the chart (the NOTES text itself is unchanged)."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from kubescribe_devenv.cluster import ClusterTools
from kubescribe_devenv.controlplane import KUBE_VERSION, ControlPlane
from kubescribe_devenv.manifests import CHART
from kubescribe_devenv.pki import CertificateAuthority

pytestmark = pytest.mark.cluster

RENDER_NOTES = """apiVersion: v1
kind: ConfigMap
metadata:
  name: notes
data:
  notes: |
{{ tpl (.Files.Get "files/notes-under-test.txt") . | indent 4 }}
"""


def notes(tools: ClusterTools, tmp_path: Path, namespace: str, *values: str) -> str:
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "files" / "notes-under-test.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(RENDER_NOTES)
    done = subprocess.run(
        [
            str(tools.helm),
            "template",
            "k",
            str(chart),
            f"--namespace={namespace}",
            f"--kube-version={KUBE_VERSION}",
            "--show-only=templates/zz-notes.yaml",
            *values,
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HELM_CACHE_HOME": str(tmp_path / "helm")},
    )
    assert done.returncode == 0, done.stderr
    text: str = yaml.safe_load(done.stdout)["data"]["notes"]
    return text


def tls_secret(name: str, namespace: str, cert: bytes, key: bytes) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": name, "namespace": namespace},
            "data": {
                "tls.crt": base64.b64encode(cert).decode(),
                "tls.key": base64.b64encode(key).decode(),
                "ca.crt": base64.b64encode(cert).decode(),
            },
        }
    )


def test_cert_manager_notes_write_every_file_kube_apiserver_is_told_to_read(
    tools: ClusterTools, controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    cp = controlplane
    files = tmp_path / "apiserver-files"
    text = notes(
        tools,
        tmp_path,
        namespace,
        "--set=certificates.source=cert-manager",
        "--set=audit.enabled=true",
        "--set=admission.enabled=true",
        f"--set=apiserverConfigDir={files}",
    )
    assert "apiserver-config" not in text
    commands, _, flags = text.partition("and adds to kube-apiserver's flags:")
    script = commands[commands.index(f"  mkdir -p {files}") :]

    ca = CertificateAuthority("k-kubescribe-webhook-ca")
    audit = ca.issue("kubescribe-audit-local", client=True)
    admission = ca.issue("kubescribe-admission", client=True)
    for name, pair in (
        ("k-kubescribe-webhook-ca", (ca.cert_pem, b"unused")),
        ("k-kubescribe-audit-client", (audit.cert_pem, audit.key_pem)),
        ("k-kubescribe-admission-client", (admission.cert_pem, admission.key_pem)),
    ):
        cp.apply(tls_secret(name, namespace, *pair))
    assert cp.bin_dir is not None
    env = {
        **os.environ,
        "PATH": f"{cp.bin_dir}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(cp.kubeconfig),
    }
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr

    named = [
        Path(line.strip().partition("=")[2])
        for line in flags.splitlines()
        if line.strip().startswith("--") and "=" in line and "/" in line
    ]
    assert {p.name for p in named} == {
        "audit-policy.yaml",
        "audit-webhook.kubeconfig",
        "admission-configuration.yaml",
    }
    for path in named:
        assert path.is_file(), f"the NOTES name {path} but do not write it"
    policy = (files / "audit-policy.yaml").read_text()
    assert policy.strip() == (CHART / "files" / "audit-policy.yaml").read_text().strip()
    assert yaml.safe_load(policy)["kind"] == "Policy"

    webhook = yaml.safe_load((files / "audit-webhook.kubeconfig").read_text())
    [cluster] = webhook["clusters"]
    assert cluster["cluster"]["server"].endswith("/audit-webhook/local")
    assert base64.b64decode(cluster["cluster"]["certificate-authority-data"]) == ca.cert_pem
    [user] = webhook["users"]
    assert base64.b64decode(user["user"]["client-certificate-data"]) == audit.cert_pem
    assert base64.b64decode(user["user"]["client-key-data"]) == audit.key_pem
    assert webhook["current-context"] == "kubescribe"

    admission_config = yaml.safe_load((files / "admission-configuration.yaml").read_text())
    assert admission_config["kind"] == "AdmissionConfiguration"
    paths = {p["configuration"]["kubeConfigFile"] for p in admission_config["plugins"]}
    assert paths == {str(files / "admission.kubeconfig")}
    admission_kubeconfig = yaml.safe_load((files / "admission.kubeconfig").read_text())
    [star] = admission_kubeconfig["users"]
    assert star["name"] == "*"
    assert base64.b64decode(star["user"]["client-certificate-data"]) == admission.cert_pem
