"""What is known about a GitProvider's push access (`Writable`), from probes and real pushes.

Pure. A probe that cannot run never clears a proven denial, and the push probe (which cannot
see hooks or branch protection) never clears a denial seen on a real push: only a later
accepted push does, or new credentials.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kubescribe.api import conditions as c
from kubescribe.git.records import WriteReport
from kubescribe.git.transport.errors import GitFailure

Status = Literal["True", "False", "Unknown"]


@dataclass(frozen=True)
class Evidence:
    """What is known about push access: `source` is `probe` or `push`, `at` wall-clock time."""

    status: Status
    reason: str
    message: str
    source: Literal["", "probe", "push"] = ""
    at: float = 0.0


NOT_PROBED = Evidence("Unknown", c.PROBING, "Not probed yet")


def combine(current: Evidence, new: Evidence) -> Evidence:
    """The Writable evidence after `new` was observed."""
    if current.status == "False":
        if new.status == "Unknown":
            return current  # a probe that could not run proves nothing
        if new.status == "True" and new.source == "probe" and current.source == "push":
            return current  # receive-pack access says nothing about hooks or protection
    return new


def push_evidence(current: Evidence, report: WriteReport, now: float) -> Evidence:
    """The evidence after a branch worker's report for a push made with these credentials."""
    if not report.ok:
        if report.reason == GitFailure.PERMISSION_DENIED:
            return Evidence("False", report.reason, report.message, "push", now)
        return current
    pushed_at = report.pushed_at
    if pushed_at is None or pushed_at <= current.at or current.status == "True":
        return current
    commit = f" ({report.commit[:12]})" if report.commit else ""
    return Evidence("True", c.WRITABLE, f"The last push was accepted{commit}", "push", pushed_at)
