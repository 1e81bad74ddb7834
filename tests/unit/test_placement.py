"""Where a live object goes in a kustomized folder (pure): through the kustomization that
lists its file, placed and listed in the root when new, written plainly or not at all when it
cannot be written through, and unlisted when deleted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubescribe.mirror.identity import Identity
from kubescribe.mirror.kustomize import Tree
from kubescribe.mirror.placement import Placement, list_written, place, removal, unlist
from kubescribe.mirror.roots import Siblings

FOLDER = "apps"
FILES = {
    "apps/o/kustomization.yaml": (
        b"namePrefix: prod-\nresources: [web.yaml]\nreplicas:\n- name: web\n  count: 2\n"
    ),
    "apps/o/web.yaml": b"",
}
WEB = Identity("apps", "Deployment", "ns1", "prod-web")


def tree(files: Mapping[str, bytes] = FILES) -> Tree:
    loaded = Tree.load("apps/o", files.get, FOLDER)
    assert loaded is not None
    return loaded


def deployment(name: str = "prod-web", replicas: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "ns1"},
        "spec": {"replicas": replicas},
    }


def at(t: Tree, identity: Identity, path: str | None, **kw: Any) -> Placement:
    options: dict[str, Any] = {
        "old": lambda: None,
        "elsewhere": dict,
        "siblings": Siblings,
        "folder": FOLDER,
        "write_unsupported": False,
    }
    return place(t, identity, deployment(identity.name), path, **{**options, **kw})


def test_a_listed_file_is_written_through_its_kustomization() -> None:
    t = tree()
    old = {"metadata": {"name": "web"}, "spec": {"replicas": 1}}
    placement = place(
        t,
        WEB,
        deployment(replicas=5),
        "apps/o/web.yaml",
        old=lambda: old,
        elsewhere=dict,
        siblings=Siblings,
        folder=FOLDER,
        write_unsupported=False,
    )
    assert (placement.folder, placement.through, placement.listed) == ("apps/o", True, True)
    assert placement.refusal is None
    assert placement.placed_as == Identity("apps", "Deployment", "ns1", "web")
    # the file keeps its name and count; the kustomization's replicas entry takes the live one
    assert placement.document["metadata"]["name"] == "web"
    assert placement.document["spec"]["replicas"] == 1
    [edit] = placement.edits
    assert edit.data["replicas"][0]["count"] == 5


def test_a_new_object_is_placed_under_the_root_and_listed_there() -> None:
    t = tree()
    new = Identity("apps", "Deployment", "ns1", "prod-api")
    placement = at(t, new, None)
    assert placement.placed_as == Identity("apps", "Deployment", "ns1", "api")
    assert not placement.listed
    edited, named = list_written(t, placement, None, "apps/o/ns1/api.yaml")
    assert edited == {"apps/o"}
    assert named == "apps/o/kustomization.yaml"
    assert t.flush("apps/o").resources() == ["ns1/api.yaml", "web.yaml"]  # kept in order


def test_a_file_outside_the_root_is_written_where_it_is_and_refused() -> None:
    placement = at(tree(), WEB, "apps/other/web.yaml")
    assert (placement.folder, placement.through) == (FOLDER, False)
    assert placement.refusal == (
        "not written through: apps/other/web.yaml is not rendered by apps/o/kustomization.yaml"
    )


def test_an_object_rendered_from_a_multi_document_file_gets_no_file() -> None:
    new = Identity("apps", "Deployment", "ns1", "prod-api")
    placement = at(tree(), new, None, elsewhere=lambda: {new: "apps/o/all.yaml"})
    assert placement.folder is None
    assert placement.refusal == (
        "not written through: rendered from the multi-document file apps/o/all.yaml"
    )


def test_what_cannot_be_written_through_is_written_plainly_only_when_asked() -> None:
    wrong = Identity("apps", "Deployment", "ns1", "web")  # lacks the namePrefix
    refused = at(tree(), wrong, "apps/o/web.yaml")
    assert refused.folder is None
    assert refused.refusal == "not written through: name web lacks the namePrefix/nameSuffix prod-…"
    plain = at(tree(), wrong, "apps/o/web.yaml", write_unsupported=True)
    assert (plain.folder, plain.through) == ("apps/o", False)
    assert plain.document == deployment("web")


def test_a_moved_file_is_renamed_where_it_is_listed() -> None:
    t = tree()
    placement = at(t, WEB, "apps/o/web.yaml")
    edited, _ = list_written(t, placement, "apps/o/web.yaml", "apps/o/web.sops.yaml")
    assert edited == {"apps/o"}
    assert t.flush("apps/o").resources() == ["web.sops.yaml"]


def test_a_deleted_object_is_unlisted_with_its_replicas_entry() -> None:
    t = tree()
    assert removal(t, WEB, "apps/o/web.yaml", dict) is None
    assert unlist(t, WEB, "apps/o/web.yaml") == {"apps/o"}
    k = t.kustomizations["apps/o"]
    assert k.resources() == []
    assert "replicas" not in k.data
    assert unlist(t, WEB, "apps/o/gone.yaml") == set()


def test_a_patched_object_is_not_removed() -> None:
    files = {
        **FILES,
        "apps/o/kustomization.yaml": b"resources: [web.yaml]\npatches: [{path: p.yaml}]\n",
        "apps/o/p.yaml": b"kind: Deployment\nmetadata:\n  name: web\n",
    }
    web = Identity("apps", "Deployment", "ns1", "web")
    refused = removal(tree(files), web, "apps/o/web.yaml", dict)
    assert refused is not None
    assert refused.refusal == (
        "not removed: patches in apps/o/kustomization.yaml targets it (remove the patch first)"
    )
