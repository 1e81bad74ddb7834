"""Kustomization editing rules (pure): image and name arithmetic as kustomize v5 does it,
resources edits that keep comments, and what a live change writes through."""

from __future__ import annotations

from typing import Any

import pytest

from kubescribe.mirror import kustomize
from kubescribe.mirror.identity import Identity
from kubescribe.mirror.kustomize import (
    MAX_BASES_DEPTH,
    Kustomization,
    KustomizeError,
    Tree,
    build_refusal,
    generated_by,
    render_identity,
    unsupported,
)
from kubescribe.mirror.writethrough import (
    apply_image,
    image_matches,
    remove_replicas,
    split_image,
    write_through,
)


@pytest.mark.parametrize(
    ("image", "parts"),
    [
        ("nginx", ("nginx", "", "")),
        ("nginx:1.27", ("nginx", "1.27", "")),
        ("registry:5000/team/app:v1", ("registry:5000/team/app", "v1", "")),
        ("registry:5000/team/app", ("registry:5000/team/app", "", "")),
        ("app@sha256:abc", ("app", "", "sha256:abc")),
        ("app:v1@sha256:abc", ("app", "v1", "sha256:abc")),
    ],
)
def test_split_image_like_kustomize(image: str, parts: tuple[str, str, str]) -> None:
    assert split_image(image) == parts


def test_image_entries_apply_like_kustomize() -> None:
    assert image_matches("nginx:1.25", "nginx")
    assert image_matches("nginx@sha256:abc", "nginx")
    assert not image_matches("nginx-extra:1", "nginx")
    assert apply_image("nginx:1.25", {"newTag": "1.27"}) == "nginx:1.27"
    assert apply_image("nginx:1.25", {"newName": "mirror/nginx"}) == "mirror/nginx:1.25"
    assert apply_image("nginx:1.25", {"digest": "sha256:d"}) == "nginx@sha256:d"
    assert apply_image("nginx", {"newTag": "2", "digest": "sha256:d"}) == "nginx:2@sha256:d"


KUSTOMIZATION = b"""\
# top comment
namespace: prod  # the namespace
resources:
  # bases first
  - ../../base
  - b.yaml  # b
  - d.yaml
images:
  - name: nginx
    newTag: "1.27"
"""


def test_resources_sorted_insert_and_remove_keep_comments() -> None:
    k = Kustomization.parse("o/kustomization.yaml", KUSTOMIZATION)
    k.add_resource("c.yaml")
    assert k.remove_resource("d.yaml")
    assert k.dump().decode() == KUSTOMIZATION.decode().replace(
        "  - b.yaml  # b\n  - d.yaml\n", "  - b.yaml  # b\n  - c.yaml\n"
    )


def test_new_resources_list_follows_the_file_style() -> None:
    k = Kustomization.parse("kustomization.yaml", b"images:\n- name: a\n  newTag: x\n")
    k.add_resource("a.yaml")
    assert k.dump() == b"images:\n- name: a\n  newTag: x\nresources:\n- a.yaml\n"


def tree(files: dict[str, bytes], root: str = "o") -> Tree:
    loaded = Tree.load(root, files.get)
    assert loaded is not None
    return loaded


FILES = {
    "base/kustomization.yaml": b"resources: [web.yaml, cm.yaml]\nnamePrefix: app-\n",
    "o/kustomization.yaml": (
        b"namespace: prod\nnamePrefix: prod-\nresources: [../base]\n"
        b"images:\n- name: nginx\n  newTag: '1.27'\nreplicas:\n- name: app-web\n  count: 2\n"
    ),
}
WEB = Identity("apps", "Deployment", "", "web")


def deployment(name: str, image: str, replicas: int, ns: str | None = "prod") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name} | ({"namespace": ns} if ns else {})
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": replicas,
            "template": {"spec": {"containers": [{"name": "web", "image": image}]}},
        },
    }


def test_identity_through_prefixes_and_namespace() -> None:
    t = tree(FILES)
    chain = t.chain_of("base/web.yaml")
    assert chain is not None
    assert render_identity(WEB, chain) == Identity("apps", "Deployment", "prod", "prod-app-web")
    cluster = Identity("rbac.authorization.k8s.io", "ClusterRole", "", "x")
    assert render_identity(cluster, chain).namespace == ""


def test_image_and_scale_write_through_to_the_overlay() -> None:
    t = tree(FILES)
    chain = t.chain_of("base/web.yaml")
    assert chain is not None
    live_id = Identity("apps", "Deployment", "prod", "prod-app-web")
    old = deployment("web", "nginx:1.25", 1, ns=None)
    out = write_through(deployment("prod-app-web", "nginx:1.28", 5), live_id, old, chain)
    assert out.problem is None
    assert out.document == old  # the base keeps its name, namespace, image and replicas
    overlay = out.edits["o"].dump().decode()
    assert "- name: nginx\n  newTag: '1.28'\n" in overlay
    assert "- name: app-web\n  count: 5\n" in overlay
    assert out.edits.keys() == {"o"}

    digest = write_through(
        deployment("prod-app-web", "mirror/nginx@sha256:d", 2), live_id, old, chain
    )
    assert digest.edits["o"].data["images"][0] == {
        "name": "nginx",
        "newName": "mirror/nginx",
        "digest": "sha256:d",
    }


def test_unchanged_object_edits_nothing() -> None:
    t = tree(FILES)
    chain = t.chain_of("base/web.yaml")
    assert chain is not None
    live_id = Identity("apps", "Deployment", "prod", "prod-app-web")
    old = deployment("web", "nginx:1.25", 1, ns=None)
    out = write_through(deployment("prod-app-web", "nginx:1.27", 2), live_id, old, chain)
    assert (out.problem, out.edits, out.document) == (None, {}, old)


def test_names_and_namespaces_the_kustomization_cannot_render_are_problems() -> None:
    t = tree(FILES)
    chain = t.chain(t.root)
    other_ns = Identity("", "ConfigMap", "dev", "prod-app-x")
    assert "namespace prod" in (write_through({}, other_ns, None, chain).problem or "")
    unprefixed = Identity("", "ConfigMap", "prod", "x")
    assert "namePrefix" in (write_through({}, unprefixed, None, chain).problem or "")


def test_generators_patches_components_and_remote_bases_are_named() -> None:
    files = {
        "kustomization.yaml": (
            b"resources: [cm.yaml, https://example.com/base?ref=v1]\n"
            b"configMapGenerator:\n- name: settings\n  literals: [a=1]\n"
        )
    }
    t = tree(files, root="")
    chain = t.chain("")
    cm = Identity("", "ConfigMap", "", "settings-5d8f2c7b9h")
    assert generated_by(cm, chain) == "configMapGenerator settings"
    assert (
        unsupported(cm, chain, t, "x")
        == "remote resource https://example.com/base?ref=v1 in kustomization.yaml"
    )
    patch = b"patches:\n- target: {kind: Deployment, name: web}\n  path: p.yaml\n"
    patched = tree({"kustomization.yaml": patch}, root="")
    assert unsupported(WEB, patched.chain(""), patched, "web") == "patches in kustomization.yaml"
    other = Identity("apps", "Deployment", "", "api")
    assert unsupported(other, patched.chain(""), patched, "api") is None
    components = tree({"kustomization.yaml": b"components: [../c]\n"}, root="")
    assert unsupported(other, components.chain(""), components, "api") == (
        "components in kustomization.yaml"
    )


def test_deleted_workload_loses_its_replicas_entry() -> None:
    t = tree(FILES)
    chain = t.chain_of("base/web.yaml")
    assert chain is not None
    edits = remove_replicas(
        chain, Identity("apps", "Deployment", "prod", "prod-app-web"), "app-web"
    )
    assert "replicas" not in edits["o"].data


def test_many_resources_are_merged_in_one_pass_with_their_comments() -> None:
    k = Kustomization.parse(
        "kustomization.yaml", b"resources:\n- b.yaml  # bee\n- d.yaml  # dee\n- ../base\n"
    )
    k.add_resources(["e.yaml", "a.yaml", "c.yaml", "b.yaml"])
    assert k.dump() == (
        b"resources:\n- a.yaml\n- b.yaml  # bee\n- c.yaml\n- d.yaml  # dee\n- ../base\n- e.yaml\n"
    )


def test_a_file_listed_and_unlisted_before_a_flush_is_not_listed() -> None:
    t = tree({"kustomization.yaml": b"resources: []\n"}, root="")
    t.add_file("ns/a.yaml", t.root)
    assert t.remove_file("ns/a.yaml") == ""
    assert t.flush("").data["resources"] == []


def test_a_file_that_becomes_encrypted_is_renamed_in_its_listing() -> None:
    t = tree({"kustomization.yaml": b"resources:\n- ns/s.yaml  # the secret\n"}, root="")
    assert t.move_file("ns/s.yaml", "ns/s.sops.yaml") == ""
    assert t.flush("").dump() == b"resources:\n- ns/s.sops.yaml # the secret\n"
    assert t.chain_of("ns/s.sops.yaml") is not None


def test_a_strategic_merge_patch_hits_only_the_object_it_names() -> None:
    patch = b"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: web}\nspec: {replicas: 3}\n"
    files = {
        "kustomization.yaml": (
            b"resources: [web.yaml, cm.yaml]\n"
            b"patches:\n- path: more.yaml\n"
            b"- patch: |-\n    kind: ConfigMap\n    metadata: {name: inline}\n"
            b"- target: {kind: Service, name: '^api.*'}\n  patch: '[]'\n"
            b"patchesStrategicMerge: [gone.yaml]\n"
        ),
        "more.yaml": patch,
    }
    t = tree(files, root="")
    chain = t.chain("")
    where = "patches in kustomization.yaml"
    assert unsupported(WEB, chain, t, "web") == where
    assert unsupported(Identity("", "ConfigMap", "", "inline"), chain, t, "inline") == where
    assert unsupported(Identity("", "Service", "", "api-2"), chain, t, "api-2") == where
    # a missing patch file may hit anything
    other = Identity("", "ConfigMap", "", "settings")
    assert unsupported(other, chain, t, "settings") == (
        "patchesStrategicMerge in kustomization.yaml"
    )
    del files["kustomization.yaml"]
    files["kustomization.yaml"] = b"resources: [cm.yaml]\npatches:\n- path: more.yaml\n"
    t = tree(files, root="")
    assert unsupported(other, t.chain(""), t, "settings") is None


# -- hostile kustomizations: what a repository writer gets from them -------------------------


@pytest.mark.parametrize(
    "text",
    [
        b"resources: " + b"[" * 5000 + b"]" * 5000 + b"\n",
        b"a:\n" + b"".join(b"  " * i + b"- \n" for i in range(1, 500)),
        b"x: &a [1, 2]\nresources: *a\n",
        b"resources: []\n# " + b"x" * (2 * 1024 * 1024) + b"\n",
    ],
    ids=["deep-flow", "deep-block", "alias", "large"],
)
def test_a_kustomization_past_a_bound_is_a_kustomize_error(text: bytes) -> None:
    with pytest.raises(KustomizeError):
        Tree.load("", {"kustomization.yaml": text}.get)


def test_a_deep_patch_file_is_taken_to_hit_any_object() -> None:
    files = {
        "kustomization.yaml": b"patches: [{path: p.yaml}]\n",
        "p.yaml": b"[" * 5000 + b"]" * 5000 + b"\n",
    }
    t = tree(files, root="")
    assert unsupported(WEB, t.chain(""), t, "web") == "patches in kustomization.yaml"


def test_bases_nested_past_the_depth_bound_are_a_kustomize_error() -> None:
    files = {}
    directory = "k"
    for _ in range(MAX_BASES_DEPTH + 1):
        files[f"{directory}/kustomization.yaml"] = b"resources: [n]\n"
        directory += "/n"
    with pytest.raises(KustomizeError):
        Tree.load("k", files.get, "k")
    # within the bound: read
    assert Tree.load("k/n", files.get, "k") is not None


def test_kustomizations_past_the_tree_budget_are_a_kustomize_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a lowered budget: parsing megabytes of YAML would only make the test slow
    monkeypatch.setattr(kustomize, "MAX_TREE_BYTES", 4000)
    big = b"resources: [sub]\n# " + b"x" * 960 + b"\n"
    files = {"kustomization.yaml": big}
    directory = "sub"
    for _ in range(3):
        files[f"{directory}/kustomization.yaml"] = big
        directory += "/sub"
    tree = Tree.load("", files.get)  # four of them are within the budget
    assert tree is not None
    assert len(tree.kustomizations) == 4
    files[f"{directory}/kustomization.yaml"] = big
    with pytest.raises(KustomizeError, match="the kustomizations exceed 4000 bytes"):
        Tree.load("", files.get)


def test_a_resource_in_another_targets_folder_is_outside_the_target() -> None:
    files = {
        "b/kustomization.yaml": b"resources: [../a, ../a/x.yaml, /etc/hosts, own.yaml]\n",
        "a/kustomization.yaml": b"resources: [x.yaml]\n",
    }
    t = Tree.load("b", files.get, "b")
    assert t is not None
    assert set(t.kustomizations) == {"b"}  # a's kustomization is not part of b's tree
    assert set(t.files()) == {"b/own.yaml"}
    assert t.problems["b"] == [
        "resource ../a outside the target folder",
        "resource ../a/x.yaml outside the target folder",
        "resource /etc/hosts outside the target folder",
    ]
    own = Identity("", "ConfigMap", "", "own")
    assert unsupported(own, t.chain("b"), t, "own") == (
        "resource ../a outside the target folder in b/kustomization.yaml"
    )


@pytest.mark.parametrize(
    "text",
    [
        b"resources: [https://example.com/x.yaml]\n",
        b"resources: ['http://127.0.0.1:9/x.yaml']\n",
        b"resources: ['git::https://example.com/repo//base']\n",
        b"resources: [example.com/org/repo//base?ref=v1]\n",
        b"components: [github.com/org/repo/c]\n",
        b"patches: [{path: 'https://example.com/p.yaml'}]\n",
        b"configMapGenerator: [{name: a, files: ['HTTPS://example.com/f']}]\n",
        b"openapi: {path: 'https://example.com/schema.json'}\n",
    ],
)
def test_a_remote_reference_anywhere_is_not_built(text: bytes) -> None:
    assert build_refusal("kustomization.yaml", text) == "kustomization.yaml names a remote resource"


def test_bases_outside_the_folder_and_unreadable_files_are_not_built() -> None:
    assert build_refusal("o/kustomization.yaml", b"resources: [../base, web.yaml]\n") is None
    assert build_refusal("o/kustomization.yaml", b"resources: [../../up]\n") == (
        "o/kustomization.yaml names a resource outside the folder"
    )
    assert build_refusal("kustomization.yaml", b"bases: [/var/run/secrets]\n") == (
        "kustomization.yaml names a resource outside the folder"
    )
    assert build_refusal("kustomization.yaml", b"x: &a [1]\ny: *a\n") == (
        "kustomization.yaml is not readable"
    )
