"""A bare repository under the cache dir, used only as an object store next to one remote.

Nothing local is evidence of what the remote holds: `fetch` asks the remote for the branch
tip every time and forgets the previous answer first, so a ref or commit left behind by a
killed process can never be mistaken for pushed state.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import re
import shutil
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

import pygit2
from pygit2.enums import FetchPrune

from kubescribe.api import conditions as c
from kubescribe.git.cachelock import CacheLock
from kubescribe.git.lookup_names import lookup_name
from kubescribe.git.transport.callbacks import (
    GitCallbacks,
    refuse_offsite_redirects,
    remote_callbacks,
)
from kubescribe.git.transport.errors import GitFailure, classify_git_error
from kubescribe.git.transport.secret import Credentials
from kubescribe.git.urlpolicy import UrlRefused, check_transfer
from kubescribe.net.urls import normalize

CallbacksFactory = Callable[[], pygit2.RemoteCallbacks]

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")
# libgit2's messages for a push that would not fast-forward: the local transport's check
# when the remote tip is unknown locally, and its fast-forward check when it is known.
_NON_FAST_FORWARD = ("not present locally", "non-fastforwardable")
# Server messages shown with a refusal ("remote: ..."), kept short.
_MAX_SIDEBAND = 400

# libgit2 writes FETCH_HEAD on every fetch, and two workers (two branches of one
# repository) share one cache repository: opening and fetching take turns per directory.
_FETCH_LOCKS: dict[Path, threading.Lock] = {}
_FETCH_LOCKS_GUARD = threading.Lock()
_CACHE_LOCKS: dict[Path, CacheLock] = {}


class RemoteError(Exception):
    """A push or fetch failed; the message is safe to show (no credentials).

    `reason` is a stable condition reason (a `GitFailure` value, or `PushRejected`)."""

    default_reason = str(GitFailure.TRANSFER_FAILED)

    def __init__(self, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason or self.default_reason


class PushRejected(RemoteError):
    """The remote refused the update because it moved (not a fast-forward): fetch, rebuild
    from cluster state and push again."""

    default_reason = c.PUSH_REJECTED


class PushDenied(RemoteError):
    """The remote refused the push for good (read-only credential, protected branch, a hook):
    rebuilding on a new tip would not help."""

    default_reason = str(GitFailure.PERMISSION_DENIED)


class RemoteUnavailable(RemoteError):
    """The remote could not be reached, refused the credentials or the server, or the
    transfer failed; `reason` says which."""

    default_reason = str(GitFailure.REMOTE_UNREACHABLE)


class TransferTooLarge(Exception):
    """A fetch was aborted: the remote sent more bytes than the fetch's limit."""


class SigningUnavailable(Exception):
    """Commits must be signed and the key is not available: nothing is committed."""

    reason = c.SIGNING_KEY_MISSING


class CommitSigner(Protocol):
    def sign_commit(
        self,
        repo: pygit2.Repository,
        author: pygit2.Signature,
        committer: pygit2.Signature,
        message: str,
        tree: pygit2.Oid,
        parents: Sequence[pygit2.Oid],
    ) -> pygit2.Oid:
        """Write a signed commit object and return its id (no reference moves)."""
        ...


class MissingSigner:
    """The signer of a branch whose signing key is not loaded: refuses every commit."""

    def __init__(self, message: str) -> None:
        self.message = message

    def sign_commit(
        self,
        repo: pygit2.Repository,
        author: pygit2.Signature,
        committer: pygit2.Signature,
        message: str,
        tree: pygit2.Oid,
        parents: Sequence[pygit2.Oid],
    ) -> pygit2.Oid:
        raise SigningUnavailable(self.message)


class CacheRepository(pygit2.Repository):
    """The cache's pygit2 repository. While `signer` is set, every commit made through
    `create_commit` is signed, whoever makes it: no code path writes an unsigned one."""

    signer: CommitSigner | None = None

    def create_commit(
        self,
        reference_name: str | None,
        author: pygit2.Signature,
        committer: pygit2.Signature,
        message: str | bytes,
        tree: pygit2.Oid | str,
        parents: Sequence[pygit2.Oid | str],
        encoding: str | None = None,
    ) -> pygit2.Oid:
        signer = self.signer
        if signer is None:
            if encoding is None:
                return super().create_commit(
                    reference_name, author, committer, message, tree, parents
                )
            return super().create_commit(
                reference_name, author, committer, message, tree, parents, encoding
            )
        if reference_name is not None or encoding is not None:
            raise ValueError("signed commits are made without moving a reference or encoding")
        text = message.decode() if isinstance(message, bytes) else message
        return signer.sign_commit(
            self,
            author,
            committer,
            text,
            pygit2.Oid(hex=str(tree)),
            [pygit2.Oid(hex=str(p)) for p in parents],
        )


# libgit2's process-wide limits, sized for a long-running writer rather than a one-shot git
# command: its object cache (default 256 MiB) would keep every tree and commit a long run
# reads; mapped pack windows (default 8 GiB) and open pack files (default unlimited) likewise.
_OBJECT_CACHE_BYTES = 32 << 20
_MAPPED_PACK_BYTES = 128 << 20
_OPEN_PACK_FILES = 128


def limit_libgit2_memory() -> None:
    """Bound what libgit2 keeps across batches (call once, before any repository opens)."""
    pygit2.settings.cache_max_size(_OBJECT_CACHE_BYTES)
    pygit2.settings.mwindow_mapped_limit = _MAPPED_PACK_BYTES
    pygit2.settings.mwindow_file_limit = _OPEN_PACK_FILES


def redact(message: str, url: str) -> str:
    """`message` with any credentials in URLs removed."""
    parts = urlsplit(url) if "://" in url else None
    if parts is not None and parts.password:
        message = message.replace(parts.password, "***")
    return _USERINFO.sub(r"\1", message)


def cache_path(cache_dir: Path, url: str) -> Path:
    digest = hashlib.sha256(normalize(url).encode()).hexdigest()[:16]
    return cache_dir / f"{digest}.git"


class GitRepository:
    """The cache repository of one remote. Not thread-safe: one thread owns an instance."""

    def __init__(
        self,
        url: str,
        cache_dir: Path,
        callbacks: CallbacksFactory | None = None,
    ) -> None:
        self.url = url
        self.path = cache_path(cache_dir, url)
        # Without a factory: no credentials and no trusted SSH host keys, so SSH fails closed.
        self._callbacks = callbacks or functools.partial(remote_callbacks, Credentials(), url)
        with _FETCH_LOCKS_GUARD:
            self._lock = _FETCH_LOCKS.setdefault(self.path.absolute(), threading.Lock())
            self.cache_lock = _CACHE_LOCKS.setdefault(self.path.absolute(), CacheLock())
        self.generation = self.cache_lock.generation
        with self._lock:
            self.repo = _open_or_init(self.path)
            refuse_offsite_redirects(self.repo)
        # `origin` is for humans inspecting the cache; it never holds credentials. Transfers
        # use an in-memory remote with the URL as given.
        public = _USERINFO.sub(r"\1", url) if "://" in url else url
        if "origin" in self.repo.remotes.names():
            self.repo.remotes.set_url("origin", public)
        else:
            self.repo.remotes.create("origin", public, "+refs/heads/*:refs/remotes/origin/*")
        self._remote = self.repo.remotes.create_anonymous(url)

    def fetch(self, branch: str, limit: int | None = None) -> pygit2.Oid | None:
        """The remote tip of `branch` (its objects fetched), or None if it does not exist.
        TransferTooLarge when the remote sends more than `limit` bytes (the fetch stops)."""
        self._check_address("fetch")
        ref = _ref_name("refs/remotes/origin/", branch)
        # A fetch of a missing branch succeeds and leaves the ref alone: drop it first.
        if ref in self.repo.references:
            self.repo.references.delete(ref)
        callbacks = self._callbacks()
        if limit is not None:
            callbacks.transfer_progress = _limited(limit)  # type: ignore[method-assign,assignment]
        try:
            with self._lock:
                self._remote.fetch(
                    [f"+refs/heads/{branch}:{ref}"],
                    callbacks=callbacks,
                    prune=FetchPrune.NO_PRUNE,
                )
        except TransferTooLarge:
            # libgit2 leaves the remote's connection mid-transfer: the next fetch needs another.
            self._remote = self.repo.remotes.create_anonymous(self.url)
            raise
        except (pygit2.GitError, OSError) as exc:
            reason, message = self._classify(exc, callbacks)
            raise RemoteUnavailable(f"fetch failed: {message}", reason) from None
        found = self.repo.references.get(ref)
        if found is None:
            return None
        tip = found.target
        assert isinstance(tip, pygit2.Oid)
        return tip

    def default_branch(self) -> str | None:
        """The branch the remote's HEAD names (its default branch); None if it names none."""
        self._check_address("fetch")
        callbacks = self._callbacks()
        try:
            with self._lock:
                heads = self._remote.list_heads(callbacks=callbacks)
        except (pygit2.GitError, OSError) as exc:
            reason, message = self._classify(exc, callbacks)
            raise RemoteUnavailable(f"fetch failed: {message}", reason) from None
        for head in heads:
            target = head.symref_target
            if head.name == "HEAD" and target and target.startswith("refs/heads/"):
                return target.removeprefix("refs/heads/")
        return None

    def start_point(self, base_branch: str | None, limit: int | None = None) -> pygit2.Oid | None:
        """Where a branch missing on the remote starts: the tip of `base_branch`, or of the
        remote's default branch; None (an orphan root) only when the remote has neither.
        `limit` as for `fetch`."""
        base = base_branch or self.default_branch()
        return self.fetch(base, limit) if base else None

    def push(self, branch: str, new_tip: pygit2.Oid, expected: pygit2.Oid | None = None) -> None:
        """Fast-forward the remote `branch` from `expected` to `new_tip` (created if missing);
        never forced."""
        source = _ref_name("refs/kubescribe/push/", branch)
        self.repo.references.create(source, new_tip, force=True)
        local = local_path(self.url)
        if local is not None:
            self._push_local(local, source, branch, new_tip, expected)
            return
        self._check_address("push")
        callbacks = self._callbacks()
        refused: list[str] = []
        said: list[str] = []

        def update_reference(refname: str, message: str | None) -> None:
            if message:
                refused.append(f"{refname}: {message}")

        def sideband(text: str) -> None:
            said.append(text)

        callbacks.push_update_reference = update_reference  # type: ignore[method-assign]
        callbacks.sideband_progress = sideband  # type: ignore[method-assign,assignment]
        try:
            self._remote.push([f"{source}:refs/heads/{branch}"], callbacks=callbacks)
        except (pygit2.GitError, OSError) as exc:
            reason, message = self._classify(exc, callbacks)
            if any(marker in message for marker in _NON_FAST_FORWARD):
                raise PushRejected(f"push rejected: {message}") from None
            if reason == GitFailure.PERMISSION_DENIED:
                raise PushDenied(f"push denied: {message}") from None
            raise RemoteUnavailable(f"push failed: {message}", reason) from None
        if refused:
            # A ref the server would not update: it moved under us (the update's old value no
            # longer matches), or a hook / branch protection declined, which no rebuild fixes.
            remote_said = " ".join(" ".join(said).split())[:_MAX_SIDEBAND]
            detail = "; ".join(refused) + (f" (remote: {remote_said})" if remote_said else "")
            reason, message = self._classify(pygit2.GitError(detail), callbacks)
            if reason == GitFailure.PERMISSION_DENIED:
                raise PushDenied(f"push denied: {message}")
            raise PushRejected(f"push rejected: {message}")

    def _push_local(
        self, path: Path, source: str, branch: str, new_tip: pygit2.Oid, expected: pygit2.Oid | None
    ) -> None:
        """libgit2's local transport moves the target ref without compare-and-swap, so a
        foreign push landing meanwhile could be overwritten. Send the objects to a scratch ref
        (one per branch: two writers of a branch may share it, only the branch's move counts),
        then move the branch under the ref lock only if it still points at `expected`."""
        scratch = _ref_name("refs/kubescribe/incoming/", branch)
        try:
            self._remote.push([f"+{source}:{scratch}"], callbacks=self._callbacks())
            remote = pygit2.Repository(lookup_name(str(path)))
        except (pygit2.GitError, OSError) as exc:
            raise RemoteUnavailable(f"push failed: {redact(str(exc), self.url)}") from None
        name = _ref_name("refs/heads/", branch)
        try:
            current = remote.references.get(name)
            if current is None:
                if expected is not None:
                    raise PushRejected(f"push rejected: {branch} was deleted on the remote")
                remote.references.create(name, new_tip)  # fails if it appeared meanwhile
            elif current.target != expected:
                raise PushRejected(f"push rejected: {branch} moved on the remote")
            else:
                current.set_target(new_tip)  # matches the value read, under the ref lock
        except pygit2.GitError as exc:
            raise PushRejected(f"push rejected: {redact(str(exc), self.url)}") from None
        finally:
            with contextlib.suppress(pygit2.GitError, KeyError):
                remote.references.delete(scratch)
            remote.free()  # its packs and caches now, not when the garbage collector runs

    def _check_address(self, what: str) -> None:
        """The URL policy again, on the addresses the host resolves to now (DNS rebinding)."""
        try:
            check_transfer(self.url)
        except UrlRefused as refused:
            raise RemoteUnavailable(
                f"{what} refused: {refused.message} ({refused.reason})", c.URL_REFUSED
            ) from None

    def _classify(
        self, exc: BaseException, callbacks: pygit2.RemoteCallbacks
    ) -> tuple[GitFailure, str]:
        creds = callbacks.creds if isinstance(callbacks, GitCallbacks) else None
        reason, message = classify_git_error(exc, creds)
        return reason, redact(message, self.url)


def _limited(limit: int) -> Callable[[pygit2.remotes.TransferProgress], None]:
    """A transfer-progress callback that aborts the fetch past `limit` received bytes (an
    exception raised there ends libgit2's transfer and comes out of `fetch` as it is)."""

    def transfer_progress(stats: pygit2.remotes.TransferProgress) -> None:
        if stats.received_bytes > limit:
            raise TransferTooLarge(f"the remote sent more than {limit} bytes")

    return transfer_progress


def local_path(url: str) -> Path | None:
    """The folder of a file:// or plain-path remote; None for network remotes."""
    if url.startswith("file://"):
        return Path(unquote(urlsplit(url).path))
    if url.startswith("/"):
        return Path(url)
    return None


def _open_or_init(path: Path) -> CacheRepository:
    """Open the cache; a cache that does not open (a killed process, a full disk) holds
    nothing that counts, so it is started afresh."""
    if (path / "HEAD").exists():
        try:
            return CacheRepository(str(path))
        except pygit2.GitError:
            shutil.rmtree(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    pygit2.init_repository(str(path), bare=True)
    return CacheRepository(str(path))


def _ref_name(prefix: str, branch: str) -> str:
    name = prefix + branch
    if not pygit2.reference_is_valid_name(name) or not pygit2.reference_is_valid_name(
        "refs/heads/" + branch
    ):
        raise ValueError(f"invalid branch name {branch!r}")
    return lookup_name(name)
