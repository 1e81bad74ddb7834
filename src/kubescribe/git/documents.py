"""A document's file in a commit's plan: where it goes (where it is, renamed when it turns
plain or encrypted, or at its layout path), what it holds (rendered, keeping a person's
formatting), and documents that share a multi-document file."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import pygit2

from kubescribe.api import conditions as c
from kubescribe.git.chain import CommitChain, Refuse
from kubescribe.git.index import Entry
from kubescribe.git.plan import Plan
from kubescribe.git.records import Failing, Refusal
from kubescribe.git.targets import RefusedContent, TargetConfig
from kubescribe.gitnames import has_reserved_segment
from kubescribe.mirror import docedit
from kubescribe.mirror.identity import Identity, ResourceType
from kubescribe.mirror.layout import ENCRYPTED_SUFFIX


@dataclass(frozen=True)
class _File:
    """Where a document's file goes, and what it holds now. `multi`: the multi-document file
    it lives in (its document known there as `held`); `previous`: the document's current
    bytes (of the same kind, plain or encrypted)."""

    path: str
    entry: Entry | None
    encrypted: bool
    held: Identity
    previous: bytes | None = None
    multi: bytes | None = None


class DocumentFiles:
    """Plans the files of one target's documents on the chain's current tree; a document
    that cannot be written is refused (`refuse`), one that is is no longer `failing`."""

    def __init__(
        self, chain: CommitChain, config: TargetConfig, refuse: Refuse, failing: Failing, log: Any
    ) -> None:
        self.chain = chain
        self.config = config
        self.refuse = refuse
        self.failing = failing
        self.log = log

    def write(
        self,
        plan: Plan,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
        folder: str,
        placed_as: Identity | None = None,
    ) -> str | None:
        """Plan the document's file (new ones at the layout path of `placed_as`, by default
        their identity, under `folder`); the path written (also when unchanged), None when
        refused."""
        file: _File | None = None
        try:
            file = self._locate(plan, identity, rtype, folder, placed_as)
            data = self._render(identity, rtype, document, file)
        except RefusedContent as refused:
            self.refuse(Refusal(identity, refused.reason, refused.message))
            return None
        except Exception as exc:  # one bad document must not block the branch
            target = str(self.config.key)
            self.log.exception("build.render_failed", target=target, kind=identity.kind)
            where = f"{file.path}: " if file is not None else ""
            message = f"{where}{type(exc).__name__}: {exc}"
            self.refuse(Refusal(identity, c.RENDER_FAILED, message))
            return None
        self.failing.pop(identity, None)
        if data is not None:
            self._plan_file(plan, identity, file, *data)
        return file.path

    def remove(self, plan: Plan, identity: Identity, entry: Entry) -> bool:
        """Plan removing the document's file (its part of a multi-document file); whether
        the file goes."""
        if not entry.multi:
            plan.delete(identity, entry)
            return True
        current = self._multi_file(plan, entry.path)
        held = entry.held or identity
        left = docedit.remove(current, held) if current is not None else None
        self._keep_multi(plan, entry.path, left)
        plan.deletes[identity] = entry
        return left is None

    def _locate(
        self,
        plan: Plan,
        identity: Identity,
        rtype: ResourceType,
        folder: str,
        placed_as: Identity | None,
    ) -> _File:
        """Where the document's file goes; `RefusedContent` for a path it may not take."""
        entry = plan.index.get(identity)
        encrypted = self.config.renderer.encrypted(rtype)
        file = _File("", entry, encrypted, identity)
        if entry is not None and entry.multi:
            file = self._open_multi(plan, identity, entry, encrypted)
        entry = file.entry
        if entry is None:
            layout = self.config.layout.path_for(placed_as or identity, rtype, encrypted=encrypted)
            file = _File(posixpath.join(folder, layout), None, encrypted, identity)
        elif file.multi is not None:
            file = replace(file, path=entry.path)
        elif entry.path.endswith(ENCRYPTED_SUFFIX) == encrypted:
            blob = self.chain.repo[entry.oid]
            assert isinstance(blob, pygit2.Blob)
            file = _File(entry.path, entry, encrypted, identity, previous=blob.data)
        else:
            file = replace(file, path=_swap_suffix(entry.path, encrypted))
        path = file.path
        if (entry is None or entry.path != path) and has_reserved_segment(path):
            raise RefusedContent(c.INVALID_PATH, f"{path}: Git refuses a segment of this path")
        if file.multi is None and not plan.free(path, identity):
            raise RefusedContent(c.PATH_CONFLICT, f"{path} already holds another file")
        return file

    def _open_multi(self, plan: Plan, identity: Identity, entry: Entry, encrypted: bool) -> _File:
        """A document of a multi-document file: edited there, or (encrypted, or the file
        gone) taken out of it for a file of its own (`entry` None)."""
        held = entry.held or identity  # as the file knows it
        current = self._multi_file(plan, entry.path)
        if encrypted or current is None:  # encrypted documents get a file of their own
            if current is not None:
                self._keep_multi(plan, entry.path, docedit.remove(current, held))
            return _File("", None, encrypted, held)
        previous = docedit.body_of(current, held)
        return _File(entry.path, entry, encrypted, held, previous=previous, multi=current)

    def _render(
        self,
        identity: Identity,
        rtype: ResourceType,
        document: Mapping[str, Any],
        file: _File,
    ) -> tuple[bytes, bytes] | None:
        """The file's new bytes, and the renderer's own (None: a document of a multi-document
        file that stays as it is)."""
        previous = file.previous
        data = self.config.renderer.render(identity, rtype, document, previous)
        rendered = data
        ours = file.entry is not None and file.entry.rendered and file.multi is None
        if previous is not None and not file.encrypted and not ours:
            # A file a person keeps: unchanged content keeps its bytes, a change keeps
            # comments and formatting where values did not change.
            data = docedit.adopt(previous, document, data)
        if file.multi is None:
            return data, rendered
        if data == previous:
            return None
        return docedit.replace(file.multi, file.held, data), rendered

    def _plan_file(
        self, plan: Plan, identity: Identity, file: _File, data: bytes, rendered: bytes
    ) -> None:
        oid = pygit2.hash(data)
        if file.multi is not None:
            self._keep_multi(plan, file.path, data)
            plan.write(identity, Entry(file.path, oid, multi=True, held=file.held))
            return
        entry = file.entry
        if entry is not None and entry.path == file.path and entry.oid == oid:
            return
        self.chain.blob(data)
        ours = data == rendered and not file.encrypted
        plan.write(identity, Entry(file.path, oid, rendered=ours))

    def _multi_file(self, plan: Plan, path: str) -> bytes | None:
        """A multi-document file as this commit has it so far."""
        return plan.multi[path] if path in plan.multi else self.chain.file(path)

    def _keep_multi(self, plan: Plan, path: str, data: bytes | None) -> None:
        plan.multi[path] = data
        if data is not None:
            self.chain.blob(data)


def _swap_suffix(path: str, encrypted: bool) -> str:
    if encrypted:
        return path.removesuffix(".yml").removesuffix(".yaml") + ENCRYPTED_SUFFIX
    return path.removesuffix(ENCRYPTED_SUFFIX) + ".yaml"
