"""What a build leaves to the next: indexes and kustomization trees reused while their folder
tree is unchanged, saved for the tree a final build made, forgotten with their target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pygit2
import pytest
from pygit2.enums import FileMode

from kubescribe.git.buildcache import BuildCache, BuiltState
from kubescribe.git.index import folder_tree
from kubescribe.git.kustomized import placement
from kubescribe.git.records import PlacementReport, RootReport
from kubescribe.git.targets import KustomizeConfig
from kubescribe.git.tree import edit_tree
from kubescribe.mirror.changes import TargetKey
from kubescribe.mirror.kustomize import KustomizeError
from kubescribe.mirror.roots import Forest, build_roots
from tests.builders import TARGET, ident, target

CM = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: ns1}\n"
KUSTOMIZED = target(folder="f", kustomize=KustomizeConfig())


class Log:
    def __init__(self) -> None:
        self.events: list[str] = []

    def info(self, event: str, **kw: Any) -> None:
        self.events.append(event)


@pytest.fixture
def repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "store.git"), bare=True)


def tree_of(repo: pygit2.Repository, files: dict[str, bytes]) -> pygit2.Oid:
    return edit_tree(repo, None, {p: repo.create_blob(d) for p, d in files.items()})


def test_an_index_is_built_once_per_folder_tree(repo: pygit2.Repository) -> None:
    cache, log, config = BuildCache(), Log(), target(folder="f")
    root = tree_of(repo, {"f/a.yaml": CM, "other/x.yaml": b"x: 1\n"})
    first = cache.index(repo, root, config, None, log)
    assert ident("a") in first
    elsewhere = tree_of(repo, {"f/a.yaml": CM, "other/x.yaml": b"x: 2\n"})
    assert cache.index(repo, elsewhere, config, None, log) is first  # the folder is the same
    changed = tree_of(repo, {"f/a.yaml": CM, "f/b.yaml": b"notes: 1\n"})
    assert cache.index(repo, changed, config, None, log) is not first
    assert log.events == ["build.indexed", "build.indexed"]


def test_a_kustomization_tree_is_taken_while_its_folder_is_unchanged(
    repo: pygit2.Repository,
) -> None:
    cache = BuildCache()
    files = {"f/kustomization.yaml": b"resources: [a.yaml]\n", "f/a.yaml": CM}
    root = tree_of(repo, files)
    assert cache.kustomizations(repo, root, target(folder="f")) is None  # not kustomized
    parsed = cache.kustomizations(repo, root, KUSTOMIZED)
    assert parsed is not None
    assert parsed.listed == {"f/a.yaml": "f"}
    state = BuiltState(ktrees={TARGET: parsed})
    cache.save(repo, root, {TARGET: KUSTOMIZED}, state)
    assert cache.kustomizations(repo, root, KUSTOMIZED) is parsed
    # taken: a build that fails never gives it back, the next one parses again
    assert cache.kustomizations(repo, root, KUSTOMIZED) is not parsed
    cache.save(repo, root, {TARGET: KUSTOMIZED}, state)
    moved = tree_of(repo, {**files, "f/b.yaml": CM})
    assert cache.kustomizations(repo, moved, KUSTOMIZED) is not parsed


def test_a_final_build_saves_its_state_for_the_tree_it_built(repo: pygit2.Repository) -> None:
    cache, config = BuildCache(), target(folder="f")
    base = tree_of(repo, {"f/a.yaml": CM})
    index = cache.index(repo, base, config, None, Log()).copy()
    built = tree_of(repo, {"f/a.yaml": CM, "f/b.yaml": CM.replace(b"name: a", b"name: b")})
    state = BuiltState(
        indexes={TARGET: index},
        retained={TARGET: {ident("r")}},
        failing={TARGET: {ident("x"): ("PathConflict", "taken")}},
        upkept={TARGET: "key"},
    )
    cache.save(repo, built, {TARGET: config}, state)
    assert cache.indexes[(TARGET, "f")] is index
    assert index.tree_id == folder_tree(repo, built, "f")
    assert cache.retained[TARGET] == {ident("r")}
    assert cache.failing[TARGET] == {ident("x"): ("PathConflict", "taken")}
    assert cache.upkept[TARGET] == (folder_tree(repo, built, "f"), "key")


def test_targets_no_longer_written_are_forgotten(repo: pygit2.Repository) -> None:
    cache, config = BuildCache(), target(folder="f")
    cache.index(repo, tree_of(repo, {"f/a.yaml": CM}), config, None, Log())
    cache.failing[TARGET] = {}
    moved = target(folder="g")
    cache.keep_only({TARGET: moved})
    assert cache.indexes == {}
    assert TARGET in cache.failing
    cache.keep_only({TargetKey("other", "t"): moved})
    assert cache.failing == {}


def test_app_kustomizations_without_a_root_are_found_as_a_forest(repo: pygit2.Repository) -> None:
    cache = BuildCache()
    files = {
        "f/apps/web/kustomization.yaml": b"resources: [a.yaml]\n",
        "f/apps/web/a.yaml": CM,
        "f/ns1/core/configmaps/b.yaml": CM.replace(b"name: a", b"name: b"),
    }
    root = tree_of(repo, files)
    found = cache.kustomizations(repo, root, KUSTOMIZED)
    assert isinstance(found, Forest)
    assert build_roots(found) == ["f/apps/web"]
    assert found.listed == {"f/apps/web/a.yaml": "f/apps/web"}
    # what status.placement says of it: the app renders one ConfigMap, one file is plain
    index = cache.index(repo, root, KUSTOMIZED, found, Log())
    web = RootReport("apps/web/kustomization.yaml", 1, ("ConfigMap",))
    assert placement(index, found, "f") == PlacementReport(forest=True, roots=(web,), plain=1)
    # a folder without any kustomization is a plain folder, remembered for its tree
    plain = tree_of(repo, {"f/ns1/core/configmaps/b.yaml": CM})
    assert cache.kustomizations(repo, plain, KUSTOMIZED) is None
    assert cache.plain[(TARGET, "f")] == folder_tree(repo, plain, "f")


def test_a_symlinked_app_kustomization_is_refused(repo: pygit2.Repository) -> None:
    web = repo.TreeBuilder()
    web.insert("a.yaml", repo.create_blob(CM), FileMode.BLOB)
    web.insert(
        "kustomization.yaml", repo.create_blob(b"../../../x/kustomization.yaml"), FileMode.LINK
    )
    node = web.write()
    for name in ("web", "apps", "f"):
        parent = repo.TreeBuilder()
        parent.insert(name, node, FileMode.TREE)
        node = parent.write()
    with pytest.raises(KustomizeError, match="symlink"):
        BuildCache().kustomizations(repo, node, KUSTOMIZED)
