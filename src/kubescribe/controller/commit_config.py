"""A target's commit settings: the GitProvider's window and templates, overridden field by field
by the GitTarget's `spec.commit` (pure).

Windows belong to one target (`kubescribe.mirror.window`), so targets that share a branch writer
never have to agree on one: each keeps its own window and templates, and the branch's commits
stay in the order their windows close.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubescribe.api import conditions as c
from kubescribe.api.gittarget import TargetCommitSpec
from kubescribe.api.models import GitProviderSpec
from kubescribe.mirror import messages
from kubescribe.mirror.window import WindowPolicy, parse_duration

MAX_WINDOW = 3600.0  # the CRD's bound; a value stored before it is refused here too


class CommitConfigError(ValueError):
    """A template or duration that cannot be used; `reason` is the condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class CommitConfig:
    """What a target's commits look like and how its changes are grouped."""

    change: str
    snapshot: str
    group: str
    window: WindowPolicy


def commit_config(
    provider: GitProviderSpec, target: TargetCommitSpec | None = None
) -> CommitConfig:
    """The settings of a target of `provider` (of the provider alone without `target`);
    `CommitConfigError` naming the field at fault."""
    own = target or TargetCommitSpec()
    told = own.message
    base = provider.commit.message
    where = "spec.commit" if target is not None else "spec.push"
    templates = {
        "change": (told and told.change) or base.change,
        "snapshot": (told and told.snapshot) or base.snapshot,
        "group": (told and told.group) or base.group,
    }
    fields = {
        "change": messages.CHANGE_FIELDS,
        "snapshot": messages.SNAPSHOT_FIELDS,
        "group": messages.GROUP_FIELDS,
    }
    for name, template in templates.items():
        try:
            messages.validate(template, fields[name])
        except messages.TemplateError as exc:
            raise CommitConfigError(
                c.INVALID_TEMPLATE, f"spec.commit.message.{name}: {exc}"
            ) from None
    window = own.commit_window or provider.push.commit_window
    try:
        seconds = parse_duration(window)
    except ValueError as exc:
        raise CommitConfigError(c.INVALID_SPEC, f"{where}: {exc}") from None
    if seconds > MAX_WINDOW:
        raise CommitConfigError(c.INVALID_SPEC, f"{where}: commit window {window!r} over 1h")
    size = own.max_changes_per_commit or provider.push.max_changes_per_commit
    return CommitConfig(
        templates["change"], templates["snapshot"], templates["group"], WindowPolicy(seconds, size)
    )
