"""A folder of several kustomizations, one per app directory (with no kustomization above
them, or a root listing them): each object is written through the kustomization that renders
it, a new one goes where its siblings are, each `resources:` list follows, no object is written
into two of them, and `kustomize build` of the committed tree equals the live objects."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kubescribe.mirror.yamlfmt import dump_yaml, order_document
from kubescribe_devenv.controlplane import ControlPlane
from kubescribe_devenv.gitremote import BareRemote
from tests.kustomized import mirror_kustomized
from tests.support import Operator, manifest, wait_condition, wait_for

pytestmark = pytest.mark.controlplane

WEB = "mirror/apps/web/kustomization.yaml"
API = "mirror/apps/api/kustomization.yaml"
WEB_KUSTOMIZATION = "resources:\n- deployment.yaml\n"
API_KUSTOMIZATION = (
    "# the shop's API\nresources:\n- deployment.yaml  # the server\n- settings.yaml\n"
)
ROOT_KUSTOMIZATION = "resources:\n- apps/api\n- apps/web\n"


def deployment(name: str, ns: str, image: str) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": name, "image": image}]},
            },
        },
    }


def files(ns: str, root: bool) -> dict[str, str]:
    settings = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": ns},
        "data": {"a": "1"},
    }
    web, api = deployment("web", ns, "nginx:1.27"), deployment("api", ns, "busybox:1.36")
    out = {
        WEB: WEB_KUSTOMIZATION,
        "mirror/apps/web/deployment.yaml": dump_yaml(order_document(web)),
        API: API_KUSTOMIZATION,
        "mirror/apps/api/deployment.yaml": dump_yaml(order_document(api)),
        "mirror/apps/api/settings.yaml": dump_yaml(order_document(settings)),
    }
    if root:
        out["mirror/kustomization.yaml"] = ROOT_KUSTOMIZATION
    return out


def listed(entries: list[str], *new: str) -> list[str]:
    """`entries` with `new` inserted before the first entry that sorts after each."""
    out = list(entries)
    for entry in new:
        at = next((i for i, e in enumerate(out) if e > entry), len(out))
        out.insert(at, entry)
    return out


@pytest.mark.parametrize("root", [False, True], ids=["forest", "root-lists-apps"])
def test_each_object_is_written_through_the_app_kustomization_that_renders_it(
    crds: ControlPlane,
    namespace: str,
    remote: BareRemote,
    operator: Callable[..., Operator],
    kbin: Path,
    root: bool,
) -> None:
    cp, ns = crds, namespace
    roots = ["mirror"] if root else ["mirror/apps/api", "mirror/apps/web"]
    in_step = mirror_kustomized(cp, ns, remote, operator, kbin, files(ns, root), roots, {})
    in_step("the snapshot")
    tip = remote.tip()

    # Neither named like nor labelled for an app: where most documents of its namespace are
    # (the API's two). Named like the web Deployment, or labelled app=web: with the web app.
    cp.kubectl("create", "configmap", "loose", "-n", ns, "--from-literal=x=1")
    in_step("a create")
    cp.kubectl("create", "configmap", "web", "-n", ns, "--from-literal=colour=blue")
    flags = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "flags", "namespace": ns, "labels": {"app": "web"}},
        "data": {"beta": "on"},
    }
    cp.apply(manifest(flags))
    in_step("two more creates")
    new = {name: f"{ns}/core/configmaps/{name}.yaml" for name in ("web", "flags", "loose")}
    web_entries = listed(["deployment.yaml"], new["web"], new["flags"])
    assert remote.read(WEB) == "resources:\n" + "".join(f"- {e}\n" for e in web_entries)
    api = remote.read(API)
    assert api.startswith("# the shop's API\nresources:\n")
    assert "- deployment.yaml  # the server\n" in api
    api_entries = listed(["deployment.yaml", "settings.yaml"], new["loose"])
    assert [line[2:].split("  #")[0] for line in api.splitlines()[2:]] == api_entries
    for name, app in (("web", "web"), ("flags", "web"), ("loose", "api")):
        # one file, in its app's folder, listed by one kustomization
        assert [f for f in remote.files() if f.endswith(f"/configmaps/{name}.yaml")] == [
            f"mirror/apps/{app}/{new[name]}"
        ]
        assert (new[name] in remote.read(WEB)) == (app == "web")
        assert (new[name] in remote.read(API)) == (app == "api")
    if root:
        assert remote.read("mirror/kustomization.yaml") == ROOT_KUSTOMIZATION

    cp.kubectl("set", "image", "deployment/web", "-n", ns, "web=nginx:1.29")
    in_step("an image update")
    assert "image: nginx:1.29" in remote.read("mirror/apps/web/deployment.yaml")

    cp.kubectl("delete", "configmap", "web", "-n", ns)
    cp.kubectl("delete", "configmap", "settings", "-n", ns)
    in_step("two deletes")
    assert remote.read(WEB) == "resources:\n" + "".join(
        f"- {e}\n" for e in listed(["deployment.yaml"], new["flags"])
    )
    assert remote.read(API) == API_KUSTOMIZATION.replace("- settings.yaml\n", "").replace(
        "- deployment.yaml  # the server\n",
        "".join(
            f"- {e}\n" if e != "deployment.yaml" else "- deployment.yaml  # the server\n"
            for e in listed(["deployment.yaml"], new["loose"])
        ),
    )
    assert remote.tip() != tip
    wait_condition(cp, "gittarget", "mirror", ns, "RenderMatchesLive", "True")

    kinds = ["ConfigMap", "Deployment.apps"]
    apps = [
        {"kustomization": "apps/api/kustomization.yaml", "documents": 2, "kinds": kinds},
        {"kustomization": "apps/web/kustomization.yaml", "documents": 2, "kinds": kinds},
    ]
    top = {"kustomization": "kustomization.yaml", "documents": 0, "kinds": []}
    expected: dict[str, Any] = {
        "forest": not root,
        "roots": [top, *apps] if root else apps,
        "plainDocuments": 0,
        "inherited": {"documents": 0, "objects": []},
    }
    if root:
        expected["root"] = "kustomization.yaml"

    def placement() -> Any:
        return cp.get_json("gittarget", "mirror", "-n", ns)["status"].get("placement")

    wait_for(lambda: placement() == expected, what=f"status.placement == {expected}")
