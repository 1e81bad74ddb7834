"""One attempt at writing a batch: a chain of commits built in memory on the remote tip, with
the file edits of each commit checked against the target's index."""

from __future__ import annotations

import os
import posixpath
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pygit2

from kubescribe import metrics
from kubescribe.api import conditions as c
from kubescribe.git.index import Entry, TargetIndex, folder_tree
from kubescribe.git.intake import (
    Group,
    RequestHandle,
    Skipped,
)
from kubescribe.git.lookup_names import lookup_name
from kubescribe.git.sandbox import UnsafeTree, export_tree, run_confined, scratch
from kubescribe.git.targets import (
    SOPS_CONFIG,
    Committer,
    Encrypting,
    Item,
    Refusal,
    RefusedContent,
    TargetConfig,
    upkeep_key,
)
from kubescribe.git.tree import TreeConflict, edit_tree
from kubescribe.gitnames import has_reserved_segment
from kubescribe.mirror import boundedyaml, docedit, messages
from kubescribe.mirror.authors import Author
from kubescribe.mirror.changes import Change, Operation, PruneMode, Snapshot, TargetKey
from kubescribe.mirror.identity import CORE_GROUP, Identity, ResourceType, identity_of
from kubescribe.mirror.kustomize import (
    KUSTOMIZATION_FILES,
    KustomizeError,
    Tree,
    base_name_of,
    build_refusal,
    patched_by,
    remove_replicas,
    render_identity,
    unsupported,
    write_through,
)
from kubescribe.mirror.layout import ENCRYPTED_SUFFIX
from kubescribe.mirror.yamlfmt import load_yaml, load_yaml_all


@dataclass
class BuildCache:
    """What a final build leaves to the next one of its branch (see `Build.commit_state`)."""

    indexes: dict[tuple[TargetKey, str], TargetIndex] = field(default_factory=dict)
    retained: dict[TargetKey, set[Identity]] = field(default_factory=dict)
    failing: dict[TargetKey, dict[Identity, tuple[str, str]]] = field(default_factory=dict)
    # Encryption upkeep: (folder tree, upkeep key) known to be in step, per target; the
    # recipients of encrypted blobs; blobs that could not be re-encrypted, per upkeep key.
    upkept: dict[TargetKey, tuple[pygit2.Oid | None, Any]] = field(default_factory=dict)
    file_recipients: dict[pygit2.Oid, frozenset[str] | None] = field(default_factory=dict)
    rekey_failed: set[tuple[pygit2.Oid, Any]] = field(default_factory=set)
    # Parsed kustomization trees, by (target, root): (target folder tree, tree).
    ktrees: dict[tuple[TargetKey, str], tuple[pygit2.Oid | None, Any]] = field(default_factory=dict)

    def keep_only(self, targets: Mapping[TargetKey, TargetConfig]) -> None:
        """Forget the targets (and folders) no longer written."""
        wanted = {(t.key, t.folder) for t in targets.values()}
        for stale in [k for k in self.indexes if k not in wanted]:
            del self.indexes[stale]
        for gone in [k for k in self.failing if k not in targets]:
            del self.failing[gone]

    def clear(self) -> None:
        self.indexes.clear()
        self.ktrees.clear()
        self.upkept.clear()
        self.file_recipients.clear()


@dataclass
class TargetResult:
    commit: str | None = None
    documents: int = 0
    retained: int = 0
    refused: list[Refusal] = field(default_factory=list)
    failing: list[Refusal] = field(default_factory=list)
    kustomization: str | None = None
    duplicates: int = 0  # files that repeat a document held earlier in tree order
    oversized: int = 0  # files too large to read


@dataclass
class Outcome:
    """`rebuilds`: pushes rejected because the branch moved, each rebuilt on `base`, the
    remote tip the pushed chain was built on (hex)."""

    pushed: bool
    targets: dict[TargetKey, TargetResult]
    written: list[Item]
    commits: dict[str, int]
    unknown: frozenset[TargetKey]
    requests: dict[RequestHandle, RequestResult] = field(default_factory=dict)
    rebuilds: int = 0
    base: str | None = None


@dataclass
class RequestResult:
    """The commit a CommitRequest's window became in one build (None: no change)."""

    commit: str | None = None
    changes: int = 0
    refused: list[Refusal] = field(default_factory=list)


class _Plan:
    """The file edits of one commit, checked against the target's index before they apply."""

    def __init__(self, index: TargetIndex) -> None:
        self.index = index
        self.writes: dict[Identity, Entry] = {}
        self.deletes: dict[Identity, Entry] = {}
        self._written: dict[str, Identity] = {}
        self._freed: set[str] = set()
        # Kustomizations this commit edits (by directory) and their new blobs (by path).
        self.kustomizations: set[str] = set()
        self.files: dict[str, pygit2.Oid] = {}
        self.paths: dict[Identity, str] = {}  # what a change touched when not its own file
        # Multi-document files this commit edits: their new content (None: the file goes).
        self.multi: dict[str, bytes | None] = {}

    def free(self, path: str, identity: Identity) -> bool:
        """Whether `identity` may write `path`: never over another document or someone
        else's file, unless this commit deletes that document."""
        owner = self._written.get(path)
        if owner is not None:
            return owner == identity
        return not self.index.blocked(path, identity) or path in self._freed

    def write(self, identity: Identity, entry: Entry) -> None:
        self.writes[identity] = entry
        self._written[entry.path] = identity

    def delete(self, identity: Identity, entry: Entry) -> None:
        self.deletes[identity] = entry
        self._freed.add(entry.path)

    def drop(self, path: str) -> Identity:
        identity = self._written.pop(path)
        del self.writes[identity]
        return identity

    def edits(self) -> dict[str, pygit2.Oid | None]:
        edits: dict[str, pygit2.Oid | None] = {e.path: None for e in self.deletes.values()}
        for identity in self.writes:
            old = self.index.get(identity)
            if old is not None and old.path not in self._written:
                edits[old.path] = None  # moved between plain and encrypted
        edits.update((e.path, e.oid) for e in self.writes.values())
        edits.update(self.files)
        edits.update((p, None if d is None else pygit2.hash(d)) for p, d in self.multi.items())
        return edits

    def apply(self) -> None:
        for identity in self.deletes:
            self.index.remove(identity)
        for identity, entry in self.writes.items():
            self.index.set(identity, entry)
        for path, data in self.multi.items():
            if data is None:
                self.index.forget(path)


class Build:
    """One attempt at a batch: a chain of commits on `base`, built in memory."""

    def __init__(
        self,
        repo: pygit2.Repository,
        cache: BuildCache,
        committer: Committer,
        log: Any,
        base: pygit2.Oid | None,
        targets: Mapping[TargetKey, TargetConfig],
    ) -> None:
        self.repo = repo
        self.cache = cache
        self.committer = committer
        self.log = log
        self.targets = targets
        self.head = base
        self.tree: pygit2.Oid | None = None
        if base is not None:
            commit = self.repo[base]
            assert isinstance(commit, pygit2.Commit)
            self.tree = commit.tree_id
        self.base_tree = self.tree
        self.indexes: dict[TargetKey, TargetIndex] = {}
        self.retained: dict[TargetKey, set[Identity]] = {}
        # Documents that could not be written and wait for a change, per target.
        self.failing: dict[TargetKey, dict[Identity, tuple[str, str]]] = {}
        self.results: dict[TargetKey, TargetResult] = {}
        self.written: list[Item] = []
        self.commits = {"change": 0, "snapshot": 0}
        self.unknown: set[TargetKey] = set()
        self.grouped: list[tuple[Change, str]] | None = None  # changes of the group being built
        self.requests: dict[RequestHandle, RequestResult] = {}
        self.upkept: dict[TargetKey, Any] = {}
        # The kustomization tree each kustomized target writes through (None: plain folder).
        self.ktrees: dict[TargetKey, Tree | None] = {}
        self.kerrors: dict[TargetKey, str] = {}
        self.kmulti: dict[TargetKey, dict[Identity, str]] = {}

    def index(self, config: TargetConfig) -> TargetIndex:
        """The target's working index, starting from the base tree (built once per tree)."""
        index = self.indexes.get(config.key)
        if index is not None:
            return index
        key = (config.key, config.folder)
        cached = self.cache.indexes.get(key)
        tree_id = folder_tree(self.repo, self.base_tree, config.folder)
        ktree = self._load_kustomizations(config)
        translation = ("kustomize", ktree.root) if ktree is not None else None
        if cached is None or cached.tree_id != tree_id or cached.translation != translation:
            started = time.perf_counter()
            cached = TargetIndex.build(
                self.repo,
                self.base_tree,
                config.folder,
                cached,
                ktree.rendered_identity if ktree is not None else None,
                translation,
            )
            self.cache.indexes[key] = cached
            self.log.info(
                "build.indexed",
                target=str(config.key),
                documents=len(cached),
                duplicates=len(cached.duplicates),
                seconds=round(time.perf_counter() - started, 3),
            )
        index = self.indexes[config.key] = cached.copy()
        self.retained[config.key] = set(self.cache.retained.get(config.key, ()))
        self.failing[config.key] = dict(self.cache.failing.get(config.key, {}))
        return index

    def _load_kustomizations(self, config: TargetConfig) -> Tree | None:
        """The kustomization tree at the target's root in the base tree (None: none)."""
        kz = config.kustomize
        tree: Tree | None = None
        if kz is not None:
            root = posixpath.normpath(posixpath.join(config.folder, kz.root or "."))
            root = "" if root == "." else root
            folder_id = folder_tree(self.repo, self.base_tree, config.folder)
            # Parsed once per folder tree: a build takes the writer's tree (and edits it);
            # `commit_state` gives it back for the tree it built, a failed build drops it.
            cached = self.cache.ktrees.pop((config.key, root), None)
            if cached is not None and cached[0] == folder_id and folder_id is not None:
                tree = cached[1]
            else:
                try:
                    tree = Tree.load(
                        root,
                        lambda path: _read(self.repo, self.base_tree, path),
                        config.folder,
                    )
                except KustomizeError as exc:
                    self.kerrors[config.key] = f"kustomization not readable: {exc}"
                except Exception:  # e.g. RecursionError: this target's problem, not the batch's
                    self.log.exception("build.kustomization_failed", target=str(config.key))
                    self.kerrors[config.key] = "kustomization not readable (see the operator log)"
        self.ktrees[config.key] = tree
        return tree

    def apply(self, item: Item) -> None:
        if isinstance(item, Skipped):
            return  # a dropped change (spec.ignore): only its cursor rides along
        config = self.targets.get(item.target)
        if config is None:
            if item.target not in self.unknown:
                self.log.warning("build.unconfigured_target", target=str(item.target))
            self.unknown.add(item.target)
            return
        if isinstance(item, Snapshot):
            self._snapshot(config, item)
        elif isinstance(item, Group):
            self._group(config, item)
        else:
            self._change(config, item)

    def _group(self, config: TargetConfig, group: Group) -> None:
        """One commit for the changes of a closed window: each applied in order as for a
        single commit, then one commit of the final tree."""
        base_tree = self.tree
        result = self.results.setdefault(config.key, TargetResult())
        refused_before = len(result.refused)
        grouped: list[tuple[Change, str]] = []
        self.grouped = grouped
        try:
            for change in group.changes:
                self._change(config, change)
        finally:
            self.grouped = None
        request = RequestResult(changes=len(grouped), refused=result.refused[refused_before:])
        if group.request is not None:
            self.requests[group.request] = request
        if self.tree == base_tree or self.tree is None:
            return
        lines = [text for _, text in grouped]
        author = group.author or self.committer
        if group.message is not None:
            text = messages.with_body(group.message, lines)
        elif len(grouped) == 1:
            text = lines[0]
        else:
            values = messages.group_values(
                [change for change, _ in grouped], str(config.key), author.name
            )
            text = messages.with_body(messages.render(config.group_template, values), lines)
        self._create_commit(self.tree, text, group.author)
        request.commit = result.commit = str(self.head)
        self.commits["change"] += 1
        self.written.extend(change for change, _ in grouped)

    def _change(self, config: TargetConfig, change: Change) -> None:
        index = self.index(config)
        retained = self.retained[config.key]
        plan = _Plan(index)
        identity = change.identity
        if change.document is None or change.operation is Operation.DELETE:
            self.failing[config.key].pop(identity, None)  # nothing left to write
            entry = index.get(identity)
            if entry is None:
                retained.discard(identity)
                return
            if config.prune is PruneMode.NEVER:
                retained.add(identity)
                return
            retained.discard(identity)
            self._delete(plan, config, identity, entry)
        else:
            retained.discard(identity)
            self._upsert(config, plan, identity, change.rtype, change.document)

        def message() -> str:
            entry = plan.writes.get(identity) or plan.deletes.get(identity)
            path = entry.path if entry is not None else plan.paths[identity]
            rtype = change.rtype
            return messages.render(
                config.change_template,
                {
                    "operation": str(change.operation),
                    "kind": identity.kind,
                    "group": rtype.group or CORE_GROUP,
                    "version": rtype.version,
                    "resource": rtype.resource,
                    "namespace": identity.namespace,
                    "name": identity.name,
                    "ref": identity.ref,
                    "target": str(config.key),
                    "path": path,
                },
            )

        self._commit(config, plan, change, "change", message)

    def _snapshot(self, config: TargetConfig, snapshot: Snapshot) -> None:
        index = self.index(config)
        plan = _Plan(index)
        kept: set[Identity] = set()
        for identity in [i for i in index if snapshot.in_scope(i)]:
            if identity in snapshot.documents:
                continue
            prune = config.prune
            if prune is PruneMode.ALWAYS or (
                prune is PruneMode.ON_EVENT and identity in snapshot.deleted
            ):
                entry = index.get(identity)
                assert entry is not None
                self._delete(plan, config, identity, entry)
            else:
                kept.add(identity)
        for identity in sorted(snapshot.documents, key=_sort_key):
            document = snapshot.documents[identity]
            self._upsert(config, plan, identity, snapshot.rtype, document)
        retained = self.retained[config.key]
        retained.difference_update([i for i in retained if snapshot.in_scope(i)])
        retained.update(kept)
        failing = self.failing[config.key]
        for identity in [i for i in failing if snapshot.in_scope(i)]:
            held = failing[identity][0] == c.KUSTOMIZE_UNSUPPORTED and identity in index
            if identity not in snapshot.documents and not held:  # held: a patch keeps it
                del failing[identity]

        def message() -> str:
            added = sum(1 for i in plan.writes if i not in index)
            rtype = snapshot.rtype
            return messages.render(
                config.snapshot_template,
                {
                    "resource": rtype.resource,
                    "group": rtype.group or CORE_GROUP,
                    "scope": snapshot.namespace or "cluster",
                    "added": added,
                    "updated": len(plan.writes) - added,
                    "removed": len(plan.deletes),
                    "target": str(config.key),
                },
            )

        self._commit(config, plan, snapshot, "snapshot", message)

    def _upsert(
        self,
        config: TargetConfig,
        plan: _Plan,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
    ) -> None:
        """Plan writing one document where it lives (or at its layout path, if new)."""
        tree = self.ktrees.get(config.key)
        if config.key in self.kerrors:
            self._refuse(config, identity, c.KUSTOMIZE_UNSUPPORTED, self.kerrors[config.key])
        elif tree is not None:
            try:
                self._upsert_kustomized(config, plan, identity, rtype, document, tree)
            except Exception:  # a kustomization that breaks a rule stops this object only
                self.log.exception("build.write_through_failed", target=str(config.key))
                message = "not written through: the kustomization could not be read"
                self._refuse(config, identity, c.KUSTOMIZE_UNSUPPORTED, message)
        else:
            self._write(config, plan, identity, rtype, document, config.folder)

    def _write(
        self,
        config: TargetConfig,
        plan: _Plan,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
        folder: str,
        placed_as: Identity | None = None,
    ) -> str | None:
        """Plan the document's file (new ones at the layout path of `placed_as`, by default
        their identity, under `folder`); the path written (also when unchanged), None when
        refused."""
        entry = plan.index.get(identity)
        multi: bytes | None = None  # the multi-document file the document lives in
        path = ""
        try:
            encrypted = config.renderer.encrypted(rtype)
            previous: bytes | None = None
            held = identity
            if entry is not None and entry.multi:
                held = entry.held or identity  # as the file knows it
                current = self._multi_file(plan, entry.path)
                if encrypted or current is None:  # encrypted documents get a file of their own
                    if current is not None:
                        self._keep_multi(plan, entry.path, docedit.remove(current, held))
                    entry = None
                else:
                    multi, previous = current, docedit.body_of(current, held)
            if entry is None:
                path = posixpath.join(
                    folder,
                    config.layout.path_for(placed_as or identity, rtype, encrypted=encrypted),
                )
            elif multi is not None:
                path = entry.path
            elif entry.path.endswith(ENCRYPTED_SUFFIX) == encrypted:
                path = entry.path
                blob = self.repo[entry.oid]
                assert isinstance(blob, pygit2.Blob)
                previous = blob.data
            else:
                path = _swap_suffix(entry.path, encrypted)
            if (entry is None or entry.path != path) and has_reserved_segment(path):
                raise RefusedContent(c.INVALID_PATH, f"{path}: Git refuses a segment of this path")
            if multi is None and not plan.free(path, identity):
                raise RefusedContent(c.PATH_CONFLICT, f"{path} already holds another file")
            data = config.renderer.render(identity, rtype, document, previous)
            rendered = data
            ours = entry is not None and entry.rendered and multi is None
            if previous is not None and not encrypted and not ours:
                # A file a person keeps: unchanged content keeps its bytes, a change keeps
                # comments and formatting where values did not change.
                data = docedit.adopt(previous, document, data)
            if multi is not None:
                if data == previous:
                    self.failing[config.key].pop(identity, None)
                    return path
                data = docedit.replace(multi, held, data)
        except RefusedContent as refused:
            self._refuse(config, identity, refused.reason, refused.message)
            return None
        except Exception as exc:  # one bad document must not block the branch
            self.log.exception("build.render_failed", target=str(config.key), kind=identity.kind)
            where = f"{path}: " if path else ""
            self._refuse(config, identity, c.RENDER_FAILED, f"{where}{type(exc).__name__}: {exc}")
            return None
        oid = pygit2.hash(data)
        self.failing[config.key].pop(identity, None)
        if multi is not None:
            self._keep_multi(plan, path, data)
            plan.write(identity, Entry(path, oid, multi=True, held=held))
            return path
        if entry is not None and entry.path == path and entry.oid == oid:
            return path
        self.repo.create_blob(data)
        plan.write(identity, Entry(path, oid, rendered=data == rendered and not encrypted))
        return path

    def _multi_file(self, plan: _Plan, path: str) -> bytes | None:
        """A multi-document file as this commit has it so far."""
        return plan.multi[path] if path in plan.multi else self._file(path)

    def _keep_multi(self, plan: _Plan, path: str, data: bytes | None) -> None:
        plan.multi[path] = data
        if data is not None:
            self.repo.create_blob(data)

    def _upsert_kustomized(
        self,
        config: TargetConfig,
        plan: _Plan,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
        tree: Tree,
    ) -> None:
        """Write a document through the kustomization that lists its file (a new one is
        placed under the root kustomization's folder and listed there): the fields the
        kustomizations govern are edited there, the file keeps its own values of them."""
        assert config.kustomize is not None
        entry = plan.index.get(identity)
        chain = tree.chain_of(entry.path) if entry is not None else None
        listed = chain is not None
        if chain is None:
            if entry is not None and not _under(entry.path, tree.root):
                # A file the rendered folder does not include (and cannot: kustomize loads
                # files only from under a kustomization): edited where it is, and reported.
                self._write(config, plan, identity, rtype, document, config.folder)
                root = tree.kustomizations[tree.root].path
                self._refuse(
                    config,
                    identity,
                    c.KUSTOMIZE_UNSUPPORTED,
                    f"not written through: {entry.path} is not rendered by {root}",
                )
                return
            if entry is None and (held := self._multi_documents(config, tree).get(identity)):
                # rendered from a file of several documents: a new file would duplicate it
                self._refuse(
                    config,
                    identity,
                    c.KUSTOMIZE_UNSUPPORTED,
                    f"not written through: rendered from the multi-document file {held}",
                )
                return
            chain = tree.chain(tree.root)
        base_name = base_name_of(identity, chain)
        problem = unsupported(identity, chain, tree, base_name)
        edits = {}
        content = dict(document)
        if problem is None:
            old: Mapping[str, Any] | None = None
            if entry is not None and not entry.path.endswith(ENCRYPTED_SUFFIX):
                blob = self.repo[entry.oid]
                assert isinstance(blob, pygit2.Blob)
                try:
                    boundedyaml.check(blob.data)
                    loaded = load_yaml(blob.data)
                except Exception:
                    loaded = None
                old = loaded if isinstance(loaded, dict) else None
            through = write_through(document, identity, old, chain)
            problem, content, edits = through.problem, through.document, through.edits
        if problem is not None:
            if config.kustomize.write_unsupported:
                self._write(config, plan, identity, rtype, document, tree.root)
            self._refuse(
                config, identity, c.KUSTOMIZE_UNSUPPORTED, f"not written through: {problem}"
            )
            return
        placed_as = Identity(identity.group, identity.kind, identity.namespace, base_name)
        path = self._write(config, plan, identity, rtype, content, tree.root, placed_as)
        if path is None:
            return
        if not listed:
            plan.kustomizations.add(tree.add_file(path))
            plan.paths[identity] = tree.kustomizations[tree.root].path
        elif entry is not None and entry.path != path:
            moved = tree.move_file(entry.path, path)
            if moved is not None:
                plan.kustomizations.add(moved)
        for k in edits.values():
            tree.replace(k)
            plan.kustomizations.add(k.dir)
            plan.paths[identity] = k.path

    def _multi_documents(self, config: TargetConfig, tree: Tree) -> dict[Identity, str]:
        """Identities rendered from listed files the index does not hold (several documents,
        or not a single object), by their file; read once per build."""
        found = self.kmulti.get(config.key)
        if found is not None:
            return found
        found = self.kmulti[config.key] = {}
        index = self.index(config)
        for path in list(tree.files()):
            if index.holds(path):
                continue
            data = _read(self.repo, self.tree, path)
            chain = tree.chain_of(path)
            if data is None or chain is None:
                continue
            try:
                boundedyaml.check(data)
                docs = load_yaml_all(data)
            except Exception:
                continue
            for doc in docs:
                held = identity_of(doc) if isinstance(doc, dict) else None
                if held is not None:
                    found.setdefault(render_identity(held, chain), path)
        return found

    def _delete(self, plan: _Plan, config: TargetConfig, identity: Identity, entry: Entry) -> None:
        """Plan removing a document's file, and its entries in the kustomizations."""
        tree = self.ktrees.get(config.key)
        chain = tree.chain_of(entry.path) if tree is not None else None
        if tree is not None and chain is not None:
            patch = patched_by(identity, chain, tree, base_name_of(identity, chain))
            if patch is not None:  # removing the file would break `kustomize build`
                self._refuse(
                    config,
                    identity,
                    c.KUSTOMIZE_UNSUPPORTED,
                    f"not removed: {patch} targets it (remove the patch first)",
                )
                return
        if entry.multi:
            current = self._multi_file(plan, entry.path)
            held = entry.held or identity
            left = docedit.remove(current, held) if current is not None else None
            self._keep_multi(plan, entry.path, left)
            plan.deletes[identity] = entry
            if left is not None:
                return  # the file stays, and stays listed
        else:
            plan.delete(identity, entry)
        if tree is None or chain is None:
            return
        removed = tree.remove_file(entry.path)
        if removed is not None:
            plan.kustomizations.add(removed)
        for k in remove_replicas(chain, identity, base_name_of(identity, chain)).values():
            tree.replace(k)
            plan.kustomizations.add(k.dir)

    def _refuse(self, config: TargetConfig, identity: Identity, reason: str, message: str) -> None:
        result = self.results.setdefault(config.key, TargetResult())
        result.refused.append((identity, reason, message))
        self.index(config)  # loads the target's failing documents
        self.failing[config.key][identity] = (reason, message)

    def _commit(
        self,
        config: TargetConfig,
        plan: _Plan,
        item: Item,
        kind: str,
        message: Callable[[], str],
    ) -> None:
        """Commit the plan on the chain; nothing when it changes nothing."""
        ktree = self.ktrees.get(config.key)
        if ktree is not None:
            for directory in sorted(plan.kustomizations):
                k = ktree.flush(directory)
                data = k.dump()
                oid = pygit2.hash(data)
                self.repo.create_blob(data)
                plan.files[k.path] = oid
        while True:
            edits = plan.edits()
            if not edits:
                return
            try:
                tree = edit_tree(self.repo, self.tree, edits)
                break
            except TreeConflict as conflict:
                identity = plan.drop(conflict.path)
                self._refuse(config, identity, c.PATH_CONFLICT, str(conflict))
            except Exception:  # one document Git will not store must not block the branch
                if not self._drop_unwritable(config, plan):
                    raise
        text = message()  # before apply: it compares the plan with the index
        plan.apply()
        if tree == self.tree:
            return
        if self.grouped is not None and isinstance(item, Change):
            self.grouped.append((item, text))  # `_group` makes one commit of them all
            self.tree = tree
            return
        self._create_commit(tree, text, item.author if isinstance(item, Change) else None)
        self.results.setdefault(config.key, TargetResult()).commit = str(self.head)
        self.commits[kind] += 1
        self.written.append(item)

    def _drop_unwritable(self, config: TargetConfig, plan: _Plan) -> bool:
        """Refuse the planned writes that fail on their own; False when none does."""
        found = False
        for path, entry in [(e.path, e) for e in plan.writes.values()]:
            try:
                edit_tree(self.repo, self.tree, {path: entry.oid})
            except TreeConflict:
                continue  # the retry reports it
            except Exception as exc:
                self._refuse(config, plan.drop(path), c.INVALID_PATH, f"{path}: {exc}")
                found = True
        return found

    def render_check(self, batch: list[Item]) -> None:
        """For targets with a render check: `kustomize build` of the root in the built tree
        must give every changed object as it is live (deleted ones: not at all). A difference
        is `RenderMismatch` for that object until a later check agrees."""
        changes: dict[TargetKey, dict[Identity, Change]] = {}
        for item in batch:
            members = item.changes if isinstance(item, Group) else [item]
            for change in members:
                if isinstance(change, Change):
                    changes.setdefault(change.target, {})[change.identity] = change
        for key, changed in changes.items():
            config = self.targets.get(key)
            ktree = self.ktrees.get(key)
            if config is None or config.kustomize is None or ktree is None:
                continue
            if config.kustomize.render_check_unavailable:
                metrics.RENDER_CHECKS.labels("unavailable").inc(len(changed))
                continue
            binary = config.kustomize.render_check
            if not binary:
                continue
            failing = self.failing[key]
            started = time.perf_counter()
            try:
                rendered = self._kustomize_build(binary, config.folder, ktree.root)
            except Exception as exc:
                # kustomize's error stays in the log: in status it would tell a repository
                # writer what the operator's Pod can reach.
                self.log.warning(
                    "build.render_check_failed",
                    target=str(key),
                    error=str(exc),
                    detail=str(exc.__cause__ or ""),
                )
                first = min(changed, key=_sort_key)
                if isinstance(exc, _NotBuilt):
                    failing[first] = (c.KUSTOMIZE_UNSUPPORTED, f"render check not run: {exc}")
                else:
                    failing[first] = (c.RENDER_MISMATCH, _BUILD_FAILED)
                metrics.RENDER_CHECKS.labels("failed").inc()
                continue
            for identity, change in changed.items():
                if config.renderer.encrypted(change.rtype) or failing.get(identity, ("",))[
                    0
                ] not in (c.RENDER_MISMATCH, ""):
                    continue  # ciphertext, or already reported for another reason
                got = rendered.get(identity)
                want = None if change.document is None else dict(change.document)
                metrics.RENDER_CHECKS.labels("match" if got == want else "mismatch").inc()
                if got == want:
                    failing.pop(identity, None)
                else:
                    what = "still renders" if want is None else "renders differently"
                    failing[identity] = (c.RENDER_MISMATCH, f"kustomize build {what} than live")
            metrics.RENDER_CHECK_SECONDS.observe(time.perf_counter() - started)
            self.log.info(
                "build.render_check",
                target=str(key),
                objects=len(changed),
                seconds=round(time.perf_counter() - started, 3),
            )

    def _kustomize_build(
        self, binary: str, folder: str, root: str
    ) -> dict[Identity, dict[str, Any]]:
        """`kustomize build` of `root`, with the target folder of the built tree in a scratch
        folder of the sandbox (see `git.sandbox`); `_NotBuilt` for a tree kustomize is not
        given."""
        with scratch("render-") as directory:
            top = folder_tree(self.repo, self.tree, folder)
            try:
                files = export_tree(self.repo, top, directory) if top is not None else []
            except UnsafeTree as exc:
                raise _NotBuilt("a tree entry name is not a plain file name") from exc
            for path in files:
                if posixpath.basename(path) in KUSTOMIZATION_FILES:
                    refusal = build_refusal(path, (directory / path).read_bytes())
                    if refusal is not None:
                        raise _NotBuilt(refusal)
            program = shutil.which(binary)
            if program is None:
                raise RuntimeError(f"no kustomize binary at {binary}")
            inner = posixpath.relpath(root, folder) if folder else (root or ".")
            done = run_confined(
                [
                    os.path.abspath(program),
                    "build",
                    "--load-restrictor=LoadRestrictionsRootOnly",
                    posixpath.join(".", inner),
                ],
                cwd=directory,
                timeout=60,
            )
        if done.returncode != 0:
            raise RuntimeError(done.stderr.decode(errors="replace").strip()[-500:])
        out: dict[Identity, dict[str, Any]] = {}
        for doc in load_yaml_all(done.stdout):
            identity = identity_of(doc) if isinstance(doc, dict) else None
            if identity is not None:
                out[identity] = doc
        return out

    def upkeep(self) -> None:
        """Keep encrypted target folders in step with their renderer (see `Encrypting`)."""
        for config in self.targets.values():
            key = upkeep_key(config)
            if key is None:
                continue
            folder_id = folder_tree(self.repo, self.tree, config.folder)
            if self.cache.upkept.get(config.key) != (folder_id, key):
                renderer = config.renderer
                assert isinstance(renderer, Encrypting)
                self._upkeep(config, renderer, key)
            self.upkept[config.key] = key

    def _file(self, path: str) -> bytes | None:
        """The content of the file at `path` in the build's tree, if there is one."""
        root = self.repo[self.tree] if self.tree is not None else None
        if not isinstance(root, pygit2.Tree):
            return None
        try:
            blob = self.repo[root[path].id]
        except KeyError:
            return None
        return blob.data if isinstance(blob, pygit2.Blob) else None

    def _reencrypt(self, config: TargetConfig, renderer: Encrypting, key: Any) -> _Plan:
        """Plan every encrypted document whose recipients differ, encrypted for the new ones."""
        plan = _Plan(self.index(config))
        wanted = frozenset(renderer.recipients)
        cache, failed = self.cache.file_recipients, self.cache.rekey_failed
        for identity in list(plan.index):
            entry = plan.index.get(identity)
            assert entry is not None
            if not entry.path.endswith(ENCRYPTED_SUFFIX) or (entry.oid, key) in failed:
                continue
            if entry.oid not in cache:
                cache[entry.oid] = renderer.recipients_of(self.repo[entry.oid].read_raw())
            if cache[entry.oid] in (None, wanted):
                continue
            try:
                data = renderer.rekey(identity, self.repo[entry.oid].read_raw())
            except Exception as exc:  # the file stays as it is; reported once per key
                failed.add((entry.oid, key))
                if isinstance(exc, RefusedContent):
                    self._refuse(config, identity, exc.reason, exc.message)
                else:
                    self._refuse(config, identity, c.REENCRYPT_FAILED, type(exc).__name__)
                continue
            oid = pygit2.hash(data)
            self.repo.create_blob(data)
            cache[oid] = wanted
            plan.write(identity, Entry(entry.path, oid))
        return plan

    def _upkeep(self, config: TargetConfig, renderer: Encrypting, key: Any) -> None:
        """One commit: re-encrypted documents and the folder's `.sops.yaml`."""
        plan = self._reencrypt(config, renderer, key)
        edits = plan.edits()
        config_path = posixpath.join(config.folder, SOPS_CONFIG)
        current = self._file(config_path)
        sops_config = renderer.sops_config(current)
        if sops_config is not None and sops_config != current:
            self.repo.create_blob(sops_config)
            edits[config_path] = pygit2.hash(sops_config)
        if not edits:
            return
        try:
            tree = edit_tree(self.repo, self.tree, edits)
        except TreeConflict as conflict:
            self.log.warning("build.upkeep_skipped", target=str(config.key), error=str(conflict))
            return
        plan.apply()
        recipients = _count(len(set(renderer.recipients)), "age recipient")
        verb = "Update" if current is not None else "Write"
        if plan.writes:
            text = f"Re-encrypt {_count(len(plan.writes), 'document')} for {recipients}"
            if config_path in edits:
                text += f"\n\n{verb} {SOPS_CONFIG}"
        else:
            text = f"{verb} {SOPS_CONFIG} for {recipients}"
        self._create_commit(tree, text, None)
        self.results.setdefault(config.key, TargetResult()).commit = str(self.head)
        self.commits["upkeep"] = self.commits.get("upkeep", 0) + 1
        self.log.info("build.encryption_upkeep", target=str(config.key), message=text)

    def _create_commit(self, tree: pygit2.Oid, text: str, author: Author | None) -> None:
        """Commit `tree` on the chain. `author` None: the committer (snapshots, and every
        commit under `configured-author`); otherwise the actor, or `UNRESOLVED`."""
        committer = pygit2.Signature(self.committer.name, self.committer.email)
        signature = committer if author is None else _signature(author)
        if author is not None and author.source:
            text = f"{text.rstrip()}\n\n{AUTHOR_SOURCE_TRAILER}: {author.source}\n"
        parents = [self.head] if self.head is not None else []
        self.head = self.repo.create_commit(None, signature, committer, text, tree, parents)
        self.tree = tree

    def commit_state(self) -> None:
        """The attempt is final (pushed or nothing to push): its indexes become the cache."""
        for key, ktree in self.ktrees.items():
            if ktree is not None:
                folder_id = folder_tree(self.repo, self.tree, self.targets[key].folder)
                self.cache.ktrees[(key, ktree.root)] = (folder_id, ktree)
        for key, index in self.indexes.items():
            index.tree_id = folder_tree(self.repo, self.tree, index.folder)
            self.cache.indexes[(key, index.folder)] = index
            self.cache.retained[key] = self.retained[key]
            self.cache.failing[key] = self.failing[key]
        for key, upkept in self.upkept.items():
            # Everything written in this build was rendered for the same recipients.
            folder = self.targets[key].folder
            self.cache.upkept[key] = (folder_tree(self.repo, self.tree, folder), upkept)

    def outcome(self, *, pushed: bool) -> Outcome:
        for key, index in self.indexes.items():
            result = self.results.setdefault(key, TargetResult())
            result.documents = len(index)
            result.retained = len(self.retained[key])
            tree = self.ktrees.get(key)
            if tree is not None:
                result.kustomization = tree.kustomizations[tree.root].path
            result.failing = [
                (i, *why)
                for i, why in sorted(self.failing[key].items(), key=lambda f: _sort_key(f[0]))
            ]
            result.failing += [
                (identity, c.DUPLICATE_IDENTITY, f"{path} holds it again; {first} is the document")
                for path, identity, first in index.duplicated
                if identity in index
            ]
            result.duplicates = len(index.duplicated)
            result.failing += [
                (_file_identity(path), c.FILE_TOO_LARGE, f"{path}: {why}; not read, left alone")
                for path, why in index.oversized
            ]
            result.oversized = len(index.oversized)
        return Outcome(
            pushed,
            self.results,
            self.written,
            self.commits,
            frozenset(self.unknown),
            self.requests,
        )


AUTHOR_SOURCE_TRAILER = "Kubescribe-Author-Source"
_BUILD_FAILED = "kustomize build failed (its error is in the operator log)"


class _NotBuilt(ValueError):
    """A tree the render check does not give to kustomize (why, in the message)."""


def _signature(author: Author) -> pygit2.Signature:
    """A Git identity from an attributed author (user names may hold anything)."""

    def clean(value: str, fallback: str) -> str:
        value = "".join(" " if c in "<>\n\r\0" else c for c in value).strip()
        return value or fallback

    return pygit2.Signature(clean(author.name, "unknown"), clean(author.email, "unknown"))


def _file_identity(path: str) -> Identity:
    """How status names a file that holds no known document (`File <path>`)."""
    return Identity("", "File", "", path)


def _sort_key(identity: Identity) -> tuple[str, str, str, str]:
    return (identity.namespace, identity.name, identity.group, identity.kind)


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _read(repo: pygit2.Repository, root: pygit2.Oid | None, path: str) -> bytes | None:
    """The content of the file at `path` in the root tree `root`, if there is one."""
    tree = repo[root] if root is not None else None
    if not isinstance(tree, pygit2.Tree):
        return None
    try:
        obj = repo[tree[lookup_name(path)].id]
    except KeyError:
        return None
    return obj.data if isinstance(obj, pygit2.Blob) else None


def _under(path: str, folder: str) -> bool:
    return not folder or path.startswith(folder + "/")


def _swap_suffix(path: str, encrypted: bool) -> str:
    if encrypted:
        return path.removesuffix(".yml").removesuffix(".yaml") + ENCRYPTED_SUFFIX
    return path.removesuffix(ENCRYPTED_SUFFIX) + ".yaml"
