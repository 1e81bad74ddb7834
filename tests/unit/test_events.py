"""Every Event reason the operator records beyond Ready changes is explained in the README's
"Events" table, and the table names no other."""

from __future__ import annotations

import re

from kubescribe.api import events as ev
from kubescribe_devenv.apidoc import README


def test_the_readme_explains_every_event_reason() -> None:
    section = README.read_text().split("### Events", 1)[1].split("\n### ", 1)[0]
    rows = [line.split("|")[1] for line in section.splitlines() if line.startswith("| `")]
    listed = {name for row in rows for name in re.findall(r"`([A-Za-z]+)`", row)}
    assert listed == ev.EVENT_REASONS
