"""One attempt at writing a batch: a chain of commits built in memory on the remote tip, with
the file edits of each commit checked against the target's index.

The steps are modules of their own: the commit chain (`git.chain`), a commit's edits
(`git.plan`), a document's file (`git.documents`), where a document goes in a kustomized folder
(`mirror.placement`), the render check (`git.rendercheck`), re-encryption (`git.reencrypt`) and
what a build leaves to the next (`git.buildcache`). This module takes each item of the batch
through them."""

from __future__ import annotations

import functools
import posixpath
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pygit2

from kubescribe.api import conditions as c
from kubescribe.git.buildcache import BuildCache, BuiltState
from kubescribe.git.chain import CommitChain
from kubescribe.git.documents import DocumentFiles
from kubescribe.git.index import Entry, TargetIndex, folder_tree
from kubescribe.git.kustomized import multi_documents, old_document, placement, siblings
from kubescribe.git.plan import Plan
from kubescribe.git.records import (
    Group,
    Item,
    Landed,
    Refusal,
    RequestHandle,
    Skipped,
    WriteReport,
)
from kubescribe.git.reencrypt import reencrypt, upkeep_commit
from kubescribe.git.rendercheck import render_check
from kubescribe.git.targets import (
    Committer,
    Encrypting,
    TargetConfig,
    upkeep_key,
)
from kubescribe.mirror import messages
from kubescribe.mirror.authors import Author
from kubescribe.mirror.changes import Change, Operation, PruneMode, Snapshot, TargetKey
from kubescribe.mirror.identity import CORE_GROUP, Identity, ResourceType, listing_order
from kubescribe.mirror.kustomize import KustomizeError, Tree
from kubescribe.mirror.placement import Placement, list_written, place, removal, unlist
from kubescribe.mirror.roots import Forest, Siblings, describe
from kubescribe.net.weblinks import commit_url


@dataclass
class Outcome:
    """`rebuilds`: pushes rejected because the branch moved, each rebuilt on `base`, the
    remote tip the pushed chain was built on (hex). `targets`: each target's result (its
    `commit` the last one this build made for it)."""

    pushed: bool
    targets: dict[TargetKey, WriteReport]
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


@dataclass(frozen=True)
class _Staged:
    """A commit's tree and message, staged on the chain (committed, or one of a group's)."""

    tree: pygit2.Oid
    text: str


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
        self.log = log
        self.targets = targets
        self.chain = CommitChain(repo, committer, base)
        self.state = BuiltState()
        self.made: dict[TargetKey, str] = {}  # the last commit made for each target
        self.refused: dict[TargetKey, list[Refusal]] = {}
        self.written: list[Item] = []
        self.landed: dict[TargetKey, list[Landed]] = {}
        self.commits = {"change": 0, "snapshot": 0}
        self.unknown: set[TargetKey] = set()
        self.requests: dict[RequestHandle, RequestResult] = {}
        self.kerrors: dict[TargetKey, str] = {}  # kustomizations that could not be read
        self.kmissing: dict[TargetKey, str] = {}  # targets held: their kustomize root is gone
        self.kmulti: dict[TargetKey, dict[Identity, str]] = {}
        self.ksiblings: dict[TargetKey, Siblings] = {}

    @property
    def head(self) -> pygit2.Oid | None:
        return self.chain.head

    # -- targets ---------------------------------------------------------------------------
    def index(self, config: TargetConfig) -> TargetIndex:
        """The target's working index, starting from the base tree (built once per tree)."""
        key = config.key
        index = self.state.indexes.get(key)
        if index is not None:
            return index
        ktree = self._load_kustomizations(config)
        cached = self.cache.index(self.repo, self.chain.base_tree, config, ktree, self.log)
        index = self.state.indexes[key] = cached.copy()
        self.state.retained[key] = set(self.cache.retained.get(key, ()))
        self.state.failing[key] = dict(self.cache.failing.get(key, {}))
        return index

    def _load_kustomizations(self, config: TargetConfig) -> Tree | None:
        """The kustomization tree at the target's root in the base tree (None: none)."""
        tree: Tree | None = None
        try:
            tree = self.cache.kustomizations(self.repo, self.chain.base_tree, config)
        except KustomizeError as exc:
            self.kerrors[config.key] = f"kustomization not readable: {exc}"
        except Exception:  # e.g. RecursionError: this target's problem, not the batch's
            self.log.exception("build.kustomization_failed", target=str(config.key))
            self.kerrors[config.key] = "kustomization not readable (see the operator log)"
        self.state.ktrees[config.key] = tree
        if tree is None and config.key not in self.kerrors:
            self._check_root(config)
        return tree

    def _check_root(self, config: TargetConfig) -> None:
        """Hold a target whose kustomize root is gone: a root the spec names (not the folder
        itself), or one this writer wrote through with the same settings. Written as plain
        files, its documents would no longer be rendered by what deploys the folder."""
        kz = config.kustomize
        if kz is None or not (
            kz.root or self.cache.kustomized.get(config.key) == (config.folder, kz)
        ):
            return
        where = posixpath.normpath(posixpath.join(config.folder, kz.root or "."))
        self.kmissing[config.key] = (
            f"{where} holds no kustomization.yaml (kustomize.root): nothing is written for this"
            " target until it is back or the spec changes; what changed meanwhile is written then"
        )

    def _refuse(self, config: TargetConfig, refusal: Refusal) -> None:
        self.refused.setdefault(config.key, []).append(refusal)
        self.index(config)  # loads the target's failing documents
        self.state.failing[config.key][refusal.identity] = (refusal.reason, refusal.message)

    def _refuser(self, config: TargetConfig) -> Callable[[Refusal], None]:
        return lambda refusal: self._refuse(config, refusal)

    def _documents(self, config: TargetConfig) -> DocumentFiles:
        """The target's document files, on the chain's tree."""
        self.index(config)  # loads the target's failing documents
        failing = self.state.failing[config.key]
        return DocumentFiles(self.chain, config, self._refuser(config), failing, self.log)

    # -- items -----------------------------------------------------------------------------
    def apply(self, item: Item) -> None:
        if isinstance(item, Skipped):
            return  # a dropped change (spec.ignore): only its cursor rides along
        config = self.targets.get(item.target)
        if config is None:
            if item.target not in self.unknown:
                self.log.warning("build.unconfigured_target", target=str(item.target))
            self.unknown.add(item.target)
            return
        self.index(config)  # finds out whether its kustomize root is gone
        if config.key in self.kmissing:
            return
        if isinstance(item, Snapshot):
            self._commit(config, self._snapshot(config, item), None, "snapshot", [item])
        elif isinstance(item, Group):
            self._group(config, item)
        else:
            self._commit(config, self._change(config, item), item.author, "change", [item])

    def _commit(
        self,
        config: TargetConfig,
        staged: _Staged | None,
        author: Author | None,
        kind: str,
        items: Iterable[Item],
    ) -> str | None:
        """Commit a staged tree on the chain (nothing when none was staged)."""
        if staged is None:
            return None
        commit = self.made[config.key] = self.chain.commit(staged.tree, staged.text, author)
        self.commits[kind] = self.commits.get(kind, 0) + 1
        self.written.extend(items)
        landed = self.landed.setdefault(config.key, [])
        url = commit_url(config.commit_url, commit)
        landed += [Landed(commit, author, i, url) for i in items if isinstance(i, Change)]
        return commit

    def _group(self, config: TargetConfig, group: Group) -> None:
        """One commit for the changes of a closed window: each applied in order as for a
        single commit, then one commit of the final tree."""
        base_tree = self.chain.tree
        refused = self.refused.setdefault(config.key, [])
        refused_before = len(refused)
        grouped: list[tuple[Change, str]] = []
        for change in group.changes:
            staged = self._change(config, change)
            if staged is not None:
                self.chain.tree = staged.tree
                grouped.append((change, staged.text))
        request = RequestResult(changes=len(grouped), refused=refused[refused_before:])
        if group.request is not None:
            self.requests[group.request] = request
        if self.chain.tree == base_tree or self.chain.tree is None:
            return
        text = self._group_message(config, group, grouped)
        staged = _Staged(self.chain.tree, text)
        items = [change for change, _ in grouped]
        request.commit = self._commit(config, staged, group.author, "change", items)

    def _group_message(
        self, config: TargetConfig, group: Group, grouped: list[tuple[Change, str]]
    ) -> str:
        lines = [text for _, text in grouped]
        if group.message is not None:
            return messages.with_body(group.message, lines)
        if len(grouped) == 1:
            return lines[0]
        author = group.author or self.chain.committer
        values = messages.group_values(
            [change for change, _ in grouped], str(config.key), author.name
        )
        return messages.with_body(messages.render(config.group_template, values), lines)

    def _change(self, config: TargetConfig, change: Change) -> _Staged | None:
        """Plan and stage one change (None: it changes nothing)."""
        index = self.index(config)
        retained = self.state.retained[config.key]
        plan = Plan(index)
        identity = change.identity
        if change.document is None or change.operation is Operation.DELETE:
            self.state.failing[config.key].pop(identity, None)  # nothing left to write
            entry = index.get(identity)
            if entry is None:
                retained.discard(identity)
                return None
            if config.prune is PruneMode.NEVER:
                retained.add(identity)
                return None
            retained.discard(identity)
            self._delete(plan, config, identity, entry)
        else:
            retained.discard(identity)
            self._upsert(config, plan, identity, change.rtype, change.document)

        def message() -> str:
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
                    "path": plan.path_of(identity),
                },
            )

        return self._stage(config, plan, message)

    def _snapshot(self, config: TargetConfig, snapshot: Snapshot) -> _Staged | None:
        index = self.index(config)
        plan = Plan(index)
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
        for identity in sorted(snapshot.documents, key=listing_order):
            document = snapshot.documents[identity]
            self._upsert(config, plan, identity, snapshot.rtype, document)
        self._leave(config, plan, snapshot)
        retained = self.state.retained[config.key]
        retained.difference_update([i for i in retained if snapshot.in_scope(i)])
        retained.update(kept)
        failing = self.state.failing[config.key]
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
                    "removed": len(plan.deletes) + len(plan.left),
                    "target": str(config.key),
                },
            )

        return self._stage(config, plan, message)

    def _leave(self, config: TargetConfig, plan: Plan, snapshot: Snapshot) -> None:
        """A target moved to another folder under prune Always: the documents of the snapshot's
        type and scope in the folder it left go with the snapshot (none inside a folder a
        target writes, the new one too; none when the old folder is inside the new one: its
        documents are edited in place there)."""
        old = config.moved_from
        if old is None or config.prune is not PruneMode.ALWAYS or _inside(old, config.folder):
            return
        index = TargetIndex.build(self.repo, self.chain.tree, old)
        folders = [t.folder for t in self.targets.values()]
        for identity in [i for i in index if snapshot.in_scope(i)]:
            entry = index.get(identity)
            if entry is None or entry.multi or any(_inside(entry.path, f) for f in folders):
                continue
            plan.left.add(entry.path)

    def _stage(
        self, config: TargetConfig, plan: Plan, message: Callable[[], str]
    ) -> _Staged | None:
        """The tree and message of a commit of the plan on the chain (None: it changes
        nothing); the plan becomes the index's."""
        ktree = self.state.ktrees.get(config.key)
        if ktree is not None:
            self.chain.write_kustomizations(ktree, plan)
        tree = self.chain.stage(plan, self._refuser(config))
        if tree is None:
            return None
        text = message()  # before apply: it compares the plan with the index
        plan.apply()
        return None if tree == self.chain.tree else _Staged(tree, text)

    # -- documents -------------------------------------------------------------------------
    def _upsert(
        self,
        config: TargetConfig,
        plan: Plan,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
    ) -> None:
        """Plan writing one document where it lives (or at its layout path, if new)."""
        tree = self.state.ktrees.get(config.key)
        if config.key in self.kerrors:
            refusal = Refusal(identity, c.KUSTOMIZE_UNSUPPORTED, self.kerrors[config.key])
            self._refuse(config, refusal)
        elif tree is not None:
            try:
                self._upsert_kustomized(config, plan, identity, rtype, document, tree)
            except Exception:  # a kustomization that breaks a rule stops this object only
                self.log.exception("build.write_through_failed", target=str(config.key))
                message = "not written through: the kustomization could not be read"
                self._refuse(config, Refusal(identity, c.KUSTOMIZE_UNSUPPORTED, message))
        else:
            self._documents(config).write(plan, identity, rtype, document, config.folder)

    def _upsert_kustomized(
        self,
        config: TargetConfig,
        plan: Plan,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
        tree: Tree,
    ) -> None:
        """Write a document where `mirror.placement` puts it, and list it there."""
        assert config.kustomize is not None
        entry = plan.index.get(identity)
        old_path = entry.path if entry is not None else None
        placement = place(
            tree,
            identity,
            document,
            old_path,
            old=functools.partial(old_document, self.repo, entry),
            elsewhere=lambda: self._multi_documents(config, tree),
            siblings=lambda: self._siblings(config, tree),
            folder=config.folder,
            write_unsupported=config.kustomize.write_unsupported,
        )
        path = None
        if placement.folder is not None:
            path = self._documents(config).write(
                plan,
                identity,
                rtype,
                placement.document,
                placement.folder,
                placement.placed_as,
            )
        if placement.refusal is not None:
            self._refuse(config, Refusal(identity, c.KUSTOMIZE_UNSUPPORTED, placement.refusal))
        elif placement.through and (written := path if placement.folder else old_path):
            if placement.folder is None:  # inherited: kustomizations and a patch edited
                self.state.failing[config.key].pop(identity, None)
            self._list(plan, tree, identity, placement, old_path, written)
            if old_path is None and placement.folder is not None:
                self._siblings(config, tree).add(identity, placement.folder)

    def _list(
        self,
        plan: Plan,
        tree: Tree,
        identity: Identity,
        placement: Placement,
        old: str | None,
        new: str,
    ) -> None:
        """Plan the kustomization edits (and an overlay's patch file) of a written object."""
        edited, named = list_written(tree, placement, old, new)
        plan.kustomizations |= edited
        if (patch := placement.overlaid) is not None:
            plan.files[patch.path] = None if patch.data is None else self.chain.blob(patch.data)
            named = patch.path
        if named is not None:
            plan.paths[identity] = named

    def _multi_documents(self, config: TargetConfig, tree: Tree) -> dict[Identity, str]:
        """Identities rendered from listed files the index does not hold, by their file; read
        once per build (`git.kustomized`)."""
        found = self.kmulti.get(config.key)
        if found is None:
            index = self.index(config)
            found = self.kmulti[config.key] = multi_documents(
                self.repo, self.chain.tree, index, tree
            )
        return found

    def _siblings(self, config: TargetConfig, tree: Tree) -> Siblings:
        """The documents placed so far, by the kustomization that renders them."""
        found = self.ksiblings.get(config.key)
        if found is None:
            found = self.ksiblings[config.key] = siblings(self.index(config), tree)
        return found

    def _delete(self, plan: Plan, config: TargetConfig, identity: Identity, entry: Entry) -> None:
        """Plan removing a document's file, and its entries in the kustomizations."""
        tree = self.state.ktrees.get(config.key)
        old = functools.partial(old_document, self.repo, entry)
        gone = removal(tree, identity, entry.path, old) if tree is not None else None
        if gone is not None and gone.refusal is not None:
            self._refuse(config, Refusal(identity, c.KUSTOMIZE_UNSUPPORTED, gone.refusal))
            return
        if tree is not None and gone is not None:  # inherited: a patch deletes it, base stays
            return self._list(plan, tree, identity, gone, entry.path, entry.path)
        # a multi-document file stays, and stays listed, while it holds other documents
        if self._documents(config).remove(plan, identity, entry) and tree is not None:
            plan.kustomizations |= unlist(tree, identity, entry.path)

    # -- after the items -------------------------------------------------------------------
    def render_check(self, batch: list[Item]) -> None:
        """The render check of the changed objects (see `git.rendercheck`)."""
        render_check(
            self.repo,
            self.chain.tree,
            self.targets,
            self.state.ktrees,
            self.state.failing,
            batch,
            self.log,
            self._plain,
        )

    def _plain(self, key: TargetKey, identity: Identity) -> bool:
        """Whether a document is a plain file of a forest (no kustomization renders it)."""
        tree, entry = self.state.ktrees.get(key), self.state.indexes[key].get(identity)
        return isinstance(tree, Forest) and entry is not None and entry.path not in tree.listed

    def upkeep(self) -> None:
        """Keep encrypted target folders in step with their renderer (see `Encrypting`)."""
        for config in self.targets.values():
            key = upkeep_key(config)
            if key is None:
                continue
            folder_id = folder_tree(self.repo, self.chain.tree, config.folder)
            if self.cache.upkept.get(config.key) != (folder_id, key):
                renderer = config.renderer
                assert isinstance(renderer, Encrypting)
                self._upkeep(config, renderer, key)
            self.state.upkept[config.key] = key

    def _upkeep(self, config: TargetConfig, renderer: Encrypting, key: Any) -> None:
        """One commit: re-encrypted documents and the folder's `.sops.yaml`."""
        plan = Plan(self.index(config))
        known, failed = self.cache.file_recipients, self.cache.rekey_failed
        reencrypt(self.chain, plan, renderer, key, known, failed, self._refuser(config))
        log = self.log.bind(target=str(config.key))
        text = upkeep_commit(self.chain, plan, renderer, config.folder, log)
        if text is None:
            return
        self.made[config.key] = str(self.chain.head)
        self.commits["upkeep"] = self.commits.get("upkeep", 0) + 1
        self.log.info("build.encryption_upkeep", target=str(config.key), message=text)

    def commit_state(self) -> None:
        """The attempt is final (pushed or nothing to push): its indexes become the cache."""
        self.cache.save(self.repo, self.chain.tree, self.targets, self.state)

    def outcome(self, *, pushed: bool) -> Outcome:
        keys = [*self.state.indexes, *self.made, *self.refused]
        results = {
            key: replace(self._result(key), landed=tuple(self.landed.get(key, ())))
            for key in dict.fromkeys(keys)
        }
        return Outcome(
            pushed,
            results,
            self.written,
            self.commits,
            frozenset(self.unknown),
            self.requests,
        )

    def _result(self, key: TargetKey) -> WriteReport:
        """What this build came to for one target."""
        index = self.state.indexes.get(key)
        commit, refused = self.made.get(key), self.refused.get(key, [])
        if index is None:
            return WriteReport(target=key, commit=commit, refused=refused)
        tree, folder = self.state.ktrees.get(key), index.folder
        failing = [
            Refusal(i, *why)
            for i, why in sorted(self.state.failing[key].items(), key=lambda f: listing_order(f[0]))
        ]
        failing += [
            Refusal(
                identity, c.DUPLICATE_IDENTITY, f"{path} holds it again; {first} is the document"
            )
            for path, identity, first in index.duplicated
            if identity in index
        ]
        failing += [
            Refusal(_file_identity(path), c.FILE_TOO_LARGE, f"{path}: {why}; not read, left alone")
            for path, why in index.oversized
        ]
        return WriteReport(
            target=key,
            commit=commit,
            documents=len(index),
            retained=len(self.state.retained[key]),
            duplicates=len(index.duplicated),
            oversized=len(index.oversized),
            refused=refused,
            failing=failing,
            kustomization=describe(tree, folder) if tree is not None else None,
            placement=placement(index, tree, folder) if tree is not None else None,
            held=self.kmissing.get(key, ""),
        )


def _inside(path: str, folder: str) -> bool:
    return not folder or path == folder or path.startswith(f"{folder}/")


def _file_identity(path: str) -> Identity:
    """How status names a file that holds no known document (`File <path>`)."""
    return Identity("", "File", "", path)
