"""Commit message templates: validation and rendering (str.format fields, no expressions)."""

from __future__ import annotations

import string
from collections.abc import Mapping

DEFAULT_CHANGE_TEMPLATE = "{operation} {kind} {ref}"
DEFAULT_SNAPSHOT_TEMPLATE = (
    "Snapshot {resource} in {scope}: {added} added, {updated} updated, {removed} removed"
)
CHANGE_FIELDS = frozenset(
    {
        "operation",
        "kind",
        "group",
        "version",
        "resource",
        "namespace",
        "name",
        "ref",
        "target",
        "path",
    }
)
SNAPSHOT_FIELDS = frozenset({"resource", "group", "scope", "added", "updated", "removed", "target"})


class TemplateError(ValueError):
    """A message template uses an unknown field or is malformed."""


def validate(template: str, fields: frozenset[str]) -> None:
    if not template.strip():
        raise TemplateError("message template must not be empty")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise TemplateError(f"message template {template!r}: {exc}") from None
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in fields:
            allowed = ", ".join(sorted(fields))
            raise TemplateError(f"unknown field {{{name}}} in {template!r} (allowed: {allowed})")
        if spec or conversion:
            raise TemplateError(f"format specs are not allowed in {template!r}")


def render(template: str, values: Mapping[str, object]) -> str:
    """Render a validated template; the result always ends with exactly one newline."""
    return template.format_map(dict(values)).strip() + "\n"
