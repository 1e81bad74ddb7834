"""Several kustomize roots in one folder (pure): a forest of app kustomizations, or a root
listing app directories; which kustomization a new object goes to; hostile trees refused."""

from __future__ import annotations

import posixpath
from collections.abc import Hashable, Iterator, Mapping
from typing import Any

import pytest

from kubescribe.mirror import roots
from kubescribe.mirror.identity import Identity
from kubescribe.mirror.kustomize import KustomizeError, Tree
from kubescribe.mirror.placement import list_written, place
from kubescribe.mirror.roots import (
    MAX_FOREST_DEPTH,
    Forest,
    Siblings,
    build_roots,
    choose_home,
    discover,
    homes,
)

FOLDER = "mirror"
APPS = {
    "mirror/apps/web/kustomization.yaml": b"namespace: web\nresources:\n- deployment.yaml\n",
    "mirror/apps/web/deployment.yaml": b"",
    "mirror/apps/api/kustomization.yaml": b"resources:\n- api.yaml\n- settings.yaml\n",
    "mirror/apps/api/api.yaml": b"",
    "mirror/apps/api/settings.yaml": b"",
}


def forest(files: Mapping[str, bytes] = APPS) -> Forest:
    dirs = [f"{FOLDER}/{d}" for d in discover(lambda d: entries(files, str(d)), FOLDER)]
    return Forest.load_forest(FOLDER, dirs, files.get, FOLDER)


def entries(
    files: Mapping[str, bytes], directory: str
) -> Iterator[tuple[str, bool, bool, Hashable]]:
    """(name, is a directory, is a symlink, key) of a directory of `files` (`@` marks a
    link); the key is the directory's path."""
    seen: set[str] = set()
    for path in files:
        if not path.startswith(directory + "/"):
            continue
        name, _, rest = path[len(directory) + 1 :].partition("/")
        if name.rstrip("@") not in seen:
            seen.add(name.rstrip("@"))
            yield name.rstrip("@"), bool(rest), name.endswith("@"), f"{directory}/{name}"


def documents(t: Tree, held: Mapping[Identity, str]) -> Siblings:
    return Siblings.of(t, held.items())


def obj(name: str, namespace: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "labels": labels}}


WEB = Identity("apps", "Deployment", "web", "web")
API = Identity("apps", "Deployment", "shop", "api")
SETTINGS = Identity("", "ConfigMap", "shop", "settings")
PLACED = {
    WEB: "mirror/apps/web/deployment.yaml",
    API: "mirror/apps/api/api.yaml",
    SETTINGS: "mirror/apps/api/settings.yaml",
}


def test_a_forest_renders_each_app_kustomization_on_its_own() -> None:
    t = forest()
    assert build_roots(t) == ["mirror/apps/api", "mirror/apps/web"]
    assert homes(t) == ["mirror/apps/api", "mirror/apps/web"]
    chain = t.chain_of("mirror/apps/web/deployment.yaml")
    assert chain is not None
    assert chain[0].path == "mirror/apps/web/kustomization.yaml"
    assert (
        t.rendered_identity(
            "mirror/apps/web/deployment.yaml", Identity("apps", "Deployment", "", "web")
        )
        == WEB
    )


def test_an_app_listed_by_another_is_its_base_not_a_root() -> None:
    files = {**APPS, "mirror/all/kustomization.yaml": b"resources:\n- ../apps/api\n"}
    t = forest(files)
    assert build_roots(t) == ["mirror/all", "mirror/apps/web"]


def test_new_objects_go_where_their_siblings_are() -> None:
    t = forest()
    siblings = documents(t, PLACED)
    # same namespace and name as a listed object (a Service beside its Deployment)
    service = Identity("", "Service", "shop", "api")
    assert choose_home(t, service, obj("api", "shop"), siblings) == "mirror/apps/api"
    # the app label names a listed object
    labelled = Identity("", "ConfigMap", "shop", "api-extra")
    live = obj("api-extra", "shop", app="api")
    assert choose_home(t, labelled, live, siblings) == "mirror/apps/api"
    # a kustomization setting the namespace takes its objects, even without siblings
    other = Identity("", "ConfigMap", "web", "banner")
    assert choose_home(t, other, obj("banner", "web"), siblings) == "mirror/apps/web"
    # otherwise the kustomization holding most documents of the namespace
    extra = Identity("", "Secret", "shop", "token")
    assert choose_home(t, extra, obj("token", "shop"), siblings) == "mirror/apps/api"
    # in a forest, no kustomization holds an unknown namespace: a plain file
    stray = Identity("", "ConfigMap", "elsewhere", "x")
    assert choose_home(t, stray, obj("x", "elsewhere"), siblings) is None


def test_a_kustomization_setting_another_namespace_never_takes_the_object() -> None:
    t = forest()
    siblings = documents(t, PLACED)
    # named like the web Deployment, but in another namespace than `namespace: web`
    clash = Identity("apps", "Deployment", "shop", "web")
    assert choose_home(t, clash, obj("web", "shop"), siblings) == "mirror/apps/api"


def test_a_root_listing_app_directories_routes_to_the_app_and_lists_it_there() -> None:
    files = {
        "mirror/kustomization.yaml": b"resources:\n- apps/web\n- apps/api\n",
        **{k: v for k, v in APPS.items() if "web" not in k},
        "mirror/apps/web/kustomization.yaml": b"resources:\n- deployment.yaml\n",
        "mirror/apps/web/deployment.yaml": b"",
    }
    t = Tree.load(FOLDER, files.get, FOLDER)
    assert t is not None
    assert not isinstance(t, Forest)
    assert homes(t) == ["mirror", "mirror/apps/api", "mirror/apps/web"]
    siblings = documents(t, PLACED)
    new = Identity("", "Service", "shop", "api")
    placement = place(
        t,
        new,
        obj("api", "shop"),
        None,
        old=lambda: None,
        elsewhere=dict,
        siblings=lambda: siblings,
        folder=FOLDER,
        write_unsupported=False,
    )
    assert placement.folder == "mirror/apps/api"
    assert placement.through
    path = "mirror/apps/api/shop/core/services/api.yaml"
    edited, named = list_written(t, placement, None, path)
    assert edited == {"mirror/apps/api"}
    assert named == "mirror/apps/api/kustomization.yaml"
    assert t.flush("mirror/apps/api").resources() == [
        "api.yaml",
        "settings.yaml",
        "shop/core/services/api.yaml",
    ]
    assert t.flush("mirror").resources() == ["apps/web", "apps/api"]  # the root is untouched
    # nothing known of the namespace: the root, as with one kustomization
    stray = Identity("", "ConfigMap", "elsewhere", "x")
    assert choose_home(t, stray, obj("x", "elsewhere"), siblings) == "mirror"


def test_an_overlay_base_is_never_a_home() -> None:
    files = {
        "mirror/overlays/prod/kustomization.yaml": b"resources:\n- ../../base\n",
        "mirror/base/kustomization.yaml": b"resources:\n- api.yaml\n",
        "mirror/base/api.yaml": b"",
    }
    t = Tree.load("mirror/overlays/prod", files.get, FOLDER)
    assert t is not None
    assert homes(t) == ["mirror/overlays/prod"]
    siblings = documents(t, {API: "mirror/base/api.yaml"})
    service = Identity("", "Service", "shop", "api")
    assert choose_home(t, service, obj("api", "shop"), siblings) == "mirror/overlays/prod"


def test_files_of_a_forest_outside_its_apps_are_plain_and_unlisted_ones_are_adopted() -> None:
    t = forest()
    common = {"old": lambda: None, "elsewhere": dict, "siblings": Siblings}
    beside = place(
        t,
        SETTINGS,
        obj("settings", "shop"),
        "mirror/shop/core/configmaps/settings.yaml",
        folder=FOLDER,
        write_unsupported=False,
        **common,  # type: ignore[arg-type]
    )
    assert (beside.folder, beside.through, beside.refusal) == (FOLDER, False, None)
    inside = place(
        t,
        SETTINGS,
        obj("settings", "shop"),
        "mirror/apps/api/loose.yaml",
        folder=FOLDER,
        write_unsupported=False,
        **common,  # type: ignore[arg-type]
    )
    assert (inside.folder, inside.through, inside.listed) == ("mirror/apps/api", True, False)


def test_hostile_forests_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # a kustomization that is a symlink could stand for any file of the repository
    linked = {**APPS, "mirror/apps/evil/kustomization.yaml@": b"../../../../etc/passwd"}
    with pytest.raises(KustomizeError, match="symlink"):
        forest(linked)
    # kustomizations that include each other: no root renders them
    cyclic = {
        "mirror/a/kustomization.yaml": b"resources:\n- ../b\n",
        "mirror/b/kustomization.yaml": b"resources:\n- ../a\n",
    }
    with pytest.raises(KustomizeError, match="cycle"):
        forest(cyclic)
    # a resource outside the folder is a problem of that kustomization (never read)
    escaping = {**APPS, "mirror/apps/api/kustomization.yaml": b"resources:\n- ../../../x\n"}
    t = forest(escaping)
    assert t.problems["mirror/apps/api"] == ["resource ../../../x outside the target folder"]
    # too large a tree (a lowered budget: parsing megabytes of YAML would only be slow)
    monkeypatch.setattr(roots, "MAX_TREE_BYTES", 4000)
    big = {
        f"mirror/a{i}/kustomization.yaml": b"resources: []\n# " + b"x" * 960 + b"\n"
        for i in range(4)
    }
    assert len(forest(big).build_roots()) == 4
    big["mirror/a4/kustomization.yaml"] = big["mirror/a0/kustomization.yaml"]
    with pytest.raises(KustomizeError, match="exceed 4000 bytes"):
        forest(big)


def test_discovery_stops_at_a_kustomization_and_at_its_depth() -> None:
    deep = posixpath.join(FOLDER, *["d"] * (MAX_FOREST_DEPTH + 1), "kustomization.yaml")
    files = {
        **APPS,
        "mirror/apps/web/nested/kustomization.yaml": b"resources: []\n",
        deep: b"resources: []\n",
        "mirror/.hidden/kustomization.yaml": b"resources: []\n",
    }
    memo: dict[tuple[Hashable, int], tuple[str, ...]] = {}
    assert discover(lambda d: entries(files, str(d)), FOLDER, memo) == ["apps/api", "apps/web"]
    assert sorted(memo[("mirror/apps", 1)]) == ["api", "web"]
    # a changed folder (another top) is searched again only where its subtrees changed
    changed = {"changed": [("apps", True, False, "mirror/apps")]}

    def listing(key: Hashable) -> list[tuple[str, bool, bool, Hashable]]:
        return list(changed.get(str(key), []))

    assert discover(listing, "changed", memo) == ["apps/api", "apps/web"]


def test_a_base_an_app_of_a_forest_lists_is_not_a_home() -> None:
    files = {
        "mirror/apps/web/kustomization.yaml": b"resources:\n- ../../base\n",
        "mirror/base/kustomization.yaml": b"resources:\n- deployment.yaml\n",
        "mirror/base/deployment.yaml": b"",
    }
    t = forest(files)
    assert build_roots(t) == ["mirror/apps/web"]
    assert homes(t) == ["mirror/apps/web"]
    siblings = documents(t, {WEB: "mirror/base/deployment.yaml"})
    assert siblings.by_name[("web", "web")] == "mirror/apps/web"
