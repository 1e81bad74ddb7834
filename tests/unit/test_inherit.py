"""Objects an overlay inherits from a base reached through `..` (pure): their file is never
written, a changed image or scale becomes an entry of the overlay's kustomization, and what
cannot be written there is refused."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from kubescribe.mirror.identity import Identity
from kubescribe.mirror.inherit import inherited, strategic_diff
from kubescribe.mirror.kustomize import Tree
from kubescribe.mirror.placement import Placement, place, removal
from kubescribe.mirror.roots import Siblings

FOLDER = "apps"
BASE = "apps/base/web.yaml"
OVERLAY = "# prod\nresources:\n- ../../base\n"
WEB = Identity("apps", "Deployment", "ns1", "web")


def web(image: str = "nginx:1.27", replicas: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ns1"},
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "web", "image": image}]}},
        },
    }


def tree(overlay: str = OVERLAY, base: str = "resources:\n- web.yaml\n", **more: bytes) -> Tree:
    files = {
        "apps/base/kustomization.yaml": base.encode(),
        BASE: b"",
        "apps/overlays/prod/kustomization.yaml": overlay.encode(),
        **{
            f"apps/overlays/prod/{k.replace('__yaml', '.yaml').replace('__', '/')}": v
            for k, v in more.items()
        },
    }
    loaded = Tree.load("apps/overlays/prod", files.get, FOLDER)
    assert loaded is not None
    return loaded


def placed(t: Tree, live: Mapping[str, Any], old: Mapping[str, Any] | None = None) -> Placement:
    file = web() if old is None else old
    return place(
        t,
        WEB,
        live,
        BASE,
        old=lambda: copy.deepcopy(file),
        elsewhere=dict,
        siblings=Siblings,
        folder=FOLDER,
        write_unsupported=True,
    )


def overlay_after(p: Placement) -> str:
    assert p.refusal is None
    assert (p.folder, p.through) == (None, True)  # the base file is not written
    [edit] = p.edits
    assert edit.path == "apps/overlays/prod/kustomization.yaml"
    return edit.dump().decode()


def test_a_file_outside_the_root_directory_is_inherited() -> None:
    t = tree()
    assert inherited(BASE, t.chain_of(BASE) or [])
    assert not inherited("apps/overlays/prod/web.yaml", t.chain("apps/overlays/prod"))


def test_an_unchanged_inherited_object_edits_nothing() -> None:
    assert placed(tree(), web()).edits == ()


@pytest.mark.parametrize(
    ("image", "entry"),
    [
        ("nginx:1.29", "- name: nginx\n  newTag: '1.29'\n"),
        (
            "mirror.example/nginx:1.27",
            "- name: nginx\n  newName: mirror.example/nginx\n  newTag: '1.27'\n",
        ),
        ("nginx@sha256:" + "b" * 64, f"- name: nginx\n  digest: sha256:{'b' * 64}\n"),
        (
            "nginx:1.29@sha256:" + "b" * 64,
            f"- name: nginx\n  newTag: '1.29'\n  digest: sha256:{'b' * 64}\n",
        ),
    ],
)
def test_a_changed_image_is_an_images_entry_of_the_overlay(image: str, entry: str) -> None:
    assert overlay_after(placed(tree(), web(image))) == OVERLAY + "images:\n" + entry


def test_an_overlay_images_entry_is_updated_not_added() -> None:
    t = tree(OVERLAY + "images:\n- name: nginx  # pinned\n  newTag: '1.28'\n")
    out = overlay_after(placed(t, web("nginx:1.30")))
    assert out == OVERLAY + "images:\n- name: nginx  # pinned\n  newTag: '1.30'\n"


def test_a_changed_scale_is_a_replicas_entry_of_the_overlay() -> None:
    out = overlay_after(placed(tree(), web(replicas=4)))
    assert out == OVERLAY + "replicas:\n- name: web\n  count: 4\n"
    t = tree(OVERLAY + "replicas:\n- name: web\n  count: 4\n")
    out = overlay_after(placed(t, web(replicas=6)))
    assert out == OVERLAY + "replicas:\n- name: web\n  count: 6\n"


def test_a_scale_of_a_base_without_replicas_is_an_entry() -> None:
    old = web()
    del old["spec"]["replicas"]
    out = overlay_after(placed(tree(), web(replicas=2), old))
    assert out == OVERLAY + "replicas:\n- name: web\n  count: 2\n"


def test_an_inherited_object_whose_base_kustomization_would_change_is_refused() -> None:
    # the base's own images entry rewrites the image: writing it would edit the base
    t = tree(base="resources:\n- web.yaml\nimages:\n- name: nginx\n  newTag: '1.28'\n")
    p = placed(t, web("nginx:1.29"))
    assert p.folder is None
    assert not p.edits
    assert p.refusal is not None
    assert "apps/base/kustomization.yaml" in p.refusal


@pytest.mark.parametrize("replicas", ["3", None, -1.5])
def test_a_hostile_live_scale_is_refused_not_raised(replicas: Any) -> None:
    live = web()
    live["spec"]["replicas"] = replicas
    p = placed(tree(), live)
    assert p.refusal is not None
    assert p.folder is None


def test_an_unreadable_inherited_file_is_refused() -> None:
    p = place(
        tree(),
        WEB,
        web("nginx:1.29"),
        BASE,
        old=lambda: None,
        elsewhere=dict,
        siblings=Siblings,
        folder=FOLDER,
        write_unsupported=False,
    )
    assert p.refusal is not None
    assert "could not be read" in p.refusal


def test_a_strategic_diff_holds_only_what_differs() -> None:
    old = {
        "data": {"a": "1", "b": "2"},
        "spec": {
            "args": ["x"],
            "containers": [
                {"name": "web", "image": "i", "env": [{"name": "A", "value": "1"}]},
                {"name": "side", "image": "s"},
            ],
        },
    }
    new = {
        "data": {"a": "1", "c": "3"},
        "spec": {
            "args": ["x", "y"],
            "containers": [
                {"name": "web", "image": "i", "env": [{"name": "A", "value": "2"}]},
                {"name": "extra", "image": "e"},
            ],
        },
    }
    assert strategic_diff(old, new) == {
        "data": {"c": "3", "b": None},
        "spec": {
            "args": ["x", "y"],
            "containers": [
                {"name": "web", "env": [{"name": "A", "value": "2"}]},
                {"name": "extra", "image": "e"},
                {"name": "side", "$patch": "delete"},
            ],
        },
    }


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            {"containers": [{"name": "a"}, {"name": "b"}]},
            {"containers": [{"name": "b"}, {"name": "a"}]},
        ),
        ({"ports": [{"containerPort": 80}]}, {"ports": [{"containerPort": 81}]}),
        ({"containers": [{"name": "a"}, {"name": "a"}]}, {"containers": [{"name": "a"}]}),
    ],
    ids=["reordered", "not-by-name", "names-twice"],
)
def test_a_list_change_a_patch_cannot_express_raises(old: Any, new: Any) -> None:
    with pytest.raises(ValueError, match=r"list|items"):
        strategic_diff(old, new)


def configmap(**data: str) -> dict[str, Any]:
    meta = {"name": "settings", "namespace": "ns1"}
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


SETTINGS = Identity("", "ConfigMap", "ns1", "settings")
PATCH = "apps/overlays/prod/patches/ns1/configmap_settings.yaml"
LISTED = OVERLAY + "patches:\n- path: patches/ns1/configmap_settings.yaml\n"


def placed_settings(t: Tree, live: Mapping[str, Any]) -> Placement:
    return place(
        t,
        SETTINGS,
        live,
        "apps/base/settings.yaml",
        old=lambda: configmap(a="1"),
        elsewhere=dict,
        siblings=Siblings,
        folder=FOLDER,
        write_unsupported=False,
    )


def settings_tree(overlay: str = OVERLAY, **more: bytes) -> Tree:
    return tree(overlay, "resources:\n- settings.yaml\n", **more)


def test_another_change_is_a_patch_file_listed_in_the_overlay() -> None:
    p = placed_settings(settings_tree(), configmap(a="1", b="2"))
    assert overlay_after(p) == LISTED
    assert p.overlaid is not None
    assert p.overlaid.path == PATCH
    assert p.overlaid.document == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "ns1"},
        "data": {"b": "2"},
    }


def test_the_overlays_own_patch_is_rewritten_and_goes_when_the_object_is_the_bases() -> None:
    own = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {b: '2'}\n"
    t = settings_tree(LISTED, patches__ns1__configmap_settings__yaml=own)
    p = placed_settings(t, configmap(a="1", b="3"))  # not refused: the patch is its own
    assert p.refusal is None
    assert p.edits == ()  # listed already
    assert p.overlaid is not None
    assert p.overlaid.document is not None
    assert p.overlaid.document["data"] == {"b": "3"}
    back = placed_settings(t, configmap(a="1"))
    assert overlay_after(back) == OVERLAY
    assert back.overlaid is not None
    assert back.overlaid.document is None


def test_a_patch_of_someone_else_still_refuses_the_object() -> None:
    theirs = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {b: '2'}\n"
    overlay = OVERLAY + "patches:\n- path: theirs.yaml\n"
    p = placed_settings(settings_tree(overlay, theirs__yaml=theirs), configmap(a="1", b="3"))
    assert p.refusal is not None
    assert "patches in" in p.refusal


def test_an_inherited_object_deleted_is_a_delete_patch_and_loses_its_replicas_entry() -> None:
    t = tree(OVERLAY + "replicas:\n- name: web\n  count: 4\n")
    gone = removal(t, WEB, BASE, web)
    assert gone is not None
    assert gone.refusal is None
    assert overlay_after(gone) == OVERLAY + (
        "patches:\n- path: patches/ns1/deployment.apps_web.yaml\n"
    )
    assert gone.overlaid is not None
    assert gone.overlaid.data == (
        b"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: ns1\n"
        b"$patch: delete\n"
    )


def test_a_deleted_object_of_the_overlays_own_directory_is_removed() -> None:
    t = tree(OVERLAY.replace("- ../../base\n", "- ../../base\n- own.yaml\n"))
    assert removal(t, WEB, "apps/overlays/prod/own.yaml", web) is None


def test_an_unreadable_inherited_file_deleted_is_refused() -> None:
    gone = removal(tree(), WEB, BASE, lambda: None)
    assert gone is not None
    assert gone.refusal == "not written through: the inherited file could not be read"
