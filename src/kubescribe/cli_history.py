"""The history commands: `history | show | diff | blame | timeline | restore` (docs/history.md),
registered on `kubescribe` by `cli` (and so `kubectl scribe ...`). Like `cli`, each command
imports what it uses when it runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from kubescribe.cli_options import kubeconfig_options


def _history_options(command: Callable[..., None]) -> Callable[..., None]:
    """Where the history is read from, and the kubeconfig for --target and the live object."""
    options = [
        click.option(
            "--repo",
            default=None,
            metavar="PATH|URL",
            help="The mirror: a clone or bare repository on disk, or a URL (fetched into "
            "$XDG_CACHE_HOME/kubescribe; read only, never pushed).",
        ),
        click.option(
            "--target",
            default=None,
            metavar="NAMESPACE/NAME",
            help="Read the repository, branch and folder of this GitTarget (and its provider's "
            "credentials, when you may read them) instead of --repo.",
        ),
        click.option(
            "--branch", default=None, help="Branch (default: the clone's HEAD; main for a URL)."
        ),
        click.option(
            "--path",
            "folder",
            default="",
            help="Folder of the repository the mirror writes (a GitTarget's spec.path).",
        ),
    ]
    for option in reversed(options):
        command = option(command)
    return kubeconfig_options(command)


def _namespace_option(command: Callable[..., None]) -> Callable[..., None]:
    return click.option(
        "--namespace",
        "-n",
        default=None,
        help="Namespace of the object (needed when the name is in several).",
    )(command)


_OUTPUT = click.option(
    "--output", "-o", type=click.Choice(["table", "json"]), default="table", show_default=True
)
_AGE_IDENTITY = click.option(
    "--age-identity",
    "key_file",
    default=None,
    metavar="FILE",
    help="age identity file (age-keygen output) that decrypts the mirror's Secrets. Default: "
    "$SOPS_AGE_KEY_FILE, else the key in $SOPS_AGE_KEY.",
)


def _object_ref(ctx: click.Context, param: click.Parameter, value: str) -> str:
    from kubescribe.history.refs import RefError, parse_ref  # noqa: PLC0415

    try:
        parse_ref(value)
    except RefError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


def _history_call(where: dict[str, Any], answer: Callable[..., str]) -> None:
    """Open the history and echo `answer(history, source, where)`; its refusals are one line
    (exit code 1)."""
    from kubescribe.history.commands import Where, open_history  # noqa: PLC0415
    from kubescribe.history.index import HistoryError  # noqa: PLC0415
    from kubescribe.history.refs import RefError  # noqa: PLC0415
    from kubescribe.history.times import TimeError  # noqa: PLC0415

    place = Where(**where)
    try:
        history, source = open_history(place)
    except HistoryError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        click.echo(answer(history, source, place))
    except (RefError, TimeError) as exc:
        raise click.UsageError(str(exc)) from None
    except HistoryError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        history.close()


def _where(
    repo: str | None,
    target: str | None,
    branch: str | None,
    folder: str,
    kubeconfig: str | None,
    context: str | None,
) -> dict[str, Any]:
    if bool(repo) == bool(target):
        raise click.UsageError("give either --repo PATH|URL or --target NAMESPACE/NAME")
    if target is not None and len([p for p in target.split("/") if p]) != 2:
        raise click.BadParameter(f"{target!r} is not NAMESPACE/NAME", param_hint="--target")
    return {
        "repo": repo,
        "target": target,
        "branch": branch,
        "folder": folder,
        "kubeconfig": kubeconfig,
        "context": context,
    }


@click.command()
@click.argument("obj", metavar="TYPE/NAME", callback=_object_ref)
@_namespace_option
@click.option("--since", default=None, help="Only changes since (1h, 2d, 2026-12-03T14:00Z).")
@click.option("--until", default=None, help="Only changes until (same forms).")
@click.option("--author", default=None, help="Only changes by this author (part of name/email).")
@_OUTPUT
@_history_options
def history(
    obj: str,
    namespace: str | None,
    since: str | None,
    until: str | None,
    author: str | None,
    output: str,
    **where: Any,
) -> None:
    """Every change of one object, newest first: time, author and how it was known, operation,
    commit and what changed by field path (never a Secret's value)."""
    from kubescribe.history.commands import history_text  # noqa: PLC0415

    _history_call(
        _where(**where),
        lambda h, s, w: history_text(h, obj, namespace, since, until, author, output),
    )


@click.command()
@click.argument("obj", metavar="TYPE/NAME", callback=_object_ref)
@_namespace_option
@click.option("--at", "at_", required=True, metavar="TIME|COMMIT", help="When (or which commit).")
@_history_options
def show(obj: str, namespace: str | None, at_: str, **where: Any) -> None:
    """The object as it was at a time or commit (a Secret's values hidden)."""
    from kubescribe.history.commands import show_text  # noqa: PLC0415

    _history_call(_where(**where), lambda h, s, w: show_text(h, obj, namespace, at_))


@click.command()
@click.argument("obj", metavar="TYPE/NAME", callback=_object_ref)
@_namespace_option
@click.option(
    "--from", "from_", default=None, metavar="TIME|COMMIT", help="Default: the version before."
)
@click.option(
    "--to",
    default=None,
    metavar="TIME|COMMIT|live",
    help="Default: the newest version; `live`: the cluster now (drift).",
)
@_AGE_IDENTITY
@_history_options
def diff(
    obj: str,
    namespace: str | None,
    from_: str | None,
    to: str | None,
    key_file: str | None,
    **where: Any,
) -> None:
    """What changed between two points, or between Git and the cluster now: by field path,
    then as a unified diff."""
    from kubescribe.history.commands import diff_text  # noqa: PLC0415

    _history_call(
        _where(**where),
        lambda h, s, w: diff_text(h, s, w, obj, namespace, from_, to, key_file),
    )


@click.command()
@click.argument("obj", metavar="TYPE/NAME", callback=_object_ref)
@_namespace_option
@_history_options
def blame(obj: str, namespace: str | None, **where: Any) -> None:
    """For each field of the object, the change that last set it: time, author, commit."""
    from kubescribe.history.commands import blame_text  # noqa: PLC0415

    _history_call(_where(**where), lambda h, s, w: blame_text(h, obj, namespace))


@click.command()
@_namespace_option
@click.option(
    "--all-namespaces", "-A", is_flag=True, help="Every namespace (the default without -n)."
)
@click.option("--since", default="1h", show_default=True, help="Start (30m, 1h, 2d, or a time).")
@click.option("--until", default=None, help="End (default: now).")
@click.option("--author", default=None, help="Only changes by this author (part of name/email).")
@click.option("--kind", default=None, help="Only this type (deployment, cm, secrets.core, ...).")
@_OUTPUT
@_history_options
def timeline(
    namespace: str | None,
    all_namespaces: bool,
    since: str,
    until: str | None,
    author: str | None,
    kind: str | None,
    output: str,
    **where: Any,
) -> None:
    """What changed in a window, across objects, newest first: the incident view."""
    from kubescribe.history.commands import timeline_text  # noqa: PLC0415

    if namespace is not None and all_namespaces:
        raise click.UsageError("give -n NAMESPACE or -A, not both")
    _history_call(
        _where(**where),
        lambda h, s, w: timeline_text(h, namespace, since, until, author, kind, output),
    )


@click.command()
@click.argument("obj", metavar="TYPE/NAME", callback=_object_ref)
@_namespace_option
@click.option("--at", "at_", required=True, metavar="TIME|COMMIT", help="The version to restore.")
@click.option(
    "--yes", is_flag=True, help="Apply it (server-side apply, field manager kubescribe-restore)."
)
@click.option(
    "--dry-run",
    type=click.Choice(["server"]),
    default=None,
    help="Have the API server check the apply without persisting it.",
)
@click.option(
    "--force-conflicts",
    is_flag=True,
    help="Take over fields other field managers own (else such a restore is refused).",
)
@_AGE_IDENTITY
@_history_options
def restore(
    obj: str,
    namespace: str | None,
    at_: str,
    yes: bool,
    dry_run: str | None,
    force_conflicts: bool,
    key_file: str | None,
    **where: Any,
) -> None:
    """Give back the object as it was: shows the difference to the cluster now, then applies
    it with --yes (or checks it with --dry-run=server). Restores deleted objects; a Secret
    needs the age identity it was encrypted to."""
    from kubescribe.history.commands import restore_text  # noqa: PLC0415

    mode = "server" if dry_run else ("yes" if yes else None)
    _history_call(
        _where(**where),
        lambda h, s, w: restore_text(
            h, s, w, obj, namespace, at_, key_file, mode, force_conflicts, click.echo
        ),
    )


COMMANDS = (history, show, diff, blame, timeline, restore)
