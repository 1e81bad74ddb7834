"""Pytest hooks that keep CI honest: under `CI=true` a skipped test fails (a green run must
prove the in-cluster, transport and Redis behaviour ran), and every run ends with the count of
tests per suite and marker, and of skips."""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Generator

import pytest

SUITES = ("unit", "integration", "e2e", "cluster")
MARKERS = ("controlplane", "cluster")


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true, where every test must run: {reason}"


def _suite(nodeid: str) -> str:
    parts = nodeid.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" and parts[1] in SUITES else "other"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    suites: Counter[str] = Counter()
    markers: Counter[str] = Counter()
    skipped = 0
    for outcome in ("passed", "failed", "skipped", "error", "xfailed", "xpassed"):
        for report in terminalreporter.stats.get(outcome, []):
            if not isinstance(report, pytest.TestReport):
                continue
            if report.when == "call" or (report.when == "setup" and not report.passed):
                suites[_suite(report.nodeid)] += 1
                markers.update(m for m in MARKERS if m in report.keywords)
                skipped += outcome == "skipped"
    if not suites:
        return
    counts = ", ".join(f"{name} {suites[name]}" for name in (*SUITES, "other") if suites[name])
    marked = ", ".join(f"{name} {markers[name]}" for name in MARKERS)
    terminalreporter.write_line(
        f"tests per suite: {counts}; per marker: {marked}; skipped {skipped}"
    )
