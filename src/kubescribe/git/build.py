"""One attempt at writing a batch: a chain of commits built in memory on the remote tip, with
the file edits of each commit checked against the target's index."""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pygit2

from kubescribe.git.index import Entry, TargetIndex, folder_tree
from kubescribe.git.pack import write_blobs
from kubescribe.git.targets import (
    INVALID_PATH,
    PACK_THRESHOLD,
    PATH_CONFLICT,
    REENCRYPT_FAILED,
    RENDER_FAILED,
    SOPS_CONFIG,
    Encrypting,
    Item,
    Refusal,
    RefusedContent,
    TargetConfig,
    upkeep_key,
)
from kubescribe.git.tree import TreeConflict, edit_tree
from kubescribe.git.windowing import (
    Group,
    RequestHandle,
)
from kubescribe.gitnames import has_reserved_segment
from kubescribe.mirror import messages
from kubescribe.mirror.authors import Author
from kubescribe.mirror.changes import Change, Operation, PruneMode, Snapshot, TargetKey
from kubescribe.mirror.identity import CORE_GROUP, Identity, ResourceType
from kubescribe.mirror.layout import ENCRYPTED_SUFFIX

if TYPE_CHECKING:
    from kubescribe.git.worker import Writer


@dataclass
class TargetResult:
    commit: str | None = None
    documents: int = 0
    retained: int = 0
    refused: list[Refusal] = field(default_factory=list)
    failing: list[Refusal] = field(default_factory=list)


@dataclass
class Outcome:
    pushed: bool
    targets: dict[TargetKey, TargetResult]
    written: list[Item]
    commits: dict[str, int]
    unknown: frozenset[TargetKey]
    requests: dict[RequestHandle, RequestResult] = field(default_factory=dict)


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
        return edits

    def apply(self) -> None:
        for identity in self.deletes:
            self.index.remove(identity)
        for identity, entry in self.writes.items():
            self.index.set(identity, entry)


class Build:
    """One attempt at a batch: a chain of commits on `base`, built in memory."""

    def __init__(
        self, writer: Writer, base: pygit2.Oid | None, targets: Mapping[TargetKey, TargetConfig]
    ) -> None:
        self.writer = writer
        self.repo = writer.open().repo
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
        self.blobs: dict[pygit2.Oid, bytes] = {}  # planned, not yet stored
        self.grouped: list[tuple[Change, str]] | None = None  # changes of the group being built
        self.requests: dict[RequestHandle, RequestResult] = {}
        self.upkept: dict[TargetKey, Any] = {}

    def index(self, config: TargetConfig) -> TargetIndex:
        """The target's working index, starting from the base tree (built once per tree)."""
        index = self.indexes.get(config.key)
        if index is not None:
            return index
        key = (config.key, config.folder)
        cached = self.writer.indexes.get(key)
        tree_id = folder_tree(self.repo, self.base_tree, config.folder)
        if cached is None or cached.tree_id != tree_id:
            started = time.perf_counter()
            cached = TargetIndex.build(self.repo, self.base_tree, config.folder, cached)
            self.writer.indexes[key] = cached
            self.writer.log.info(
                "indexed",
                target=str(config.key),
                documents=len(cached),
                duplicates=len(cached.duplicates),
                seconds=round(time.perf_counter() - started, 3),
            )
        index = self.indexes[config.key] = cached.copy()
        self.retained[config.key] = set(self.writer.retained.get(config.key, ()))
        self.failing[config.key] = dict(self.writer.failing.get(config.key, {}))
        return index

    def apply(self, item: Item) -> None:
        config = self.targets.get(item.target)
        if config is None:
            if item.target not in self.unknown:
                self.writer.log.warning("item for an unconfigured target", target=str(item.target))
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
        author = group.author or self.writer.committer
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
            plan.delete(identity, entry)
        else:
            retained.discard(identity)
            self._upsert(config, plan, identity, change.rtype, change.document)

        def message() -> str:
            entry = plan.writes.get(identity) or plan.deletes[identity]
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
                    "path": entry.path,
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
                plan.delete(identity, entry)
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
            if identity not in snapshot.documents:
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
        entry = plan.index.get(identity)
        try:
            encrypted = config.renderer.encrypted(rtype)
            previous: bytes | None = None
            if entry is None:
                path = posixpath.join(
                    config.folder, config.layout.path_for(identity, rtype, encrypted=encrypted)
                )
            elif entry.path.endswith(ENCRYPTED_SUFFIX) == encrypted:
                path = entry.path
                blob = self.repo[entry.oid]
                assert isinstance(blob, pygit2.Blob)
                previous = blob.data
            else:
                path = _swap_suffix(entry.path, encrypted)
            if (entry is None or entry.path != path) and has_reserved_segment(path):
                raise RefusedContent(INVALID_PATH, f"{path}: Git refuses a segment of this path")
            if not plan.free(path, identity):
                raise RefusedContent(PATH_CONFLICT, f"{path} already holds another file")
            data = config.renderer.render(identity, rtype, document, previous)
        except RefusedContent as refused:
            self._refuse(config, identity, refused.reason, refused.message)
            return
        except Exception as exc:  # one bad document must not block the branch
            self.writer.log.exception(
                "rendering failed", target=str(config.key), kind=identity.kind
            )
            self._refuse(config, identity, RENDER_FAILED, f"{type(exc).__name__}: {exc}")
            return
        oid = pygit2.hash(data)
        self.failing[config.key].pop(identity, None)
        if entry is not None and entry.path == path and entry.oid == oid:
            return
        self.blobs[oid] = data
        plan.write(identity, Entry(path, oid))

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
        self._store_blobs()
        while True:
            edits = plan.edits()
            if not edits:
                return
            try:
                tree = edit_tree(self.repo, self.tree, edits)
                break
            except TreeConflict as conflict:
                identity = plan.drop(conflict.path)
                self._refuse(config, identity, PATH_CONFLICT, str(conflict))
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
                self._refuse(config, plan.drop(path), INVALID_PATH, f"{path}: {exc}")
                found = True
        return found

    def upkeep(self) -> None:
        """Keep encrypted target folders in step with their renderer (see `Encrypting`)."""
        for config in self.targets.values():
            key = upkeep_key(config)
            if key is None:
                continue
            folder_id = folder_tree(self.repo, self.tree, config.folder)
            if self.writer.upkept.get(config.key) != (folder_id, key):
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
        cache, failed = self.writer.file_recipients, self.writer.rekey_failed
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
                    self._refuse(config, identity, REENCRYPT_FAILED, type(exc).__name__)
                continue
            oid = pygit2.hash(data)
            self.blobs[oid] = data
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
            self.blobs[pygit2.hash(sops_config)] = sops_config
            edits[config_path] = pygit2.hash(sops_config)
        self._store_blobs()
        if not edits:
            return
        try:
            tree = edit_tree(self.repo, self.tree, edits)
        except TreeConflict as conflict:
            self.writer.log.warning("upkeep skipped", target=str(config.key), error=str(conflict))
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
        self.writer.log.info("encryption upkeep", target=str(config.key), message=text)

    def _create_commit(self, tree: pygit2.Oid, text: str, author: Author | None) -> None:
        """Commit `tree` on the chain. `author` None: the committer (snapshots, and every
        commit under `configured-author`); otherwise the actor, or `UNRESOLVED`."""
        committer = pygit2.Signature(self.writer.committer.name, self.writer.committer.email)
        signature = committer if author is None else _signature(author)
        parents = [self.head] if self.head is not None else []
        self.head = self.repo.create_commit(None, signature, committer, text, tree, parents)
        self.tree = tree

    def _store_blobs(self) -> None:
        if len(self.blobs) >= PACK_THRESHOLD:
            write_blobs(self.repo, self.blobs.values())
        else:
            for data in self.blobs.values():
                self.repo.create_blob(data)
        self.blobs.clear()

    def commit_state(self) -> None:
        """The attempt is final (pushed or nothing to push): its indexes become the cache."""
        for key, index in self.indexes.items():
            index.tree_id = folder_tree(self.repo, self.tree, index.folder)
            self.writer.indexes[(key, index.folder)] = index
            self.writer.retained[key] = self.retained[key]
            self.writer.failing[key] = self.failing[key]
        for key, upkept in self.upkept.items():
            # Everything written in this build was rendered for the same recipients.
            folder = self.targets[key].folder
            self.writer.upkept[key] = (folder_tree(self.repo, self.tree, folder), upkept)

    def outcome(self, *, pushed: bool) -> Outcome:
        for key, index in self.indexes.items():
            result = self.results.setdefault(key, TargetResult())
            result.documents = len(index)
            result.retained = len(self.retained[key])
            result.failing = [
                (i, *why)
                for i, why in sorted(self.failing[key].items(), key=lambda f: _sort_key(f[0]))
            ]
        return Outcome(
            pushed,
            self.results,
            self.written,
            self.commits,
            frozenset(self.unknown),
            self.requests,
        )


def _signature(author: Author) -> pygit2.Signature:
    """A Git identity from an attributed author (user names may hold anything)."""

    def clean(value: str, fallback: str) -> str:
        value = "".join(" " if c in "<>\n\r\0" else c for c in value).strip()
        return value or fallback

    return pygit2.Signature(clean(author.name, "unknown"), clean(author.email, "unknown"))


def _sort_key(identity: Identity) -> tuple[str, str, str, str]:
    return (identity.namespace, identity.name, identity.group, identity.kind)


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _swap_suffix(path: str, encrypted: bool) -> str:
    if encrypted:
        return path.removesuffix(".yaml") + ENCRYPTED_SUFFIX
    return path.removesuffix(ENCRYPTED_SUFFIX) + ".yaml"
