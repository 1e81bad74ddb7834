"""Kustomize-aware write-back end to end: a base + overlay repository stays a folder that
`kustomize build` renders into exactly the live objects, after every change made in the API."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kubescribe.mirror.yamlfmt import dump_yaml, order_document
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.kustomized import live, mirror_kustomized, rendered
from tests.manifests import provider, target, watch_rule
from tests.support import Operator, condition, manifest, metric, wait_condition, wait_for

pytestmark = pytest.mark.controlplane

OVERLAY = "mirror/overlays/prod"

BASE_KUSTOMIZATION = """\
# Shared by every environment.
resources:
  - settings.yaml  # app settings
  - web.yaml
"""


def overlay_kustomization(ns: str) -> str:
    return f"""\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: {ns}  # set by the overlay
namePrefix: prod-
resources:
  - ../../base
images:
  # pinned by the release process
  - name: nginx
    newTag: "1.27"
replicas:
  - name: web
    count: 2
"""


def base_files() -> dict[str, str]:
    web = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.25"}]},
            },
        },
    }
    settings = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"mode": "fast"},
    }
    return {
        "mirror/base/kustomization.yaml": BASE_KUSTOMIZATION,
        "mirror/base/web.yaml": dump_yaml(order_document(web)),
        "mirror/base/settings.yaml": dump_yaml(order_document(settings)),
    }


def test_base_and_overlay_follow_the_cluster(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    kbin: Path,
) -> None:
    cp, ns = crds, namespace
    files = {**base_files(), f"{OVERLAY}/kustomization.yaml": overlay_kustomization(ns)}
    kz = {"root": "overlays/prod"}
    in_step = mirror_kustomized(cp, ns, remote, operator, kbin, files, [OVERLAY], kz)
    in_step("the snapshot")

    cp.kubectl("create", "configmap", "prod-extra", "-n", ns, "--from-literal=a=1")
    in_step("a create")
    overlay = remote.read(f"{OVERLAY}/kustomization.yaml")
    assert f"  - ../../base\n  - {ns}/core/configmaps/extra.yaml\n" in overlay

    cp.kubectl("create", "deployment", "prod-api", "-n", ns, "--image=busybox:1.36")
    in_step("a Deployment create")
    assert f"  - {ns}/apps/deployments/api.yaml\n" in remote.read(f"{OVERLAY}/kustomization.yaml")

    cp.kubectl("patch", "configmap", "prod-extra", "-n", ns, "-p", '{"data":{"mode":"slow"}}')
    in_step("an update")
    assert "mode: slow" in remote.read(f"{OVERLAY}/{ns}/core/configmaps/extra.yaml")

    cp.kubectl("set", "image", "deployment/prod-web", "-n", ns, "web=nginx:1.28")
    in_step("an image update")
    assert '    newTag: "1.28"\n' in remote.read(f"{OVERLAY}/kustomization.yaml")
    assert "image: nginx:1.25" in remote.read("mirror/base/web.yaml")

    cp.kubectl("scale", "deployment/prod-web", "-n", ns, "--replicas=4")
    in_step("a scale")
    assert "  - name: web\n    count: 4\n" in remote.read(f"{OVERLAY}/kustomization.yaml")
    assert "replicas: 1\n" in remote.read("mirror/base/web.yaml")

    cp.kubectl("delete", "configmap", "prod-extra", "-n", ns)
    in_step("a delete")
    cp.kubectl("delete", "deployment", "prod-api", "-n", ns)
    in_step("a Deployment delete")
    cp.kubectl("delete", "deployment", "prod-web", "-n", ns)
    in_step("a workload delete")

    overlay = remote.read(f"{OVERLAY}/kustomization.yaml")
    # the inherited workload: a `$patch: delete` of the overlay, the base untouched
    assert overlay == overlay_kustomization(ns).replace('"1.27"', '"1.28"').replace(
        "replicas:\n  - name: web\n    count: 2\n", ""
    ) + (f"patches:\n  - path: patches/{ns}/deployment.apps_web.yaml\n")
    assert remote.read("mirror/base/kustomization.yaml") == BASE_KUSTOMIZATION
    assert remote.read(f"{OVERLAY}/patches/{ns}/deployment.apps_web.yaml").endswith(
        "$patch: delete\n"
    )
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "True")
    render = condition(cp, "gittarget", "mirror", ns, "RenderMatchesLive")
    assert render is not None
    assert render["status"] == "True"  # the operator's own render check agrees


GENERATOR_KUSTOMIZATION = """\
namespace: {ns}
resources:
  - plain.yaml
configMapGenerator:
  - name: generated
    literals: [greeting=hello]
"""


def test_generated_configmap_is_reported_and_nothing_breaks_the_build(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    kbin: Path,
) -> None:
    cp, ns = crds, namespace
    plain = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}}
    kustomization = GENERATOR_KUSTOMIZATION.format(ns=ns)
    remote.commit_foreign("mirror/kustomization.yaml", kustomization, "generator")
    remote.commit_foreign("mirror/plain.yaml", dump_yaml(order_document(plain)), "plain")
    cp.apply(manifest(*rendered(remote, kbin, ["mirror"]).values()))
    generated = next(n for _, n in live(cp, ns) if n.startswith("generated-"))
    operator()
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror"),
            watch_rule("rule", ns, "mirror", {"apiGroups": [""], "resources": ["configmaps"]}),
        )
    )
    cond = wait_condition(
        cp, "gittarget", "mirror", ns, "RenderMatchesLive", "False", "KustomizeUnsupported"
    )
    assert f"ConfigMap {ns}/{generated}" in cond["message"]
    assert "configMapGenerator generated" in cond["message"]
    tip = remote.tip()

    cp.kubectl("patch", "configmap", generated, "-n", ns, "-p", '{"data":{"greeting":"bye"}}')
    cp.kubectl("create", "configmap", "marker", "-n", ns, "--from-literal=m=1")
    wait_for(
        lambda: "marker.yaml" in remote.read("mirror/kustomization.yaml"), what="marker listed"
    )
    assert not any(generated in f for f in remote.files())
    assert remote.tip() != tip
    docs = rendered(remote, kbin, ["mirror"])  # still builds
    assert ("ConfigMap", "marker") in docs
    ready = condition(cp, "gittarget", "mirror", ns, "Ready")
    assert ready is not None
    assert ready["reason"] == "KustomizeUnsupported"


def test_render_check_without_a_kustomize_binary_says_it_could_not_run(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No `--kustomize` and none on PATH: `RenderMatchesLive` is Unknown with
    `RenderCheckUnavailable` (not a True no check stands behind), and the mirror still writes."""
    cp, ns = crds, namespace
    monkeypatch.delenv("KUBESCRIBE_KUSTOMIZE", raising=False)
    path = [d for d in os.environ["PATH"].split(os.pathsep) if not Path(d, "kustomize").exists()]
    monkeypatch.setenv("PATH", os.pathsep.join(path))
    remote.commit_foreign("mirror/kustomization.yaml", "resources:\n  - plain.yaml\n", "root")
    plain = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "plain"}}
    remote.commit_foreign("mirror/plain.yaml", dump_yaml(order_document(plain)), "plain")
    op = operator()
    cp.apply(
        manifest(
            provider("git", ns, remote.url),
            target("mirror", ns, "git", "mirror", kustomize={"renderCheck": True}),
            watch_rule("rule", ns, "mirror", {"apiGroups": [""], "resources": ["configmaps"]}),
        )
    )
    cond = wait_condition(
        cp, "gittarget", "mirror", ns, "RenderMatchesLive", "Unknown", "RenderCheckUnavailable"
    )
    assert "no kustomize binary" in cond["message"]
    assert "--kustomize" in cond["message"]

    cp.kubectl("create", "configmap", "settings", "-n", ns, "--from-literal=mode=fast")
    wait_for(
        lambda: "settings.yaml" in remote.read("mirror/kustomization.yaml"),
        what="the new ConfigMap written through the kustomization",
    )
    wait_for(
        lambda: metric(op, "kubescribe_render_checks_total", 'result="unavailable"') >= 1,
        what="the change counted as not checked",
    )
    wait_condition(cp, "gittarget", "mirror", ns, "Ready", "True")  # the mirror is not blocked
    state = condition(cp, "gittarget", "mirror", ns, "RenderMatchesLive") or {}
    assert (state.get("status"), state.get("reason")) == ("Unknown", "RenderCheckUnavailable")
