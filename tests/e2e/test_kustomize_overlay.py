"""An overlay as root: the objects it inherits from a base reached through `..` are read-only,
their changes are written into the overlay's kustomization, the base stays byte-identical, and
`kustomize build` of the committed overlay equals the live objects."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubescribe.mirror.yamlfmt import dump_yaml, order_document
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.kustomized import mirror_kustomized
from tests.support import Operator, manifest, wait_condition, wait_for

pytestmark = pytest.mark.controlplane

OVERLAY = "mirror/overlays/prod/kustomization.yaml"
OVERLAY_KUSTOMIZATION = "# production\nresources:\n- ../../base\n"
BASE_KUSTOMIZATION = "resources:\n- deployment.yaml\n- settings.yaml\n"


def base_files(ns: str) -> dict[str, str]:
    web = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
            },
        },
    }
    settings = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": ns},
        "data": {"a": "1"},
    }
    return {
        "mirror/base/kustomization.yaml": BASE_KUSTOMIZATION,
        "mirror/base/deployment.yaml": dump_yaml(order_document(web)),
        "mirror/base/settings.yaml": dump_yaml(order_document(settings)),
    }


@pytest.fixture
def overlay(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    kbin: Path,
) -> Callable[[str], None]:
    """A base and an overlay of it as the target's root, mirrored; returns a step that waits
    until `kustomize build` of the overlay equals the live objects."""
    cp, ns = crds, namespace
    base = base_files(ns)
    files = {**base, OVERLAY: OVERLAY_KUSTOMIZATION}
    spec = {"root": "overlays/prod"}
    built = mirror_kustomized(cp, ns, remote, operator, kbin, files, ["mirror/overlays/prod"], spec)

    def in_step(what: str) -> None:
        built(what)
        assert {p: remote.read(p) for p in base} == base  # the base is read-only
        wait_condition(cp, "gittarget", "mirror", ns, "RenderMatchesLive", "True")

    in_step("the snapshot")
    return in_step


def test_an_inherited_image_and_scale_become_overlay_entries(
    crds: ControlPlane, namespace: str, remote: BareRemote, overlay: Callable[[str], None]
) -> None:
    cp, ns = crds, namespace
    expected = {
        "forest": False,
        "root": "overlays/prod/kustomization.yaml",
        "roots": [
            {"kustomization": "overlays/prod/kustomization.yaml", "documents": 2, "kinds": kinds}
            for kinds in (["ConfigMap", "Deployment.apps"],)
        ],
        "plainDocuments": 0,
        "inherited": {
            "documents": 2,
            "objects": [f"ConfigMap {ns}/settings", f"Deployment.apps {ns}/web"],
        },
    }

    def placement() -> Any:
        return cp.get_json("gittarget", "mirror", "-n", ns)["status"].get("placement")

    wait_for(lambda: placement() == expected, what=f"status.placement == {expected}")
    cp.kubectl("set", "image", "deployment/web", "-n", ns, "web=nginx:1.29")
    overlay("an image update")
    images = "images:\n- name: nginx\n  newTag: '1.29'\n"
    assert remote.read(OVERLAY) == OVERLAY_KUSTOMIZATION + images

    cp.kubectl("scale", "deployment/web", "-n", ns, "--replicas=3")
    overlay("a scale")
    replicas = "replicas:\n- name: web\n  count: 3\n"
    assert remote.read(OVERLAY) == OVERLAY_KUSTOMIZATION + images + replicas

    # the overlay's own entries are updated in place from then on
    cp.kubectl(
        "set", "image", "deployment/web", "-n", ns, "web=registry.example/nginx@sha256:" + "a" * 64
    )
    cp.kubectl("scale", "deployment/web", "-n", ns, "--replicas=2")
    overlay("a second image update and scale")
    images = (
        f"images:\n- name: nginx\n  newName: registry.example/nginx\n  digest: sha256:{'a' * 64}\n"
    )
    assert (
        remote.read(OVERLAY)
        == OVERLAY_KUSTOMIZATION + images + "replicas:\n- name: web\n  count: 2\n"
    )


def test_other_changes_of_an_inherited_object_are_a_patch_of_the_overlay(
    crds: ControlPlane, namespace: str, remote: BareRemote, overlay: Callable[[str], None]
) -> None:
    cp, ns = crds, namespace
    cp.kubectl("patch", "configmap", "settings", "-n", ns, "-p", '{"data":{"mode":"slow"}}')
    overlay("a ConfigMap update")
    settings = f"mirror/overlays/prod/patches/{ns}/configmap_settings.yaml"
    assert remote.read(settings) == (
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n"
        f"  namespace: {ns}\ndata:\n  mode: slow\n"
    )
    listed = f"patches:\n- path: patches/{ns}/configmap_settings.yaml\n"
    assert remote.read(OVERLAY) == OVERLAY_KUSTOMIZATION + listed

    cp.kubectl("set", "env", "deployment/web", "-n", ns, "MODE=fast")
    cp.kubectl("patch", "configmap", "settings", "-n", ns, "-p", '{"data":{"mode":"fast"}}')
    overlay("a Deployment and a second ConfigMap update")
    web = f"mirror/overlays/prod/patches/{ns}/deployment.apps_web.yaml"
    assert remote.read(web) == (
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n"
        f"  namespace: {ns}\nspec:\n  template:\n    spec:\n      containers:\n"
        "      - env:\n        - name: MODE\n          value: fast\n        name: web\n"
    )
    assert remote.read(settings).endswith("data:\n  mode: fast\n")
    listed += f"- path: patches/{ns}/deployment.apps_web.yaml\n"
    assert remote.read(OVERLAY) == OVERLAY_KUSTOMIZATION + listed

    # back as the base renders it: the patch goes, and its entry
    remove = '[{"op":"remove","path":"/data/mode"}]'
    cp.kubectl("patch", "configmap", "settings", "-n", ns, "--type=json", "-p", remove)
    overlay("a ConfigMap back to the base")
    assert settings not in remote.files()
    listed = f"patches:\n- path: patches/{ns}/deployment.apps_web.yaml\n"
    assert remote.read(OVERLAY) == OVERLAY_KUSTOMIZATION + listed


def test_an_inherited_object_deleted_live_is_a_delete_patch_until_it_is_back(
    crds: ControlPlane, namespace: str, remote: BareRemote, overlay: Callable[[str], None]
) -> None:
    cp, ns = crds, namespace
    cp.kubectl("scale", "deployment/web", "-n", ns, "--replicas=2")
    overlay("a scale")
    cp.kubectl("delete", "configmap", "settings", "-n", ns)
    cp.kubectl("delete", "deployment", "web", "-n", ns)
    overlay("two deletes")
    settings = f"mirror/overlays/prod/patches/{ns}/configmap_settings.yaml"
    web = f"mirror/overlays/prod/patches/{ns}/deployment.apps_web.yaml"
    assert remote.read(settings) == (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\n"
        "$patch: delete\n"
    )
    assert remote.read(web).startswith("apiVersion: apps/v1\nkind: Deployment\n")
    listed = (
        f"patches:\n- path: patches/{ns}/configmap_settings.yaml\n"
        f"- path: patches/{ns}/deployment.apps_web.yaml\n"
    )
    # the replicas entry goes with the workload (kustomize fails on one that matches nothing)
    assert remote.read(OVERLAY) == OVERLAY_KUSTOMIZATION + listed

    # re-created as the base has it: its patch goes
    settings_doc = yaml.safe_load(remote.read("mirror/base/settings.yaml"))
    cp.apply(manifest(settings_doc))
    overlay("a re-create")
    assert settings not in remote.files()
    assert remote.read(OVERLAY) == OVERLAY_KUSTOMIZATION + (
        f"patches:\n- path: patches/{ns}/deployment.apps_web.yaml\n"
    )
