"""Where the history is read from: a local clone (or bare repository), a remote URL fetched
into the user's cache, or a GitTarget (its provider's URL and credentials, its branch and
folder, read with the user's own kubeconfig). Only ever fetches; never pushes."""

from __future__ import annotations

import base64
import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2

from kubescribe.history.index import HistoryError

if TYPE_CHECKING:
    from kubescribe.git.transport.secret import Credentials
    from kubescribe.kube.client import KubeClient

TARGETS = "/apis/kubescribe.io/v1alpha1/namespaces/{ns}/{plural}/{name}"


def cache_dir() -> Path:
    """$XDG_CACHE_HOME/kubescribe (default ~/.cache/kubescribe)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "kubescribe"


@dataclass(frozen=True)
class Source:
    """A repository, the commit its branch is at, and the folder the mirror writes."""

    repo: pygit2.Repository
    tip: pygit2.Oid
    branch: str
    folder: str
    where: str
    content: dict[str, Any] | None = None
    """The GitTarget's `spec.content` when read from one."""


def _local_tip(repo: pygit2.Repository, branch: str | None, where: str) -> tuple[str, pygit2.Oid]:
    if branch is None and not repo.head_is_unborn:
        return repo.head.shorthand, repo.head.peel(pygit2.Commit).id
    if branch is None:  # a bare repository whose HEAD names no branch: its only one, or main
        branches = list(repo.branches.local)
        branch = branches[0] if len(branches) == 1 else "main"
    for name in (f"refs/heads/{branch}", f"refs/remotes/origin/{branch}"):
        ref = repo.references.get(name)
        if ref is not None:
            return branch, ref.peel(pygit2.Commit).id
    raise HistoryError(f"{where} has no branch {branch!r} (nor origin/{branch})")


def open_local(path: Path, branch: str | None, folder: str) -> Source:
    """A clone or bare repository on disk, as it is (fetch it yourself for the newest)."""
    found = pygit2.discover_repository(str(path))
    if found is None:
        raise HistoryError(f"{path} is not a Git repository (give a clone, or a URL)")
    repo = pygit2.Repository(found)
    branch, tip = _local_tip(repo, branch, str(path))
    return Source(repo, tip, branch, folder, str(path))


def fetch_remote(
    url: str, branch: str, folder: str, credentials: Credentials | None = None
) -> Source:
    """The branch of a remote, fetched into the cache (a local path or file:// is opened)."""
    # The Git transport is loaded for remotes only: a local clone answers without it.
    from kubescribe.git.repo import GitRepository, RemoteError, local_path  # noqa: PLC0415
    from kubescribe.git.transport.callbacks import remote_callbacks  # noqa: PLC0415
    from kubescribe.git.transport.secret import Credentials  # noqa: PLC0415

    local = local_path(url)
    if local is not None:
        return open_local(local, branch, folder)
    factory = functools.partial(remote_callbacks, credentials or Credentials(), url)
    try:
        remote = GitRepository(url, cache_dir() / "clones", callbacks=factory)
        tip = remote.fetch(branch)
    except RemoteError as exc:
        raise HistoryError(f"cannot fetch {url}: {exc}") from None
    if tip is None:
        raise HistoryError(f"{url} has no branch {branch!r}")
    return Source(remote.repo, tip, branch, folder, url)


async def from_target(client: KubeClient, namespace: str, name: str) -> Source:
    """The repository, branch and folder of GitTarget `namespace/name`, fetched with its
    provider's credentials (when the user may read that Secret)."""
    from kubescribe.git.repo import local_path  # noqa: PLC0415
    from kubescribe.git.transport.secret import Credentials  # noqa: PLC0415
    from kubescribe.git.urlpolicy import UrlRefused, check_url, resolve_host  # noqa: PLC0415
    from kubescribe.kube.client import ApiError  # noqa: PLC0415

    target = await client.get(TARGETS.format(ns=namespace, plural="gittargets", name=name))
    spec = target.get("spec") or {}
    provider_name = (spec.get("providerRef") or {}).get("name", "")
    provider = await client.get(
        TARGETS.format(ns=namespace, plural="gitproviders", name=provider_name)
    )
    pspec = provider.get("spec") or {}
    url = str(pspec.get("url") or "")
    credentials = None
    secret = (pspec.get("secretRef") or {}).get("name")
    if secret and local_path(url) is None:
        try:
            found = await client.get(f"/api/v1/namespaces/{namespace}/secrets/{secret}")
        except ApiError as exc:  # a Secret you may not read: fetch without it
            if exc.status not in (403, 404):
                raise
        else:
            data = {k: base64.b64decode(v) for k, v in (found.get("data") or {}).items()}
            credentials = Credentials.from_secret_data(data)
    branch = str(spec.get("branch") or "main")
    folder = str(spec.get("path") or "")
    try:  # a tenant's URL: no remote helper, no metadata or link-local address
        check_url(url, allow_file=True, allow_insecure=True, resolve=resolve_host)
    except UrlRefused as exc:
        raise HistoryError(f"GitTarget {namespace}/{name}: {exc}") from None
    source = fetch_remote(url, branch, folder, credentials)
    return Source(
        source.repo,
        source.tip,
        branch,
        folder,
        f"GitTarget {namespace}/{name}",
        spec.get("content"),
    )
