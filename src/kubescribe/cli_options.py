"""Options the command line's modules share: where the kubeconfig is; how long a type may be
missing from discovery; how long author lookups wait."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import click


def existing_file(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return value
    path = Path(os.path.expanduser(value))
    if not path.is_file():
        why = "is a directory" if path.is_dir() else "does not exist"
        raise click.BadParameter(
            f"{value} {why}; give a kubeconfig file, or leave the flag out to use $KUBECONFIG "
            "or ~/.kube/config"
        )
    return value


def kubeconfig_options(command: Callable[..., None]) -> Callable[..., None]:
    """--kubeconfig and --context, resolved as kubectl resolves them (`kube.config.resolve`)."""
    command = click.option(
        "--context",
        default=None,
        help="Kubeconfig context (default: the current-context).",
    )(command)
    return click.option(
        "--kubeconfig",
        default=None,
        metavar="FILE",
        callback=existing_file,
        help="Kubeconfig file. Default: $KUBECONFIG (a ':'-separated list, merged as kubectl "
        "does), else ~/.kube/config, else the in-cluster service account.",
    )(command)


discovery_grace_option = click.option(
    "--discovery-grace",
    type=click.FloatRange(min=1),
    default=60.0,
    show_default=True,
    help="Seconds a served type may be missing from discovery before it counts as removed: "
    "its streams stop and its files are swept (prune Always) or counted as retained.",
)

ATTRIBUTION_WAITS = (
    click.option(
        "--attribution-grace",
        "grace",
        type=click.FloatRange(min=0),
        default=3.0,
        show_default=True,
        help="Seconds to wait for a change's audit fact before its author is unresolved.",
    ),
    click.option(
        "--audit-silent-after",
        "silent_after",
        type=click.FloatRange(min=0),
        default=300.0,
        show_default=True,
        help="Seconds without any record after which an audit route (or the change webhook) "
        "is silent: shown in the provider's status, and lookups on it stop waiting out the "
        "grace (0 = never silent).",
    ),
)
