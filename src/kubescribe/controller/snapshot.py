"""`kubescribe snapshot`: a one-shot export of selected types into a Git repository, through the
same sanitizer, noise policy, layout and branch worker as the operator's backfill."""

from __future__ import annotations

import fnmatch
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pygit2

from kubescribe.controller.encryption import SopsRenderer, unencrypted_renderer
from kubescribe.controller.streams import StreamSpec, TargetStream
from kubescribe.git.records import Refusal, WriteReport
from kubescribe.git.targets import Committer, TargetConfig
from kubescribe.git.worker import BranchWorker
from kubescribe.kube.client import KubeClient
from kubescribe.kube.discovery import Discovered, discover
from kubescribe.kube.informer import Informer
from kubescribe.mirror.changes import Operation, PruneMode, TargetKey
from kubescribe.mirror.layout import Layout, normalize_target_path
from kubescribe.mirror.noise import DEFAULT_NOISE_POLICY
from kubescribe.mirror.owned import FULL, Content

SNAPSHOT_TARGET = TargetKey("", "snapshot")


class SnapshotError(Exception):
    """The export cannot run (bad repository state, nothing selected, push failed)."""


@dataclass(frozen=True)
class Exported:
    """The new branch tip (None when nothing was written) and the documents not written:
    Secrets without recipients (a snapshot never writes one in plain text)."""

    tip: str | None
    refused: tuple[Refusal, ...]


@dataclass(frozen=True)
class Selection:
    resources: tuple[str, ...]  # "resource" or "group/resource", globs allowed; empty = all
    namespace: str  # '' = all namespaces (cluster-scoped types are included then)
    label_selector: str | None


def selected(types: Sequence[Discovered], selection: Selection) -> list[Discovered]:
    """Preferred versions of the selected types, never types the noise policy drops whole."""
    out = []
    for item in types:
        rt = item.rtype
        if not item.preferred or DEFAULT_NOISE_POLICY.drops_type(rt.group, rt.resource):
            continue
        if selection.namespace and not rt.namespaced:
            continue
        names = (rt.resource, f"{rt.group}/{rt.resource}" if rt.group else f"core/{rt.resource}")
        patterns = selection.resources or ("*",)
        if any(fnmatch.fnmatchcase(n, p) for p in patterns for n in names):
            out.append(item)
    return sorted(out, key=lambda d: d.rtype.gvr)


def _prepare(repo_dir: Path, branch: str) -> pygit2.Repository:
    """Open or create the repository; a checked-out branch must have a clean work tree."""
    if not repo_dir.exists():
        return pygit2.init_repository(str(repo_dir.absolute()), initial_head=branch)
    repo = pygit2.Repository(str(repo_dir))
    if not repo.is_bare and not repo.head_is_unborn and repo.head.shorthand == branch:
        dirty = [
            p for p, flags in repo.status().items() if flags != pygit2.enums.FileStatus.IGNORED
        ]
        if dirty:
            raise SnapshotError(f"{repo_dir}: branch {branch!r} is checked out with local changes")
    return repo


async def select_types(client: KubeClient, selection: Selection) -> list[Discovered]:
    types = selected(await discover(client), selection)
    if not types:
        raise SnapshotError("no served type matches the selection")
    return types


async def run_snapshot(
    client: KubeClient,
    repo_dir: Path,
    selection: Selection,
    types: Sequence[Discovered],
    *,
    branch: str,
    folder: str,
    committer: Committer,
    progress: Callable[[Discovered], None],
    content: Content = FULL,
    recipients: Sequence[str] = (),
) -> Exported:
    """Export. Secrets are written SOPS-encrypted to `recipients` (age), or not at all."""
    repo = _prepare(repo_dir, branch)
    reports: list[WriteReport] = []
    with tempfile.TemporaryDirectory(prefix="kubescribe-snapshot-") as scratch:
        # libgit2 cannot push into a non-bare repository: write into a bare scratch copy of the
        # branch with the operator's own worker, then fast-forward the repository from it.
        bare = pygit2.init_repository(str(Path(scratch, "staging.git")), bare=True)
        local = repo.references.get(f"refs/heads/{branch}")
        if local is not None:
            bare.remotes.create_anonymous(repo.path).fetch(
                [f"+refs/heads/{branch}:refs/heads/{branch}"]
            )
        worker = BranchWorker(
            url=Path(bare.path).as_uri(),
            branch=branch,
            cache_dir=Path(scratch, "cache"),
            committer=committer,
            on_report=reports.append,
        )
        worker.configure(
            [
                TargetConfig(
                    key=SNAPSHOT_TARGET,
                    folder=normalize_target_path(folder),
                    layout=Layout(),
                    prune=PruneMode.NEVER,
                    # Secrets are encrypted, or refused when there are no recipients: never plain
                    renderer=SopsRenderer(recipients=recipients)
                    if recipients
                    else unencrypted_renderer(),
                )
            ]
        )
        worker.start()
        for item in types:
            spec = StreamSpec(
                SNAPSHOT_TARGET, item.rtype, selection.namespace, (None,), frozenset(Operation)
            )
            sink = TargetStream(
                spec, DEFAULT_NOISE_POLICY, worker.submit, time.monotonic, content=content
            )
            informer = Informer(
                client,
                item.rtype,
                sink,
                prepare=sink.prepare,
                namespace=selection.namespace,
                label_selector=selection.label_selector,
            )
            await informer.relist()
            progress(item)
        flushed = await worker.stop(timeout=600)
        failed = [r for r in reports if not r.ok]
        if failed or not flushed:
            why = f"{failed[-1].reason}: {failed[-1].message}" if failed else "write timed out"
            raise SnapshotError(why)
        refused = {r.identity: r for report in reports for r in report.refused}
        not_written = tuple(
            sorted(refused.values(), key=lambda r: (r.identity.kind, r.identity.ref))
        )
        staged = bare.references.get(f"refs/heads/{branch}")
        if staged is None:
            return Exported(None, not_written)
        repo.remotes.create_anonymous(bare.path).fetch(
            [f"+refs/heads/{branch}:refs/kubescribe/snapshot"]
        )
        repo.references.create(f"refs/heads/{branch}", staged.target, force=True)
        repo.references.delete("refs/kubescribe/snapshot")
    if not repo.is_bare and (repo.head_is_unborn or repo.head.shorthand == branch):
        repo.checkout(f"refs/heads/{branch}", strategy=pygit2.enums.CheckoutStrategy.FORCE)
    tip = repo.references.get(f"refs/heads/{branch}")
    return Exported(str(tip.target) if tip is not None else None, not_written)
