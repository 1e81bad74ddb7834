"""The chart's life cycle in a real cluster: `helm upgrade` brings a new CRD field (the CRDs
are templates), `helm uninstall` leaves the CRDs (crds.keep) and no webhook configuration the
operator registered, the bootstrap values make starter objects that mirror at once, and an
install whose CRDs came from a crds/ folder upgrades as docs/install.md says."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kubescribe.api.crds import crd_manifests, render_crds
from kubescribe_devenv.cluster import NODE_IP, Cluster
from kubescribe_devenv.manifests import CHART, render_crd_template
from tests.cluster.conftest import NAMESPACE, Image, Release, Repo, record
from tests.manifests import provider
from tests.support import wait_condition, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]
CRDS = [f"{c['spec']['names']['plural']}.kubescribe.io" for c in crd_manifests()]


def chart_with_a_new_provider_field(tmp_path: Path) -> Path:
    """A copy of the chart whose GitProvider CRD has spec.note (a new string field)."""
    chart = tmp_path / "kubescribe"
    shutil.copytree(CHART, chart)
    crds = crd_manifests()
    [gp] = [c for c in crds if c["spec"]["names"]["kind"] == "GitProvider"]
    spec = gp["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["note"] = {"type": "string", "description": "A field of the next version."}
    (chart / "templates" / "crds.yaml").write_text(render_crd_template(crds))
    return chart


def gp_with_note(ns: str) -> str:
    obj = provider("noted", ns, "ssh://git@git.example/r.git")
    obj["spec"]["note"] = "from the next version"
    return json.dumps(obj)


def test_helm_upgrade_brings_a_new_crd_field_and_uninstall_keeps_the_crds(
    cluster: Cluster, install: Callable[..., Release], tmp_path: Path
) -> None:
    ns = "crd-upgrade"
    cluster.kubectl("create", "namespace", ns)
    rel = install("crdup")
    for crd in CRDS:
        live = cluster.get_json("crd", crd)
        assert live["metadata"]["annotations"]["meta.helm.sh/release-name"] == "crdup"
        assert live["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    refused = cluster.kubectl("create", "-f", "-", input=gp_with_note(ns), check=False)
    assert refused.returncode != 0
    assert 'unknown field "spec.note"' in refused.stderr, refused.stderr

    chart = chart_with_a_new_provider_field(tmp_path)
    values = [f"--set={v}" for v in rel.values]
    t0 = time.monotonic()
    cluster.helm("upgrade", "crdup", str(chart), "-n", NAMESPACE, "--wait", "--timeout=120s",
                 *values)  # fmt: skip
    live = cluster.get_json("crd", "gitproviders.kubescribe.io")
    schema = live["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema["properties"]["spec"]["properties"]["note"]["type"] == "string"

    def accepted() -> bool:  # the API server serves the new schema a moment after the update
        done = cluster.kubectl("create", "-f", "-", input=gp_with_note(ns), check=False)
        return done.returncode == 0

    wait_for(accepted, timeout=30, what="a GitProvider with spec.note accepted")
    record("helm upgrade --wait to a new CRD field, until an object using it is accepted",
           time.monotonic() - t0)  # fmt: skip
    stored = cluster.get_json("gitprovider", "noted", "-n", ns)
    assert stored["spec"]["note"] == "from the next version"
    cluster.kubectl("delete", "gitprovider", "noted", "-n", ns)

    # back to this version: the field goes again
    cluster.helm("upgrade", "crdup", str(CHART), "-n", NAMESPACE, "--wait", "--timeout=120s",
                 *values)  # fmt: skip
    live = cluster.get_json("crd", "gitproviders.kubescribe.io")
    schema = live["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert "note" not in schema["properties"]["spec"]["properties"]

    cluster.helm("uninstall", "crdup", "-n", NAMESPACE, "--wait", "--timeout=60s")
    for crd in CRDS:
        assert cluster.kubectl("get", "crd", crd, check=False).returncode == 0, crd


def webhook_configurations(cluster: Cluster, prefix: str) -> list[str]:
    names = []
    for kind in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
        items = cluster.get_json(kind)["items"]
        names += [f"{kind}/{i['metadata']['name']}" for i in items]
    return [n for n in names if n.split("/", 1)[1].startswith(prefix)]


def test_uninstall_leaves_no_webhook_configuration(
    cluster: Cluster, repo: Repo, install: Callable[..., Release]
) -> None:
    ns = "hooks-gone"
    cluster.kubectl("create", "namespace", ns)
    rel = install("hooks", f"rbac.secretNamespaces={{{ns}}}", "admission.enabled=true")
    cluster.kubectl("apply", "-f", "-", input=repo.mirror(ns))
    registered = "hooks-kubescribe-attribution"

    def owned_registration() -> dict[str, Any] | None:
        done = cluster.kubectl(
            "get", "validatingwebhookconfiguration", registered, "-o", "json", check=False
        )
        return json.loads(done.stdout) if done.returncode == 0 else None

    found = wait_for(owned_registration, timeout=90, what="the operator's registration")
    role = cluster.get_json("clusterrole", "hooks-kubescribe")
    [owner] = found["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"]) == ("ClusterRole", "hooks-kubescribe")
    assert owner["uid"] == role["metadata"]["uid"]
    assert "kubescribe-attribution" not in {
        n.split("/", 1)[1] for n in webhook_configurations(cluster, "")
    }  # the name of a run without the chart is left to such runs
    assert sorted(webhook_configurations(cluster, "hooks-")) == [
        "validatingwebhookconfigurations/hooks-kubescribe-attribution",
        "validatingwebhookconfigurations/hooks-kubescribe-commitrequests",
    ]

    t0 = time.monotonic()
    cluster.helm("uninstall", "hooks", "-n", NAMESPACE, "--wait", "--timeout=60s")
    wait_for(
        lambda: webhook_configurations(cluster, "hooks-") == [],
        timeout=60,
        what="no webhook configuration of the release (garbage collected)",
    )
    record("helm uninstall until no webhook configuration is left", time.monotonic() - t0)
    wait_for(lambda: not rel.pods(terminating=True), timeout=60, what="Pods gone")
    assert webhook_configurations(cluster, "hooks-") == []  # not registered again on the way out


def test_bootstrap_values_make_starter_objects_that_mirror(
    cluster: Cluster, repo: Repo, install: Callable[..., Release], tmp_path: Path
) -> None:
    ns = "starter"
    cluster.kubectl("create", "namespace", ns)
    key, known_hosts = tmp_path / "deploy-key", tmp_path / "known_hosts"
    key.write_text(repo.private_key)
    known_hosts.write_text(f"[{NODE_IP}]:{repo.server.port} {repo.server.host_public_key}\n")
    rel = install(
        "boot", "bootstrap.enabled=true", f"bootstrap.namespace={ns}", f"bootstrap.url={repo.url}",
        "bootstrap.path=clusters/test", "bootstrap.provider.push.commitWindow=0s",
        files={"bootstrap.sshKey": key, "bootstrap.knownHosts": known_hosts},
    )  # fmt: skip
    name = "boot-kubescribe"
    secret = cluster.get_json("secret", f"{name}-deploy-key", "-n", ns)
    assert set(secret["data"]) == {"ssh-privatekey", "known_hosts"}
    for kind in ("gitprovider", "gittarget"):
        wait_condition(cluster, kind, name, ns, "Ready", "True", timeout=90)  # type: ignore[arg-type]
    rule = cluster.get_json("watchrule", name, "-n", ns)
    [only] = rule["spec"]["rules"]  # the default rule (plus the CRD's defaults)
    assert (only["apiGroups"], only["resources"]) == ([""], ["configmaps"])
    cluster.kubectl("create", "configmap", "first", "-n", ns, "--from-literal=a=1")

    def mirrored() -> bool:
        files = repo.remote.files()
        return f"clusters/test/{ns}/core/configmaps/first.yaml" in files

    try:
        wait_for(mirrored, timeout=90, what="the ConfigMap in Git")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{rel.logs()}") from None

    # an upgrade neither overwrites nor duplicates them (created only when missing)
    cluster.kubectl("patch", "gittarget", name, "-n", ns, "--type=merge",
                    "-p", '{"spec":{"suspend":true}}')  # fmt: skip
    cluster.helm(
        "upgrade", "boot", str(CHART), "-n", NAMESPACE, "--wait", "--timeout=120s",
        *[f"--set={v}" for v in rel.values],
        f"--set-file=bootstrap.sshKey={key}", f"--set-file=bootstrap.knownHosts={known_hosts}",
    )  # fmt: skip
    assert cluster.get_json("gittarget", name, "-n", ns)["spec"]["suspend"] is True

    # uninstall: the starter objects are the user's now, and stay
    cluster.helm("uninstall", "boot", "-n", NAMESPACE, "--wait", "--timeout=60s")
    for kind in ("gitprovider", "gittarget", "watchrule"):
        assert cluster.kubectl("get", kind, name, "-n", ns, check=False).returncode == 0


def crd_ref(name: str) -> str:
    return f"customresourcedefinition.apiextensions.k8s.io/{name}"  # as `kubectl get -o name`


def test_an_install_whose_crds_came_from_the_crds_folder_upgrades_once_they_are_marked(
    cluster: Cluster, image: Image, tmp_path: Path
) -> None:
    """The upgrade note of docs/install.md: CRDs a chart installed from crds/ have no Helm
    ownership; the first upgrade to templated CRDs is refused until they are marked."""
    old = tmp_path / "kubescribe"
    shutil.copytree(CHART, old)
    (old / "templates" / "crds.yaml").unlink()
    (old / "crds").mkdir()
    (old / "crds" / "kubescribe.yaml").write_text(render_crds())
    for crd in CRDS:  # as that chart leaves them: no Helm ownership
        if cluster.kubectl("get", "crd", crd, check=False).returncode == 0:
            cluster.kubectl("label", "crd", crd, "app.kubernetes.io/managed-by-")
            ownership = ("meta.helm.sh/release-name-", "meta.helm.sh/release-namespace-")
            cluster.kubectl("annotate", "crd", crd, *ownership, "helm.sh/resource-policy-")
    common = [
        *("-n", NAMESPACE, "--wait", "--timeout=120s"),
        f"--set=image.repository={image.repository}",
        f"--set=image.tag={image.tag}",
        "--set=image.pullPolicy=Never",
    ]
    try:
        cluster.helm("install", "old", str(old), "--create-namespace", *common)
        refused = cluster.helm("upgrade", "old", str(CHART), *common, check=False)
        assert refused.returncode != 0
        assert "invalid ownership metadata" in refused.stderr, refused.stderr
        for crd in CRDS:  # the loop of docs/install.md
            cluster.kubectl(
                "label", crd_ref(crd), "app.kubernetes.io/managed-by=Helm", "--overwrite"
            )
            ownership = (
                "meta.helm.sh/release-name=old",
                f"meta.helm.sh/release-namespace={NAMESPACE}",
            )
            cluster.kubectl("annotate", crd_ref(crd), *ownership, "--overwrite")
        cluster.helm("upgrade", "old", str(CHART), *common)
        for crd in CRDS:
            annotations = cluster.get_json("crd", crd)["metadata"]["annotations"]
            assert annotations["helm.sh/resource-policy"] == "keep"
            assert annotations["meta.helm.sh/release-name"] == "old"
    finally:
        cluster.helm("uninstall", "old", "-n", NAMESPACE, "--wait", "--timeout=60s", check=False)
    for crd in CRDS:
        assert cluster.kubectl("get", "crd", crd, check=False).returncode == 0, crd
