"""The catalogue of condition types and reasons (`api/conditions.py`) and the README's
troubleshooting table agree: every reason a condition can carry is explained there."""

from __future__ import annotations

import re

from kubescribe.api import conditions as c
from kubescribe_devenv.apidoc import README


def _table() -> list[list[str]]:
    text = README.read_text()
    section = text.split("## Troubleshooting by status reason", 1)[1].split("\n## ", 1)[0]
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("|") and not line.startswith("| ---")
    ][1:]


def test_every_reason_has_a_row_in_the_troubleshooting_table() -> None:
    listed = {name for row in _table() for name in re.findall(r"`([A-Za-z]+)`", row[1])}
    assert sorted(c.REASONS - listed) == []


def test_the_table_names_only_catalogued_reasons_and_types() -> None:
    listed = {name for row in _table() for name in re.findall(r"`([A-Za-z]+)`", row[1])}
    assert sorted(listed - c.REASONS - c.CONDITION_TYPES) == []


def test_every_condition_type_is_named_in_the_table() -> None:
    kinds = " ".join(row[0] for row in _table())
    assert sorted(t for t in c.CONDITION_TYPES if t not in kinds) == []


def test_types_and_reasons_are_valid_condition_reasons() -> None:
    for value in c.REASONS | c.CONDITION_TYPES:
        assert c.set_condition([], c.READY, "True", value, "", 1, "now")[0]["reason"] == value
    assert c.STALLED_REASONS <= c.REASONS
