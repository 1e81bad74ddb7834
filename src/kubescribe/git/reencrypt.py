"""Encryption upkeep of a target folder: documents encrypted for other recipients than the
renderer's are re-encrypted, and `<folder>/.sops.yaml` is kept as the renderer wants it, in
one commit that says so (see `targets.Encrypting`)."""

from __future__ import annotations

import posixpath
from typing import Any

import pygit2

from kubescribe.api import conditions as c
from kubescribe.git.chain import CommitChain, Refuse
from kubescribe.git.index import Entry
from kubescribe.git.plan import Plan
from kubescribe.git.records import Refusal
from kubescribe.git.targets import SOPS_CONFIG, Encrypting, RefusedContent
from kubescribe.git.tree import TreeConflict, edit_tree
from kubescribe.mirror.layout import ENCRYPTED_SUFFIX

# What a blob is encrypted for (None: not one to re-encrypt), by blob id.
Recipients = dict[pygit2.Oid, frozenset[str] | None]


def reencrypt(
    chain: CommitChain,
    plan: Plan,
    renderer: Encrypting,
    key: Any,
    known: Recipients,
    failed: set[tuple[pygit2.Oid, Any]],
    refuse: Refuse,
) -> None:
    """Plan every encrypted document of `plan`'s index whose recipients differ, encrypted
    for the renderer's. A blob that cannot be re-encrypted is refused once per upkeep `key`
    (remembered in `failed`) and stays as it is."""
    wanted = frozenset(renderer.recipients)
    for identity in list(plan.index):
        entry = plan.index.get(identity)
        assert entry is not None
        if not entry.path.endswith(ENCRYPTED_SUFFIX) or (entry.oid, key) in failed:
            continue
        if entry.oid not in known:
            known[entry.oid] = renderer.recipients_of(chain.repo[entry.oid].read_raw())
        if known[entry.oid] in (None, wanted):
            continue
        try:
            data = renderer.rekey(identity, chain.repo[entry.oid].read_raw())
        except Exception as exc:  # the file stays as it is; reported once per key
            failed.add((entry.oid, key))
            if isinstance(exc, RefusedContent):
                refuse(Refusal(identity, exc.reason, exc.message))
            else:
                refuse(Refusal(identity, c.REENCRYPT_FAILED, type(exc).__name__))
            continue
        oid = chain.blob(data)
        known[oid] = wanted
        plan.write(identity, Entry(entry.path, oid))


def upkeep_commit(
    chain: CommitChain, plan: Plan, renderer: Encrypting, folder: str, log: Any
) -> str | None:
    """Commit the planned re-encryptions and the folder's `.sops.yaml`; the message (None:
    nothing to commit, or a conflict, logged)."""
    edits = plan.edits()
    config_path = posixpath.join(folder, SOPS_CONFIG)
    current = chain.file(config_path)
    sops_config = renderer.sops_config(current)
    if sops_config is not None and sops_config != current:
        edits[config_path] = chain.blob(sops_config)
    if not edits:
        return None
    try:
        tree = edit_tree(chain.repo, chain.tree, edits)
    except TreeConflict as conflict:
        log.warning("build.upkeep_skipped", error=str(conflict))
        return None
    plan.apply()
    text = upkeep_message(
        len(plan.writes),
        len(set(renderer.recipients)),
        config_written=config_path in edits,
        existed=current is not None,
    )
    chain.commit(tree, text, None)
    return text


def upkeep_message(rekeyed: int, recipients: int, *, config_written: bool, existed: bool) -> str:
    """The upkeep commit's message: `rekeyed` documents re-encrypted for `recipients`, and
    whether `.sops.yaml` was written (`existed`: it was there before)."""
    to = _count(recipients, "age recipient")
    verb = "Update" if existed else "Write"
    if not rekeyed:
        return f"{verb} {SOPS_CONFIG} for {to}"
    text = f"Re-encrypt {_count(rekeyed, 'document')} for {to}"
    return f"{text}\n\n{verb} {SOPS_CONFIG}" if config_written else text


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
