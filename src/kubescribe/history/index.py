"""The history of a mirror branch as an index: per commit (first parent, oldest first) its
author, the `Kubescribe-Author-Source` trailer, its time, and which objects it created,
updated, moved or deleted, found by identity whatever file the layout gave them.

The index is a SQLite file in the user's cache, built once and then extended with the commits
that are new since its tip (a rewritten branch is indexed again): a question about one object
or a time window is then one indexed query, however long the history. It only ever reads the
repository.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import re
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pygit2
import yaml

from kubescribe.mirror.identity import Identity, identity_from_header, identity_of
from kubescribe.mirror.yamlfmt import load_yaml, load_yaml_all

SCHEMA = 1
SOURCE_TRAILER = "Kubescribe-Author-Source"
_SPLIT = re.compile(rb"^---[ \t]*(?:#.*)?\r?\n", re.MULTILINE)
_SUFFIXES = (".yaml", ".yml")
_BLOB_CACHE = 8192
_TREE_CACHE = 1024


@dataclass(frozen=True)
class Commit:
    sha: str
    seq: int
    time: dt.datetime
    author: str
    email: str
    source: str
    subject: str


@dataclass(frozen=True)
class Entry:
    """One change of one object in one commit: CREATE, UPDATE, MOVE (same content, another
    file) or DELETE. `blob` is the new content's (None after a DELETE), `old_blob` the one
    before (None after a CREATE)."""

    commit: Commit
    identity: Identity
    operation: str
    path: str
    blob: str | None
    old_blob: str | None


class HistoryError(Exception):
    """A question the history cannot answer (the message says why)."""


def source_of(message: str) -> str:
    for line in reversed(message.splitlines()):
        key, sep, value = line.partition(":")
        if sep and key.strip() == SOURCE_TRAILER:
            return value.strip()
    return ""


def _chunks(data: bytes) -> list[bytes]:
    return [c for c in _SPLIT.split(data) if c.strip()] if b"\n---" in data else [data]


def documents(data: bytes) -> dict[Identity, bytes]:
    """The Kubernetes objects of a file by identity, each with its own bytes."""
    found: dict[Identity, bytes] = {}
    for chunk in _chunks(data):
        identity = identity_from_header(chunk)
        if identity is None:
            try:
                doc = load_yaml(chunk)
            except yaml.YAMLError:  # a file that is not YAML holds no object
                continue
            identity = identity_of(doc) if isinstance(doc, dict) else None
        if identity is not None:
            found[identity] = chunk
    return found


def document(data: bytes, identity: Identity) -> dict[str, Any] | None:
    """The parsed document of `identity` in a file's content."""
    for doc in load_yaml_all(data):
        if isinstance(doc, dict) and identity_of(doc) == identity:
            return doc
    return None


def _subtree(repo: pygit2.Repository, tree: pygit2.Tree, folder: str) -> pygit2.Tree | None:
    if not folder:
        return tree
    try:
        obj = repo[tree[folder].id]
    except KeyError:
        return None
    return obj if isinstance(obj, pygit2.Tree) else None


def index_file(cache_dir: Path, repo_path: str, branch: str, folder: str) -> Path:
    key = hashlib.sha256(f"{Path(repo_path).resolve()}\0{branch}\0{folder}".encode()).hexdigest()
    return cache_dir / f"{key[:24]}.sqlite"


_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS commits (
  seq INTEGER PRIMARY KEY, sha TEXT UNIQUE, time INTEGER, offset INTEGER,
  author TEXT, email TEXT, source TEXT, subject TEXT);
CREATE TABLE IF NOT EXISTS changes (
  seq INTEGER, grp TEXT, kind TEXT, namespace TEXT, name TEXT, op TEXT,
  path TEXT, blob TEXT, old_blob TEXT);
CREATE INDEX IF NOT EXISTS changes_by_name ON changes (name, kind, namespace);
CREATE INDEX IF NOT EXISTS changes_by_seq ON changes (seq);
CREATE INDEX IF NOT EXISTS commits_by_time ON commits (time);
"""


class History:
    """The indexed history of `folder` on the commit `tip` of a repository."""

    def __init__(
        self, repo: pygit2.Repository, tip: pygit2.Oid, folder: str, db: Path | None
    ) -> None:
        self.repo = repo
        self.tip = tip
        self.folder = folder.strip("/") if folder not in ("", ".") else ""
        if db is not None:
            db.parent.mkdir(parents=True, exist_ok=True)
        # Another command extending the same index holds it for as long as that takes.
        self._db = sqlite3.connect(
            str(db) if db is not None else ":memory:", timeout=600, isolation_level=None
        )
        self._db.executescript(_TABLES)
        self._blobs: dict[pygit2.Oid, dict[Identity, bytes]] = {}
        self._trees: dict[pygit2.Oid, dict[str, tuple[pygit2.Oid, bool]]] = {}
        self._prefix = f"{self.folder}/" if self.folder else ""
        self.indexed = 0
        self._update()

    def close(self) -> None:
        self._db.close()

    # --- building --------------------------------------------------------------------------

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row[0]) if row else None

    def _update(self) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            known = self._meta("tip")
            if known == str(self.tip):
                db.execute("COMMIT")
                return
            stale = self._meta("schema") != str(SCHEMA) or self._meta("folder") != self.folder
            if known and not stale:
                try:
                    stale = not (
                        self.repo.descendant_of(self.tip, pygit2.Oid(hex=known))
                        or self.repo.get(known) is None
                    )
                except (KeyError, ValueError, pygit2.GitError):
                    stale = True
            if stale or not known:
                db.execute("DELETE FROM commits")
                db.execute("DELETE FROM changes")
                known = None
            self.indexed = self._index(known)
            db.executemany(
                "INSERT OR REPLACE INTO meta VALUES (?, ?)",
                [("tip", str(self.tip)), ("schema", str(SCHEMA)), ("folder", self.folder)],
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def _walk(self, known: str | None) -> list[pygit2.Commit]:
        walker = self.repo.walk(self.tip, pygit2.enums.SortMode.TOPOLOGICAL)
        walker.simplify_first_parent()
        if known:
            walker.hide(pygit2.Oid(hex=known))
        commits = list(walker)
        commits.reverse()
        return commits

    def _index(self, known: str | None) -> int:
        row = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM commits").fetchone()
        seq = int(row[0])
        commits = self._walk(known)
        rows: list[tuple[Any, ...]] = []
        changes: list[tuple[Any, ...]] = []
        for commit in commits:
            seq += 1
            author = commit.author
            message = commit.message
            rows.append(
                (
                    seq,
                    str(commit.id),
                    author.time,
                    author.offset,
                    author.name,
                    author.email,
                    source_of(message),
                    message.split("\n", 1)[0],
                )
            )
            for identity, op, path, blob, old_blob in self._changes(commit):
                changes.append(
                    (
                        seq,
                        identity.group,
                        identity.kind,
                        identity.namespace,
                        identity.name,
                        op,
                        path,
                        blob,
                        old_blob,
                    )
                )
        self._db.executemany("INSERT INTO commits VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        self._db.executemany("INSERT INTO changes VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", changes)
        return len(commits)

    def _objects(self, oid: pygit2.Oid) -> dict[Identity, bytes]:
        found = self._blobs.get(oid)
        if found is None:
            if len(self._blobs) >= _BLOB_CACHE:
                self._blobs.clear()
            blob = self.repo[oid]
            found = documents(blob.data) if isinstance(blob, pygit2.Blob) else {}
            self._blobs[oid] = found
        return found

    def _entries(self, tree: pygit2.Tree | None) -> dict[str, tuple[pygit2.Oid, bool]]:
        """Name -> (id, is a tree) of a tree's entries (the tree before a commit is the one
        after the commit before it: each listing is read once)."""
        if tree is None:
            return {}
        found = self._trees.get(tree.id)
        if found is None:
            if len(self._trees) >= _TREE_CACHE:
                self._trees.clear()
            found = {e.name or "": (e.id, e.type_str == "tree") for e in tree}
            self._trees[tree.id] = found
        return found

    def _changed_files(
        self, old: pygit2.Tree | None, new: pygit2.Tree | None, prefix: str
    ) -> Iterator[tuple[str, pygit2.Oid | None, pygit2.Oid | None]]:
        """(path, old blob, new blob) of every file that differs, descending only into
        subtrees whose ids differ (a commit of a mirror changes a few files of thousands)."""
        before, after = self._entries(old), self._entries(new)
        for name in before.keys() | after.keys():
            a, b = before.get(name), after.get(name)
            if a == b:
                continue
            a_tree = self.repo[a[0]] if a is not None and a[1] else None
            b_tree = self.repo[b[0]] if b is not None and b[1] else None
            if a_tree is not None or b_tree is not None:
                assert a_tree is None or isinstance(a_tree, pygit2.Tree)
                assert b_tree is None or isinstance(b_tree, pygit2.Tree)
                yield from self._changed_files(a_tree, b_tree, f"{prefix}{name}/")
            blob_a = a[0] if a is not None and not a[1] else None
            blob_b = b[0] if b is not None and not b[1] else None
            if blob_a is not None or blob_b is not None:
                yield f"{prefix}{name}", blob_a, blob_b

    def _changes(
        self, commit: pygit2.Commit
    ) -> Iterator[tuple[Identity, str, str, str | None, str | None]]:
        new_tree = _subtree(self.repo, commit.tree, self.folder)
        old_tree = (
            _subtree(self.repo, commit.parents[0].tree, self.folder) if commit.parents else None
        )
        before: dict[Identity, tuple[str, str, bytes]] = {}
        after: dict[Identity, tuple[str, str, bytes]] = {}
        for path, was, now in self._changed_files(old_tree, new_tree, self._prefix):
            for oid, found in ((was, before), (now, after)):
                if oid is not None and path.endswith(_SUFFIXES):
                    for identity, chunk in self._objects(oid).items():
                        found[identity] = (path, str(oid), chunk)
        for identity in sorted(before.keys() | after.keys()):
            old, new = before.get(identity), after.get(identity)
            if new is None:
                assert old is not None
                yield identity, "DELETE", old[0], None, old[1]
            elif old is None:
                yield identity, "CREATE", new[0], new[1], None
            elif old[2] != new[2]:
                yield identity, "UPDATE", new[0], new[1], old[1]
            elif old[0] != new[0]:
                yield identity, "MOVE", new[0], new[1], old[1]

    # --- questions -------------------------------------------------------------------------

    def types(self) -> list[tuple[str, str]]:
        """(group, kind) of every object the history holds."""
        rows = self._db.execute("SELECT DISTINCT grp, kind FROM changes").fetchall()
        return [(str(g), str(k)) for g, k in rows]

    def named(self, name: str, types: Sequence[tuple[str, str]]) -> list[Identity]:
        """The identities of that name among `types`."""
        found: set[Identity] = set()
        for group, kind in types:
            rows = self._db.execute(
                "SELECT DISTINCT namespace FROM changes WHERE name = ? AND kind = ? AND grp = ?",
                (name, kind, group),
            ).fetchall()
            found.update(Identity(group, kind, str(ns), name) for (ns,) in rows)
        return sorted(found)

    _SELECT = (
        "SELECT c.seq, c.sha, c.time, c.offset, c.author, c.email, c.source, c.subject,"
        " x.grp, x.kind, x.namespace, x.name, x.op, x.path, x.blob, x.old_blob"
        " FROM changes x JOIN commits c ON c.seq = x.seq"
    )

    @staticmethod
    def _entry(row: Sequence[Any]) -> Entry:
        zone = dt.timezone(dt.timedelta(minutes=int(row[3])))
        commit = Commit(
            sha=str(row[1]),
            seq=int(row[0]),
            time=dt.datetime.fromtimestamp(int(row[2]), zone),
            author=str(row[4]),
            email=str(row[5]),
            source=str(row[6]),
            subject=str(row[7]),
        )
        identity = Identity(str(row[8]), str(row[9]), str(row[10]), str(row[11]))
        return Entry(commit, identity, str(row[12]), str(row[13]), row[14], row[15])

    def changes_of(self, identity: Identity) -> list[Entry]:
        """Every change of one object, oldest first."""
        rows = self._db.execute(
            f"{self._SELECT} WHERE x.name = ? AND x.kind = ? AND x.namespace = ? AND x.grp = ?"
            " ORDER BY x.seq",
            (identity.name, identity.kind, identity.namespace, identity.group),
        ).fetchall()
        return [self._entry(row) for row in rows]

    def window(self, since: dt.datetime, until: dt.datetime | None) -> list[Entry]:
        """Every change committed in [since, until], oldest first."""
        end = int(until.timestamp()) if until is not None else 2**62
        rows = self._db.execute(
            f"{self._SELECT} WHERE c.time >= ? AND c.time <= ? ORDER BY x.seq, x.rowid",
            (int(since.timestamp()), end),
        ).fetchall()
        return [self._entry(row) for row in rows]

    def commit_seq(self, rev: str) -> int | None:
        """Where a commit (full or abbreviated) is on the branch; None when not on it."""
        try:
            oid = self.repo.revparse_single(rev).peel(pygit2.Commit).id
        except (KeyError, ValueError, pygit2.GitError):
            return None
        row = self._db.execute("SELECT seq FROM commits WHERE sha = ?", (str(oid),)).fetchone()
        return int(row[0]) if row else None

    def content(self, entry: Entry) -> dict[str, Any] | None:
        """The object as this change left it (None after a DELETE)."""
        return self.read(entry.blob, entry.identity)

    def read(self, blob: str | None, identity: Identity) -> dict[str, Any] | None:
        if blob is None:
            return None
        obj = self.repo.get(blob)
        return document(obj.data, identity) if isinstance(obj, pygit2.Blob) else None

    def raw(self, entry: Entry) -> bytes | None:
        """The bytes of the object's document as this change left it."""
        if entry.blob is None:
            return None
        return self._objects(pygit2.Oid(hex=entry.blob)).get(entry.identity)
