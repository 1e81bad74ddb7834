"""A bare repository under the cache dir, used only as an object store next to one remote.

Nothing local is evidence of what the remote holds: `fetch` asks the remote for the branch
tip every time and takes it from the remote's answer alone, so a ref or commit left behind by
a killed process can never be mistaken for pushed state. What earlier answers and pushes
brought stays, in `refs/remotes/origin/<branch>`: never read as the tip, it only tells the
remote what the cache already holds, so a fetch transfers only what is new.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import re
import shutil
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar
from urllib.parse import unquote, urlsplit

import pygit2
import structlog
from pygit2.enums import FetchPrune

from kubescribe import metrics
from kubescribe.api import conditions as c
from kubescribe.git.cachelock import CacheLock
from kubescribe.git.localpush import compare_and_swap, send_objects
from kubescribe.git.lookup_names import lookup_name
from kubescribe.git.repack import merge_shared
from kubescribe.git.transport.callbacks import (
    GitCallbacks,
    refuse_offsite_redirects,
    remote_callbacks,
)
from kubescribe.git.transport.errors import (
    GitFailure,
    classify_git_error,
    lost_race,
    vanished_ref,
)
from kubescribe.git.transport.proxy import (
    ProxyConfigError,
    ProxySettings,
    process_settings,
    proxy_failure,
)
from kubescribe.git.transport.secret import Credentials
from kubescribe.git.urlpolicy import UrlRefused, check_transfer
from kubescribe.net.urls import normalize

CallbacksFactory = Callable[[], pygit2.RemoteCallbacks]
log = structlog.get_logger(__name__)

_T = TypeVar("_T")

_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")
# Server messages shown with a refusal ("remote: ..."), kept short.
_MAX_SIDEBAND = 400
# Attempts of a transfer that failed because a reference vanished while libgit2 read the
# references it had just listed (`vanished_ref`): another writer's moment, soon over.
_LISTING_ATTEMPTS = 4
# Where earlier versions kept a ref per branch for every push, in the cache and on file://
# remotes; a process killed mid-push left them behind.
_LEGACY_SCRATCH = "refs/kubescribe/"

# libgit2 writes FETCH_HEAD on every fetch (behind a lock file a second fetch would fail on),
# and the workers of one remote's branches share one cache repository: opening it, fetching
# and moving its refs take turns per directory. Fetches side by side would not be quicker:
# measured with bench/shared_fetch.py, six at once took four times as long as in turn.
_FETCH_LOCKS: dict[Path, threading.Lock] = {}
_FETCH_LOCKS_GUARD = threading.Lock()
_CACHE_LOCKS: dict[Path, CacheLock] = {}
_SWEPT: set[Path] = set()  # caches whose legacy scratch refs this process removed


class RemoteError(Exception):
    """A push or fetch failed; the message is safe to show (no credentials).

    `reason` is a stable condition reason (a `GitFailure` value, `PushRejected`,
    `LocalRefMissing` or `CacheBusy`)."""

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


class LocalRefMissing(RemoteError):
    """A reference of the cache's own bookkeeping vanished during a transfer (another writer
    of the cache at that moment): the remote answered; retried soon."""

    default_reason = c.LOCAL_REF_MISSING


class CacheBusy(RemoteError):
    """Other writers' fetches held the shared cache repository longer than a writer waits;
    retried soon."""

    default_reason = c.CACHE_BUSY


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

    turn_timeout = 60.0
    """Seconds a fetch waits for other writers' fetches of the remote before `CacheBusy`."""

    def __init__(
        self,
        url: str,
        cache_dir: Path,
        callbacks: CallbacksFactory | None = None,
        proxies: Callable[[], ProxySettings] = process_settings,
    ) -> None:
        self.url = url
        # HTTPS_PROXY / HTTP_PROXY / NO_PROXY, read for every transfer (see transport.proxy).
        self._proxies = proxies
        self.path = cache_path(cache_dir, url)
        # Without a factory: no credentials and no trusted SSH host keys, so SSH fails closed.
        self._callbacks = callbacks or functools.partial(remote_callbacks, Credentials(), url)
        with _FETCH_LOCKS_GUARD:
            self._lock = _FETCH_LOCKS.setdefault(self.path.absolute(), threading.Lock())
            self.cache_lock = _CACHE_LOCKS.setdefault(self.path.absolute(), CacheLock())
        self.generation = self.cache_lock.generation
        with self._turn():  # the config and refs of a shared cache change one at a time
            self.repo = _open_or_init(self.path)
            refuse_offsite_redirects(self.repo)
            # `origin` is for humans inspecting the cache; it never holds credentials.
            # Transfers use an in-memory remote with the URL as given.
            public = _USERINFO.sub(r"\1", url) if "://" in url else url
            if "origin" in self.repo.remotes.names():
                if self.repo.remotes["origin"].url != public:
                    self.repo.remotes.set_url("origin", public)
            else:
                self.repo.remotes.create("origin", public, "+refs/heads/*:refs/remotes/origin/*")
            if self.path.absolute() not in _SWEPT:
                _sweep_legacy_scratch(self.repo)
                _SWEPT.add(self.path.absolute())
        self._remote = self.repo.remotes.create_anonymous(url)

    def fetch(self, branch: str, limit: int | None = None) -> pygit2.Oid | None:
        """The remote tip of `branch` (its objects fetched), or None if it does not exist.
        TransferTooLarge when the remote sends more than `limit` bytes (the fetch stops).

        Only `branch` is asked for. The tip is what the remote advertised in this very
        transfer; the tracking ref the fetch moves is only a base for the next one."""
        self._check_address("fetch")
        head = f"refs/heads/{branch}"
        tracking = _ref_name("refs/remotes/origin/", branch)
        proxy = self._proxy()
        callbacks = self._transfer_callbacks(proxy)
        if limit is not None:
            callbacks.transfer_progress = _limited(limit)  # type: ignore[method-assign,assignment]
        with self._turn():
            try:
                self._retrying(
                    lambda: self._remote.fetch(
                        [f"+{head}:{tracking}"],
                        callbacks=callbacks,
                        prune=FetchPrune.NO_PRUNE,
                        proxy=proxy,
                    )
                )
            except TransferTooLarge:
                # libgit2 leaves the remote's connection mid-transfer: the next fetch needs
                # another.
                self._remote = self.repo.remotes.create_anonymous(self.url)
                raise
            except (pygit2.GitError, OSError) as exc:
                raise self._failure("fetch failed", exc, callbacks, proxy) from None
            # The heads of this fetch's own connection (no new one is opened).
            tip = next(
                (h.oid for h in self._remote.list_heads(connect=False) if h.name == head), None
            )
            if tip is None:  # the branch is gone: so is what the remote last said of it
                with contextlib.suppress(KeyError):
                    self.repo.references.delete(tracking)
        return tip

    def default_branch(self) -> str | None:
        """The branch the remote's HEAD names (its default branch); None if it names none."""
        self._check_address("fetch")
        proxy = self._proxy()
        callbacks = self._transfer_callbacks(proxy)
        try:
            heads = self._retrying(
                lambda: self._remote.list_heads(callbacks=callbacks, proxy=proxy)
            )
        except (pygit2.GitError, OSError) as exc:
            raise self._failure("fetch failed", exc, callbacks, proxy) from None
        return _default_of(heads)

    def advertised_default_branch(self) -> str | None:
        """The default branch as the last fetch's advertisement named it: no round trip (a
        connection `default_branch` leaves open would serve the next fetch stale heads)."""
        try:
            return _default_of(self._remote.list_heads(connect=False))
        except (pygit2.GitError, OSError):
            return None

    def start_point(self, base_branch: str | None, limit: int | None = None) -> pygit2.Oid | None:
        """Where a branch missing on the remote starts: the tip of `base_branch`, or of the
        remote's default branch; None (an orphan root) only when the remote has neither.
        `limit` as for `fetch`."""
        base = base_branch or self.default_branch()
        return self.fetch(base, limit) if base else None

    def push(self, branch: str, new_tip: pygit2.Oid, expected: pygit2.Oid | None = None) -> None:
        """Fast-forward the remote `branch` from `expected` to `new_tip` (created if missing);
        never forced. No scratch ref, here or on the remote: the commit is pushed by its id."""
        tracking = _ref_name("refs/remotes/origin/", branch)
        local = local_path(self.url)
        if local is not None:
            self._push_local(local, branch, new_tip, expected)
        else:
            self._push_remote(branch, new_tip)
        # What the remote now holds is a base for the next fetch, and keeps the pushed
        # commit from the cache's tidy (never read as the tip: the next fetch asks again).
        # The push landed: a cache that stays busy skips this, the next fetch brings it.
        with contextlib.suppress(CacheBusy), self._turn():
            self.repo.references.create(tracking, new_tip, force=True)

    def _push_remote(self, branch: str, new_tip: pygit2.Oid) -> None:
        self._check_address("push")
        proxy = self._proxy()
        callbacks = self._transfer_callbacks(proxy)
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
            self._retrying(
                lambda: self._remote.push(
                    [f"{new_tip}:refs/heads/{branch}"], callbacks=callbacks, proxy=proxy
                )
            )
        except (pygit2.GitError, OSError) as exc:
            raise self._failure("push failed", exc, callbacks, proxy, pushing=True) from None
        if refused:
            # A ref the server would not update: it moved under us (the update's old value no
            # longer matches), or a hook / branch protection declined, which no rebuild fixes.
            remote_said = " ".join(" ".join(said).split())[:_MAX_SIDEBAND]
            detail = "; ".join(refused) + (f" (remote: {remote_said})" if remote_said else "")
            reason, message = self._classify(pygit2.GitError(detail), callbacks, proxy)
            if reason == GitFailure.PERMISSION_DENIED:
                raise PushDenied(f"push denied: {message}")
            raise PushRejected(f"push rejected: {message}")

    def _push_local(
        self, path: Path, branch: str, new_tip: pygit2.Oid, expected: pygit2.Oid | None
    ) -> None:
        """libgit2's local transport moves the target ref without compare-and-swap, and sends
        objects only with a ref on the remote (see `localpush`): write the objects straight
        into the remote, then move the branch only if it still points at `expected`."""
        try:
            remote = pygit2.Repository(lookup_name(str(path)))
        except (pygit2.GitError, OSError) as exc:
            raise RemoteUnavailable(f"push failed: {redact(str(exc), self.url)}") from None
        try:
            try:
                send_objects(self.repo, remote, new_tip)
            except OSError as exc:  # the remote's folder: read-only, full, or gone
                message = redact(str(exc), self.url)
                if isinstance(exc, PermissionError) or exc.errno == errno.EROFS:
                    raise PushDenied(f"push denied: {message}") from None
                raise RemoteUnavailable(f"push failed: {message}", c.TRANSFER_FAILED) from None
            try:
                refused = compare_and_swap(remote, branch, new_tip, expected)
            except pygit2.GitError as exc:  # the ref lock was taken, or the ref appeared
                refused = redact(str(exc), self.url)
            if refused is not None:
                raise PushRejected(f"push rejected: {refused}")
            self._merge_remote_packs(remote)
        finally:
            remote.free()  # its packs and caches now, not when the garbage collector runs

    def _merge_remote_packs(self, remote: pygit2.Repository) -> None:
        """Keep the local remote's packs few (`repack.merge_shared`): each push adds one, and
        every lookup miss of every writer looks through them all. The push has landed, so a
        failure here is only logged."""
        try:
            result = merge_shared(remote)
        except (OSError, KeyError, pygit2.GitError) as exc:
            log.warning("remote.packs_merge_failed", error=redact(str(exc), self.url))
            return
        if result is not None:
            metrics.REMOTE_PACK_MERGES.inc()
            log.info(
                "remote.packs_merged",
                objects=result.objects,
                packs_removed=result.packs_removed,
                packs=result.packs,
            )

    @contextlib.contextmanager
    def _turn(self) -> Iterator[None]:
        """This writer's turn to fetch into the cache or move its refs; `CacheBusy` after
        `turn_timeout` behind the other writers of the remote."""
        if not self._lock.acquire(timeout=self.turn_timeout):
            raise CacheBusy(
                f"other fetches of this remote held its cache for over {self.turn_timeout:g}s"
            )
        try:
            yield
        finally:
            self._lock.release()

    def _retrying(self, transfer: Callable[[], _T]) -> _T:
        """`transfer`, again when it failed only because a ref vanished while libgit2 read
        the references it had just listed (another writer's moment, not an outage)."""
        for attempt in range(1, _LISTING_ATTEMPTS + 1):
            try:
                return transfer()
            except pygit2.GitError as exc:
                if attempt == _LISTING_ATTEMPTS or vanished_ref(str(exc)) is None:
                    raise
        raise AssertionError("unreachable")

    def _failure(
        self,
        what: str,
        exc: BaseException,
        callbacks: pygit2.RemoteCallbacks,
        proxy: str | None,
        *,
        pushing: bool = False,
    ) -> RemoteError:
        reason, message = self._classify(exc, callbacks, proxy)
        return transfer_error(what, reason, message, pushing=pushing)

    def _check_address(self, what: str) -> None:
        """The URL policy again, on the addresses the host resolves to now (DNS rebinding)."""
        try:
            check_transfer(self.url)
        except UrlRefused as refused:
            raise RemoteUnavailable(
                f"{what} refused: {refused.message} ({refused.reason})", c.URL_REFUSED
            ) from None

    def _transfer_callbacks(self, proxy: str | None) -> pygit2.RemoteCallbacks:
        callbacks = self._callbacks()
        if isinstance(callbacks, GitCallbacks):
            callbacks.proxied = proxy is not None
        return callbacks

    def _proxy(self) -> str | None:
        """The proxy of a transfer to this remote now (None: direct)."""
        try:
            return self._proxies().proxy_for(self.url)
        except ProxyConfigError as exc:  # `kubescribe run` refuses these at start
            raise RemoteUnavailable(f"proxy settings: {exc}", c.PROXY_REFUSED) from None

    def _classify(
        self, exc: BaseException, callbacks: pygit2.RemoteCallbacks, proxy: str | None
    ) -> tuple[GitFailure, str]:
        creds = callbacks.creds if isinstance(callbacks, GitCallbacks) else None
        reason, message = classify_git_error(exc, creds)
        reason, message = proxy_failure(reason, message, proxy)
        return reason, redact(message, self.url)


def transfer_error(
    what: str, reason: GitFailure, message: str, *, pushing: bool = False
) -> RemoteError:
    """The error a failed fetch or push raises: only a remote that does not answer is
    `RemoteUnreachable`; a lost race is `PushRejected`, a vanished bookkeeping ref of the
    cache `LocalRefMissing`, a refusal for good `PushDenied`."""
    if pushing and reason == GitFailure.PERMISSION_DENIED:
        return PushDenied(f"push denied: {message}")
    if pushing and lost_race(message):
        return PushRejected(f"push rejected: {message}")
    if reason == GitFailure.LOCAL_REF_MISSING:
        return LocalRefMissing(f"{what}: {message}")
    return RemoteUnavailable(f"{what}: {message}", reason)


def _sweep_legacy_scratch(repo: pygit2.Repository) -> None:
    """Remove the scratch refs earlier versions kept in the cache (one per branch pushed):
    nothing reads them now, and each would hold its commit through the cache's tidy."""
    for name in list(repo.references):
        if name.startswith(_LEGACY_SCRATCH):
            with contextlib.suppress(KeyError):
                repo.references.delete(lookup_name(name))


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


def _default_of(heads: Any) -> str | None:
    """The branch an advertisement's HEAD names, if it names one."""
    for head in heads:
        target = head.symref_target
        if head.name == "HEAD" and target and target.startswith("refs/heads/"):
            return str(target.removeprefix("refs/heads/"))
    return None


def _ref_name(prefix: str, branch: str) -> str:
    name = prefix + branch
    if not pygit2.reference_is_valid_name(name) or not pygit2.reference_is_valid_name(
        "refs/heads/" + branch
    ):
        raise ValueError(f"invalid branch name {branch!r}")
    return lookup_name(name)
