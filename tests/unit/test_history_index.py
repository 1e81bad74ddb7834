"""The history index over a real repository: objects found by identity whatever their file,
built incrementally, rebuilt after a rewrite; and the commands run as a user runs them."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pygit2
import pytest

from kubescribe.history import views
from kubescribe.history.index import History, HistoryError
from kubescribe.history.refs import parse_ref
from kubescribe.history.source import from_target
from kubescribe.mirror.identity import Identity

START = 1_764_763_200  # 2025-12-03 12:00:00Z
SCRIPT = shutil.which("kubescribe", path=str(Path(sys.executable).parent))
WEB = Identity("apps", "Deployment", "shop", "web")
KUSTOMIZATION = "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"


def deployment(name: str, replicas: int, ns: str = "shop") -> str:
    return (
        f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {ns}\n"
        f"spec:\n  replicas: {replicas}\n"
    )


def configmap(name: str, level: str, ns: str = "shop") -> str:
    # Not in the emitter's canonical order: identified by a YAML parse.
    return (
        f"kind: ConfigMap\napiVersion: v1\nmetadata:\n  namespace: {ns}\n  name: {name}\n"
        f"data:\n  LOG_LEVEL: {level}\n"
    )


class Mirror:
    """A bare repository written commit by commit, as the operator writes a branch."""

    def __init__(self, path: Path) -> None:
        self.repo = pygit2.init_repository(str(path), bare=True)
        self.files: dict[str, str] = {}
        self.tip: pygit2.Oid | None = None
        self.clock = START

    def _tree(self, files: dict[str, str]) -> pygit2.Oid:
        nested: dict[str, dict[str, str] | str] = {}
        for path, text in files.items():
            head, _, rest = path.partition("/")
            if rest:
                sub = nested.setdefault(head, {})
                assert isinstance(sub, dict)
                sub[rest] = text
            else:
                nested[head] = text
        builder = self.repo.TreeBuilder()
        for name, value in nested.items():
            if isinstance(value, dict):
                builder.insert(name, self._tree(value), pygit2.enums.FileMode.TREE)
            else:
                blob = self.repo.create_blob(value.encode())
                builder.insert(name, blob, pygit2.enums.FileMode.BLOB)
        return builder.write()

    def commit(self, author: str, source: str = "audit", **changes: str | None) -> str:
        for key, text in changes.items():
            path = key.replace("__", "/") + ".yaml"
            if text is None:
                del self.files[path]
            else:
                self.files[path] = text
        self.clock += 60
        sig = pygit2.Signature(author, f"{author}@example.org", self.clock, 0)
        trailer = f"\n\nKubescribe-Author-Source: {source}\n" if source else "\n"
        self.tip = self.repo.create_commit(
            None, sig, sig, f"change{trailer}", self._tree(self.files),
            [self.tip] if self.tip else [],
        )  # fmt: skip
        self.repo.references.create("refs/heads/main", self.tip, force=True)
        return str(self.tip)

    def history(self, db: Path | None = None, folder: str = "mirror") -> History:
        assert self.tip is not None
        return History(self.repo, self.tip, folder, db)


@pytest.fixture
def mirror(tmp_path: Path) -> Mirror:
    m = Mirror(tmp_path / "remote.git")
    m.commit("alice", mirror__shop__apps__deployments__web=deployment("web", 2))
    m.commit("bob", "admission", mirror__shop__apps__deployments__web=deployment("web", 3))
    m.commit("carol", "", mirror__shop__apps__deployments__web=None)
    return m


def operations(history: History, identity: Identity) -> list[tuple[str, str, str]]:
    return [(e.commit.author, e.commit.source, e.operation) for e in history.changes_of(identity)]


def test_changes_of_one_object_with_authors_and_sources(mirror: Mirror) -> None:
    history = mirror.history()
    assert operations(history, WEB) == [
        ("alice", "audit", "CREATE"),
        ("bob", "admission", "UPDATE"),
        ("carol", "", "DELETE"),
    ]
    first, second, _ = history.changes_of(WEB)
    assert history.content(first) == {**_doc("web", 2)}
    assert history.read(second.old_blob, WEB) == _doc("web", 2)
    assert second.path == "mirror/shop/apps/deployments/web.yaml"


def _doc(name: str, replicas: int) -> dict[str, object]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "shop"},
        "spec": {"replicas": replicas},
    }


def test_objects_are_found_by_identity_whatever_the_file(tmp_path: Path) -> None:
    m = Mirror(tmp_path / "r.git")
    long_name = "a" * 200
    both = deployment("api", 1) + "---\n" + configmap("settings", "info")
    m.commit(
        "alice",
        mirror__shop__all=both,  # a multi-document file
        mirror__shop__apps__deployments__aaaa_3f2c9e=deployment(long_name, 1),  # escaped
        mirror__shop__kustomization=KUSTOMIZATION,
        elsewhere__x=deployment("outside", 1),
    )
    m.commit(
        "bob", mirror__shop__all=deployment("api", 1) + "---\n" + configmap("settings", "debug")
    )
    # The layout changes: the same document moves to another file.
    m.commit("kubescribe", "", mirror__shop__all=None, mirror__shop__api=deployment("api", 1),
             mirror__shop__settings=configmap("settings", "debug"))  # fmt: skip
    history = m.history()
    api = Identity("apps", "Deployment", "shop", "api")
    settings = Identity("", "ConfigMap", "shop", "settings")
    assert operations(history, api) == [("alice", "audit", "CREATE"), ("kubescribe", "", "MOVE")]
    assert [e.operation for e in history.changes_of(settings)] == ["CREATE", "UPDATE", "MOVE"]
    assert views.summarize(history, history.changes_of(settings)[1]) == "data.LOG_LEVEL info→debug"
    assert history.changes_of(Identity("apps", "Deployment", "shop", long_name))
    assert not history.changes_of(Identity("apps", "Deployment", "shop", "outside"))
    assert ("kustomize.config.k8s.io", "Kustomization") not in history.types()


def test_the_index_grows_with_new_commits_and_is_rebuilt_after_a_rewrite(
    mirror: Mirror, tmp_path: Path
) -> None:
    db = tmp_path / "index.sqlite"
    assert mirror.history(db).indexed == 3
    assert mirror.history(db).indexed == 0
    mirror.commit("dave", mirror__shop__apps__deployments__web=deployment("web", 4))
    again = mirror.history(db)
    assert again.indexed == 1
    assert [e.operation for e in again.changes_of(WEB)][-1] == "CREATE"
    # A force-pushed branch: the index starts over.
    assert mirror.tip is not None
    tip = mirror.repo[mirror.tip]
    assert isinstance(tip, pygit2.Commit)
    mirror.tip = tip.parents[0].parents[0].id
    mirror.commit("eve", mirror__shop__apps__deployments__web=deployment("web", 9))
    rewritten = mirror.history(db)
    assert rewritten.indexed == 3
    assert [e.commit.author for e in rewritten.changes_of(WEB)] == ["alice", "bob", "eve"]


def test_points_in_time_and_commits(mirror: Mirror) -> None:
    history = mirror.history()
    entries = history.changes_of(WEB)
    now = dt.datetime.now(dt.UTC)
    created = entries[0].commit.sha
    assert views.at(entries, views.point(history, created[:8], now)) == entries[0]
    assert views.at(entries, views.point(history, "main~1", now)) == entries[1]
    between = dt.datetime.fromtimestamp(START + 90, dt.UTC).isoformat()
    assert views.at(entries, views.point(history, between, now)) == entries[0]
    assert views.at(entries, views.point(history, "2020-01-01", now)) is None
    with pytest.raises(HistoryError, match="no commit abcdef1"):
        views.point(history, "abcdef1", now)
    window = history.window(dt.datetime.fromtimestamp(START + 120, dt.UTC), None)
    assert [e.commit.author for e in window] == ["bob", "carol"]


def test_a_name_in_two_namespaces_needs_one(tmp_path: Path) -> None:
    m = Mirror(tmp_path / "r.git")
    m.commit(
        "a", mirror__a__web=deployment("web", 1, "a"), mirror__b__web=deployment("web", 1, "b")
    )
    history = m.history()
    with pytest.raises(HistoryError, match=r"ambiguous.*-n NAMESPACE"):
        views.find(history, parse_ref("deploy/web"), None)
    assert views.find(history, parse_ref("deploy/web"), "b").namespace == "b"
    with pytest.raises(HistoryError, match="no deploy/web in namespace c"):
        views.find(history, parse_ref("deploy/web"), "c")


def kubescribe(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    assert SCRIPT is not None
    env = {**os.environ, "XDG_CACHE_HOME": str(cache)}
    return subprocess.run(
        [SCRIPT, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_the_commands_as_a_user_runs_them(mirror: Mirror, tmp_path: Path) -> None:
    repo = ("--repo", mirror.repo.path, "--path", "mirror")
    cache = tmp_path / "cache"
    done = kubescribe("history", "deploy/web", *repo, cache=cache)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == ["TIME", "AUTHOR", "(SOURCE)", "OPERATION", "COMMIT", "CHANGES"]
    assert "carol (configured)" in lines[1]
    assert "bob (admission)" in lines[2]
    assert lines[2].endswith("spec.replicas 2→3")
    blame = kubescribe("blame", "deploy/web", *repo, cache=cache).stdout
    assert any(line.startswith("spec.replicas") and "bob" in line for line in blame.splitlines())
    since = dt.datetime.fromtimestamp(START, dt.UTC).isoformat()
    timeline = kubescribe(
        "timeline",
        "--since",
        since,
        "--author",
        "bob",
        "--kind",
        "deploy",
        "-o",
        "json",
        *repo,
        cache=cache,
    )
    assert [e["summary"] for e in json.loads(timeline.stdout)] == ["spec.replicas 2→3"]
    created = dt.datetime.fromtimestamp(START + 90, dt.UTC).isoformat()
    diff = kubescribe(
        "diff", "deploy/web", "--from", created, "--to", "2025-12-03T12:02:30Z", *repo, cache=cache
    ).stdout
    assert "~ spec.replicas: 2 → 3" in diff
    assert "-  replicas: 2\n+  replicas: 3" in diff

    gone = kubescribe("show", "deploy/web", "--at", "1m", *repo, cache=cache)
    assert gone.returncode == 1
    assert gone.stderr.startswith("kubescribe: Deployment shop/web did not exist at 1m: deleted")
    for args, code, message in [
        (("show", "web", "--at", "1h", *repo), 2, "is not TYPE/NAME"),
        (("show", "deploy/web", "--at", "yesterday", *repo), 2, "is not a time"),
        (("history", "deploy/web", "--repo", str(tmp_path)), 1, "is not a Git repository"),
        (("history", "deploy/web"), 2, "give either --repo"),
        (("history", "deploy/web", "--target", "mirror"), 2, "is not NAMESPACE/NAME"),
        (("history", "cm/web", *repo), 1, "no cm/web in this history"),
    ]:
        failed = kubescribe(*args, cache=cache)
        assert failed.returncode == code, failed.stderr
        assert message in failed.stderr
        assert len(failed.stderr.splitlines()) == 1


class _Cluster:
    """A kube client that answers GETs of a GitTarget and its provider."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def get(self, path: str) -> dict[str, Any]:
        if "/gittargets/" in path:
            return {"spec": {"providerRef": {"name": "git"}, "branch": "main", "path": "m"}}
        return {"spec": {"url": self.url}}


@pytest.mark.parametrize(
    "url", ["https://169.254.169.254/repo.git", "http://[fe80::1]/repo.git", "ext::sh -c id"]
)
async def test_a_targets_url_is_checked_before_anything_is_fetched(url: str) -> None:
    """The URL comes from a tenant's GitProvider: the user's machine fetches nothing from a
    metadata or link-local address, and runs no remote helper."""
    with pytest.raises(HistoryError, match="GitTarget team/mirror"):
        await from_target(_Cluster(url), "team", "mirror")  # type: ignore[arg-type]
