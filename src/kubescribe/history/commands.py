"""What `kubescribe history | show | diff | blame | timeline | restore` do, behind their flags
(declared in `kubescribe.cli`). Each returns its text; a question the history cannot answer, or
a restore it refuses, raises `HistoryError` with the reason in one line."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubescribe.history import fields, views
from kubescribe.history.index import Entry, History, HistoryError, index_file
from kubescribe.history.refs import ObjectRef, parse_ref
from kubescribe.history.restoring import controlled_by, refusal, restorable
from kubescribe.history.source import Source, cache_dir, fetch_remote, from_target, open_local
from kubescribe.history.times import parse_time, utc
from kubescribe.mirror.identity import Identity
from kubescribe.mirror.yamlfmt import dump_yaml

KEY_FILE_ENV = "SOPS_AGE_KEY_FILE"
KEY_ENV = "SOPS_AGE_KEY"


@dataclass(frozen=True)
class Where:
    """Where the history is: `repo` (a clone, a bare repository or a URL) or `target`."""

    repo: str | None
    target: str | None
    branch: str | None
    folder: str
    kubeconfig: str | None
    context: str | None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _source(where: Where) -> Source:
    if where.target:
        namespace, sep, name = where.target.partition("/")
        if not sep or not namespace or not name:
            raise HistoryError(f"--target {where.target!r} is not NAMESPACE/NAME")
        from kubescribe.kube.client import KubeClient  # noqa: PLC0415

        async def read() -> Source:
            client = await KubeClient.connect(where.kubeconfig, where.context)
            try:
                return await from_target(client, namespace, name)
            finally:
                await client.close()

        return asyncio.run(read())
    if not where.repo:
        raise HistoryError("give --repo (a clone or URL) or --target NAMESPACE/NAME")
    if "://" in where.repo or (":" in where.repo and "@" in where.repo.split(":")[0]):
        return fetch_remote(where.repo, where.branch or "main", where.folder)
    return open_local(Path(where.repo), where.branch, where.folder)


def open_history(where: Where) -> tuple[History, Source]:
    """The indexed history (its index under $XDG_CACHE_HOME/kubescribe/history)."""
    source = _source(where)
    db = index_file(cache_dir() / "history", source.repo.path, source.branch, source.folder)
    return History(source.repo, source.tip, source.folder, db), source


def _object(history: History, ref_text: str, namespace: str | None) -> tuple[ObjectRef, Identity]:
    ref = parse_ref(ref_text)
    return ref, views.find(history, ref, namespace)


def history_text(
    history: History,
    ref_text: str,
    namespace: str | None,
    since: str | None,
    until: str | None,
    author: str | None,
    output: str,
) -> str:
    _, identity = _object(history, ref_text, namespace)
    now = _now()
    entries = views.filtered(
        history.changes_of(identity),
        author_text=author,
        since=parse_time(since, now) if since else None,
        until=parse_time(until, now) if until else None,
    )
    if output == "json":
        return json.dumps([views.entry_json(history, e) for e in reversed(entries)], indent=2)
    if not entries:
        return f"no change of {identity.kind} {identity.ref} matches"
    return views.table(views.history_rows(history, entries))


def _version(history: History, identity: Identity, text: str) -> tuple[Entry, dict[str, Any]]:
    entry = views.at(history.changes_of(identity), views.point(history, text, _now()))
    if entry is None:
        raise HistoryError(f"{identity.kind} {identity.ref} did not exist yet at {text}")
    doc = history.content(entry)
    if doc is None:
        raise HistoryError(
            f"{identity.kind} {identity.ref} did not exist at {text}: deleted at "
            f"{utc(entry.commit.time)} by {entry.commit.author} ({entry.commit.sha[:10]})"
        )
    return entry, doc


def show_text(history: History, ref_text: str, namespace: str | None, at_text: str) -> str:
    _, identity = _object(history, ref_text, namespace)
    entry, doc = _version(history, identity, at_text)
    head = (
        f"# {identity.kind} {identity.ref} as of {utc(entry.commit.time)}, "
        f"commit {entry.commit.sha[:10]} by {views.author(entry)}\n"
    )
    if fields.is_secret(doc):
        head += "# values hidden (a Secret); `restore` decrypts them with --age-identity\n"
        doc = fields.redacted(doc)
    return head + dump_yaml(doc)


def age_identities(key_file: str | None) -> list[str]:
    """The user's age identities: --age-identity, else $SOPS_AGE_KEY_FILE, else $SOPS_AGE_KEY."""
    from kubescribe.secrets.age import parse_identities  # noqa: PLC0415

    path = key_file or os.environ.get(KEY_FILE_ENV)
    try:
        text = Path(path).read_text() if path else os.environ.get(KEY_ENV, "")
        return parse_identities(text)
    except ValueError as exc:
        raise HistoryError(f"the age identity is not valid ({exc})") from None


def _decrypted(doc: dict[str, Any], raw: bytes, identities: Sequence[str]) -> dict[str, Any]:
    from kubescribe.secrets.sops import SopsError, decrypt_document  # noqa: PLC0415

    if "sops" not in doc:
        return doc
    if not identities:
        raise HistoryError(
            "this version is SOPS-encrypted: give the age identity it was encrypted to with "
            f"--age-identity FILE (or ${KEY_FILE_ENV}); nothing was applied"
        )
    try:
        return decrypt_document(raw, identities)
    except SopsError as exc:
        raise HistoryError(f"cannot decrypt this version: {exc}; nothing was applied") from None


def _live(where: Where, identity: Identity, api_version: str) -> tuple[str, dict[str, Any] | None]:
    from kubescribe.history.live import object_path, read_live, resource_of  # noqa: PLC0415
    from kubescribe.kube.client import KubeClient  # noqa: PLC0415

    async def read() -> tuple[str, dict[str, Any] | None]:
        client = await KubeClient.connect(where.kubeconfig, where.context)
        try:
            path = object_path(await resource_of(client, identity, api_version), identity)
            return path, await read_live(client, path)
        finally:
            await client.close()

    return asyncio.run(read())


def _content(source: Source) -> Any:
    from kubescribe.api.gittarget import CONTROLLER_MANAGERS  # noqa: PLC0415
    from kubescribe.mirror.owned import Content  # noqa: PLC0415

    spec = source.content or {}
    controllers = spec.get("controllers", CONTROLLER_MANAGERS)
    return Content(spec.get("mode", "Owned"), tuple(sorted(controllers)))


def diff_text(
    history: History,
    source: Source,
    where: Where,
    ref_text: str,
    namespace: str | None,
    from_text: str | None,
    to_text: str | None,
    key_file: str | None,
) -> str:
    """Field-level lines, then the unified diff, from one point to another (or to live)."""
    _, identity = _object(history, ref_text, namespace)
    entries = history.changes_of(identity)
    now = _now()

    def at(text: str) -> Entry | None:
        return views.at(entries, views.point(history, text, now))

    def version(entry: Entry | None) -> tuple[str, Any, bytes | None]:
        if entry is None:
            return "(nothing)", None, None
        return entry.commit.sha[:10], history.content(entry), history.raw(entry)

    newest = entries[-1]
    if to_text == "live":
        old_label, old, raw = version(at(from_text) if from_text else newest)
        known = old or history.read(newest.old_blob, identity) or {}
        _, live = _live(where, identity, str(known.get("apiVersion", "")))
        from kubescribe.history.live import as_mirrored  # noqa: PLC0415

        new_label, new = "live", as_mirrored(live, _content(source)) if live else None
    else:
        to_entry = at(to_text) if to_text else newest
        if from_text:
            from_entry = at(from_text)
        else:
            earlier = [e for e in entries if to_entry and e.commit.seq < to_entry.commit.seq]
            from_entry = earlier[-1] if earlier else None
        old_label, old, raw = version(from_entry)
        new_label, new, _ = version(to_entry)
    secret = fields.is_secret(old) or fields.is_secret(new)
    note = ""
    if secret and to_text == "live" and old is not None and raw is not None:
        identities = age_identities(key_file)
        if identities:
            old = _decrypted(old, raw, identities)
        else:
            note = "# Secret values not compared: give --age-identity to compare them\n"
            old, new = fields.redacted(old), fields.redacted(new)
    if secret:
        old, new = fields.redacted_pair(old, new)
    lines = views.field_lines(old, new, secret)
    if not lines:
        return f"{identity.kind} {identity.ref}: no difference ({old_label} → {new_label})"
    body = views.unified(old, new, f"{old_label}", f"{new_label}")
    return note + "\n".join(lines) + "\n\n" + body.rstrip("\n")


def blame_text(history: History, ref_text: str, namespace: str | None) -> str:
    _, identity = _object(history, ref_text, namespace)
    return views.table(views.blame_rows(history, history.changes_of(identity)))


def timeline_text(
    history: History,
    namespace: str | None,
    since: str,
    until: str | None,
    author: str | None,
    kind: str | None,
    output: str,
) -> str:
    now = _now()
    start = parse_time(since, now)
    end = parse_time(until, now) if until else None
    kinds: Callable[[str, str], bool] | None = None
    if kind:
        kinds = parse_ref(f"{kind}/x").matches_type
    entries = views.filtered(
        history.window(start, end), namespace=namespace, author_text=author, kind=kinds
    )
    if output == "json":
        return json.dumps([views.entry_json(history, e) for e in reversed(entries)], indent=2)
    if not entries:
        return f"no change since {utc(start)}"
    return views.table(views.timeline_rows(history, entries))


def restore_text(
    history: History,
    source: Source,
    where: Where,
    ref_text: str,
    namespace: str | None,
    at_text: str,
    key_file: str | None,
    apply_mode: str | None,
    force: bool,
    emit: Callable[[str], None],
) -> str:
    """Shows what a restore changes against live; applies it when `apply_mode` is `yes` or
    `server` (a server-side dry run)."""
    from kubescribe.history.live import apply, as_mirrored  # noqa: PLC0415

    _, identity = _object(history, ref_text, namespace)
    entry, doc = _version(history, identity, at_text)
    if fields.is_secret(doc):
        raw = history.raw(entry)
        assert raw is not None
        doc = _decrypted(doc, raw, age_identities(key_file))
    if (why := refusal(doc)) is not None:
        raise HistoryError(f"cannot restore {identity.kind} {identity.ref}: {why}")
    wanted = restorable(doc)
    path, live = _live(where, identity, str(wanted.get("apiVersion")))
    if (owner := controlled_by(live)) is not None:
        raise HistoryError(
            f"cannot restore {identity.kind} {identity.ref}: {owner} controls it and would undo "
            "the restore; restore the owner instead"
        )
    secret = fields.is_secret(doc)
    current = as_mirrored(live, _content(source)) if live is not None else None
    version = f"{entry.commit.sha[:10]} ({utc(entry.commit.time)}, {views.author(entry)})"
    lines = views.field_lines(current, wanted, secret)
    what = "absent now: it is created" if live is None else "live now"
    emit(f"{identity.kind} {identity.ref} at {version}, against {what}:")
    emit("\n".join(lines) if lines else "(no difference)")
    if apply_mode is None:
        return "not applied: add --yes to apply it, or --dry-run=server to have it checked"

    async def send() -> dict[str, Any]:
        from kubescribe.kube.client import KubeClient  # noqa: PLC0415

        client = await KubeClient.connect(where.kubeconfig, where.context)
        try:
            return await apply(client, path, wanted, dry_run=apply_mode == "server", force=force)
        finally:
            await client.close()

    from kubescribe.kube.client import ApiError  # noqa: PLC0415

    try:
        asyncio.run(send())
    except ApiError as exc:
        if exc.status == 409:
            raise HistoryError(
                f"other field managers own fields this restore sets ({exc.message}); rerun with "
                "--force-conflicts to take them over"
            ) from None
        raise
    done = "would be restored (server dry run)" if apply_mode == "server" else "restored"
    return f"{identity.kind} {identity.ref} {done} to {version}"
