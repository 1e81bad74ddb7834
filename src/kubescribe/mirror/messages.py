"""Commit message templates: validation and rendering (str.format fields, no expressions)."""

from __future__ import annotations

import string
from collections import Counter
from collections.abc import Mapping, Sequence

from kubescribe.mirror.changes import Change, Operation

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
DEFAULT_GROUP_TEMPLATE = "{count} changes: {operations} ({kinds})"
GROUP_FIELDS = frozenset({"count", "operations", "resources", "kinds", "target", "author"})
"""Fields of the subject of a commit that groups several changes (a commit window)."""


class TemplateError(ValueError):
    """A message template uses an unknown field or is malformed."""


def field_problem(template: str, fields: frozenset[str]) -> str | None:
    """Why `template` (str.format syntax) cannot be rendered with `fields`, or None."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"template {template!r}: {exc}"
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if name not in fields:
            allowed = ", ".join(sorted(fields))
            return f"unknown field {{{name}}} in {template!r} (allowed: {allowed})"
        if spec or conversion:
            return f"format specs are not allowed in {template!r}"
    return None


def validate(template: str, fields: frozenset[str]) -> None:
    if not template.strip():
        raise TemplateError("message template must not be empty")
    problem = field_problem(template, fields)
    if problem is not None:
        raise TemplateError(problem)


def render(template: str, values: Mapping[str, object]) -> str:
    """Render a validated template; the result always ends with exactly one newline."""
    return template.format_map(dict(values)).strip() + "\n"


_PAST = {Operation.CREATE: "created", Operation.UPDATE: "updated", Operation.DELETE: "deleted"}
_MAX_LISTED = 5


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    return shown + (f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else "")


def group_values(changes: Sequence[Change], target: str, author: str) -> dict[str, object]:
    """The fields of a group subject: `count` (changes), `operations` (`2 created, 1 updated`),
    `resources` (`configmaps, deployments.apps`), `kinds` (`ConfigMap, Deployment`), `target`,
    `author` (the commit author's name)."""
    operations = Counter(change.operation for change in changes)
    resources = sorted(
        {
            f"{c.rtype.resource}.{c.rtype.group}" if c.rtype.group else c.rtype.resource
            for c in changes
        }
    )
    return {
        "count": len(changes),
        "operations": ", ".join(
            f"{operations[op]} {_PAST[op]}" for op in Operation if operations[op]
        ),
        "resources": _listing(resources),
        "kinds": _listing(sorted({c.identity.kind for c in changes})),
        "target": target,
        "author": author,
    }


def with_body(subject: str, lines: Sequence[str]) -> str:
    """A commit message: `subject` (already rendered), a blank line, one line per change."""
    body = "\n".join(line.strip().splitlines()[0] for line in lines if line.strip())
    return subject.rstrip() + "\n" + (f"\n{body}\n" if body else "")
