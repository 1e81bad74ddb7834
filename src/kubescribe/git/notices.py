"""What a write tells beyond Ready, as Events on its target: the end of an outage, a rebuild
on someone else's commit, documents newly refused. Pure: the worker passes its failure record
and the time."""

from __future__ import annotations

from dataclasses import dataclass

from kubescribe.api import conditions as c
from kubescribe.api import events as ev
from kubescribe.git.build import Outcome
from kubescribe.git.records import Notice, WriteReport


@dataclass(frozen=True, slots=True)
class Failures:
    """The failed writes in a row before this one."""

    count: int
    since: float | None  # wall time of the first one
    last_reason: str


def write_notices(
    result: WriteReport, last: WriteReport, outcome: Outcome, failures: Failures, now: float
) -> tuple[Notice, ...]:
    """The notices of a target's write: `result` now, `last` its previous report."""
    notices: list[Notice] = []
    done = f"pushed {result.commit[:12]}" if result.commit else "up to date again"
    if failures.count:
        since = failures.since or now
        notices.append(
            Notice(
                "Normal",
                ev.PUSH_RECOVERED,
                f"Writes work again ({done}) after {failures.count} failed attempt(s) over"
                f" {max(0.0, now - since):.0f}s; the last failure was {failures.last_reason}",
            )
        )
    if outcome.rebuilds and result.commit is not None:
        notices.append(
            Notice(
                "Normal",
                ev.REBUILT,
                f"The branch moved under this writer (a commit it did not write:"
                f" {(outcome.base or 'none')[:12]}); the batch was rebuilt on it"
                f" {outcome.rebuilds} time(s) and {done}",
            )
        )
    before = {f.identity for f in last.failing}
    new = [r for r in result.refused if r.identity not in before and r.reason != c.RENDER_MISMATCH]
    if new:
        listed = "; ".join(
            f"{r.identity.kind} {r.identity.ref}: {r.message} ({r.reason})" for r in new[:3]
        )
        more = f" (and {len(new) - 3} more)" if len(new) > 3 else ""
        notices.append(Notice("Warning", ev.DOCUMENT_REFUSED, f"Not written: {listed}{more}"))
    return tuple(notices)
