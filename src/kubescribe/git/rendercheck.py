"""The render check of kustomized targets: `kustomize build` of the root in the built tree
must give every changed object as it is live (deleted ones: not at all). A difference is
`RenderMismatch` for that object until a later check agrees. kustomize runs confined, on the
target folder exported to a scratch folder (`git.sandbox`)."""

from __future__ import annotations

import os
import posixpath
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pygit2

from kubescribe import metrics
from kubescribe.api import conditions as c
from kubescribe.git.index import folder_tree
from kubescribe.git.records import Failing, Group, Item
from kubescribe.git.sandbox import UnsafeTree, export_tree, run_confined, scratch
from kubescribe.git.targets import TargetConfig
from kubescribe.mirror.changes import Change, TargetKey
from kubescribe.mirror.identity import Identity, ResourceType, identity_of, listing_order
from kubescribe.mirror.kustomize import KUSTOMIZATION_FILES, Tree, build_refusal
from kubescribe.mirror.roots import build_roots
from kubescribe.mirror.yamlfmt import load_yaml_all

BUILD_FAILED = "kustomize build failed (its error is in the operator log)"


class NotBuilt(ValueError):
    """A tree the render check does not give to kustomize (why, in the message)."""


def render_check(
    repo: pygit2.Repository,
    tree: pygit2.Oid | None,
    targets: Mapping[TargetKey, TargetConfig],
    ktrees: Mapping[TargetKey, Tree | None],
    failing: Mapping[TargetKey, Failing],
    batch: Iterable[Item],
    log: Any,
    plain: Callable[[TargetKey, Identity], bool] = lambda key, identity: False,
) -> None:
    """Check the objects `batch` changed in the targets that ask for it, in `tree`; the
    outcome goes to the targets' `failing` documents. Objects `plain` says no kustomization
    renders (plain files beside a forest's kustomizations) are not checked."""
    for key, all_changed in changed_objects(batch).items():
        config = targets.get(key)
        ktree = ktrees.get(key)
        if config is None or config.kustomize is None or ktree is None:
            continue
        if config.kustomize.render_check_unavailable:
            metrics.RENDER_CHECKS.labels("unavailable").inc(len(all_changed))
            continue
        binary = config.kustomize.render_check
        changed = {i: change for i, change in all_changed.items() if not plain(key, i)}
        if binary and changed:
            roots = build_roots(ktree)
            _check_target(repo, tree, config, binary, roots, changed, failing[key], log)


def changed_objects(batch: Iterable[Item]) -> dict[TargetKey, dict[Identity, Change]]:
    """The last change of each object in `batch`, by target."""
    changes: dict[TargetKey, dict[Identity, Change]] = {}
    for item in batch:
        members = item.changes if isinstance(item, Group) else [item]
        for change in members:
            if isinstance(change, Change):
                changes.setdefault(change.target, {})[change.identity] = change
    return changes


def _check_target(
    repo: pygit2.Repository,
    tree: pygit2.Oid | None,
    config: TargetConfig,
    binary: str,
    roots: list[str],
    changed: Mapping[Identity, Change],
    failing: Failing,
    log: Any,
) -> None:
    started = time.perf_counter()
    try:
        rendered: dict[Identity, dict[str, Any]] = {}
        for root in roots:  # a forest's roots are rendered one by one
            rendered |= kustomize_build(repo, tree, binary, config.folder, root)
    except Exception as exc:
        # kustomize's error stays in the log: in status it would tell a repository writer
        # what the operator's Pod can reach.
        log.warning(
            "build.render_check_failed",
            target=str(config.key),
            error=str(exc),
            detail=str(exc.__cause__ or ""),
        )
        first = min(changed, key=listing_order)
        if isinstance(exc, NotBuilt):
            failing[first] = (c.KUSTOMIZE_UNSUPPORTED, f"render check not run: {exc}")
        else:
            failing[first] = (c.RENDER_MISMATCH, BUILD_FAILED)
        metrics.RENDER_CHECKS.labels("failed").inc()
        return
    compare(changed, rendered, failing, config.renderer.encrypted)
    metrics.RENDER_CHECK_SECONDS.observe(time.perf_counter() - started)
    log.info(
        "build.render_check",
        target=str(config.key),
        objects=len(changed),
        seconds=round(time.perf_counter() - started, 3),
    )


def compare(
    changed: Mapping[Identity, Change],
    rendered: Mapping[Identity, Mapping[str, Any]],
    failing: Failing,
    encrypted: Callable[[ResourceType], bool],
) -> None:
    """Mark each changed object `RenderMismatch` when `rendered` does not give it as live, and
    clear an earlier mismatch when it does. Ciphertext, and objects already failing for
    another reason, are not compared."""
    for identity, change in changed.items():
        if encrypted(change.rtype) or failing.get(identity, ("",))[0] not in (
            c.RENDER_MISMATCH,
            "",
        ):
            continue
        got = rendered.get(identity)
        want = None if change.document is None else dict(change.document)
        metrics.RENDER_CHECKS.labels("match" if got == want else "mismatch").inc()
        if got == want:
            failing.pop(identity, None)
        else:
            what = "still renders" if want is None else "renders differently"
            failing[identity] = (c.RENDER_MISMATCH, f"kustomize build {what} than live")


def kustomize_build(
    repo: pygit2.Repository, tree: pygit2.Oid | None, binary: str, folder: str, root: str
) -> dict[Identity, dict[str, Any]]:
    """`kustomize build` of `root`, with the target folder of `tree` in a scratch folder of
    the sandbox; `NotBuilt` for a tree kustomize is not given."""
    with scratch("render-") as directory:
        top = folder_tree(repo, tree, folder)
        try:
            files = export_tree(repo, top, directory) if top is not None else []
        except UnsafeTree as exc:
            raise NotBuilt("a tree entry name is not a plain file name") from exc
        for path in files:
            if posixpath.basename(path) in KUSTOMIZATION_FILES:
                refusal = build_refusal(path, (directory / path).read_bytes())
                if refusal is not None:
                    raise NotBuilt(refusal)
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
