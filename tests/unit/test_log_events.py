"""Log event names follow one style, `area.event_name` (e.g. `provider.probe_failed`), so logs
can be filtered by area and matched by name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "kubescribe"
LEVELS = {"debug", "info", "warning", "error", "exception", "critical"}
STYLE = re.compile(r"[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+")


def _events() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        name = path.relative_to(SRC).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in LEVELS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                found.append((name, node.lineno, node.args[0].value))
    return found


def test_log_events_are_named_area_dot_event() -> None:
    events = _events()
    assert len(events) > 20
    assert [e for e in events if not STYLE.fullmatch(e[2])] == []
