"""The Events a write tells beyond Ready, from the write's results alone."""

from __future__ import annotations

from kubescribe.api import conditions as c
from kubescribe.api import events as ev
from kubescribe.git.build import Outcome
from kubescribe.git.notices import Failures, write_notices
from kubescribe.git.records import Notice, Refusal, WriteReport
from kubescribe.mirror.changes import TargetKey
from tests.builders import ident

KEY = TargetKey("ns1", "mirror")
NONE = Failures(0, None, "")


def outcome(rebuilds: int = 0, base: str | None = None) -> Outcome:
    return Outcome(True, {}, [], {}, frozenset(), rebuilds=rebuilds, base=base)


def reasons(notices: tuple[Notice, ...]) -> list[str]:
    return [n.reason for n in notices]


def test_a_quiet_write_tells_nothing() -> None:
    done = WriteReport(target=KEY, commit="a" * 40)
    assert write_notices(done, WriteReport(target=KEY), outcome(), NONE, 100.0) == ()


def test_the_end_of_an_outage_says_how_long_and_why() -> None:
    done = WriteReport(target=KEY, commit="b" * 40)
    (notice,) = write_notices(
        done, WriteReport(target=KEY), outcome(), Failures(3, 40.0, "RemoteUnreachable"), 100.0
    )
    assert (notice.type, notice.reason) == ("Normal", ev.PUSH_RECOVERED)
    assert "pushed bbbbbbbbbbbb" in notice.message
    assert "3 failed attempt(s) over 60s" in notice.message
    assert notice.message.endswith("RemoteUnreachable")


def test_a_rebuild_names_the_foreign_base() -> None:
    done = WriteReport(target=KEY, commit="c" * 40)
    (notice,) = write_notices(done, WriteReport(target=KEY), outcome(2, "f" * 40), NONE, 0.0)
    assert notice.reason == ev.REBUILT
    assert "ffffffffffff" in notice.message
    assert "2 time(s)" in notice.message


def test_only_newly_refused_documents_are_told_and_at_most_three_by_name() -> None:
    old = Refusal(ident("old"), c.PATH_CONFLICT, "taken")
    new = [Refusal(ident(f"n{i}"), c.PATH_CONFLICT, "taken") for i in range(5)]
    mismatch = Refusal(ident("render"), c.RENDER_MISMATCH, "differs")
    result = WriteReport(target=KEY, refused=[old, *new, mismatch])
    (notice,) = write_notices(result, WriteReport(target=KEY, failing=[old]), outcome(), NONE, 0.0)
    assert (notice.type, notice.reason) == ("Warning", ev.DOCUMENT_REFUSED)
    assert "n0" in notice.message
    assert "n2" in notice.message
    assert "n3" not in notice.message
    assert "old" not in notice.message
    assert "(and 2 more)" in notice.message
    assert (
        reasons(
            write_notices(
                WriteReport(target=KEY, refused=[mismatch]),
                WriteReport(target=KEY),
                outcome(),
                NONE,
                0.0,
            )
        )
        == []
    )
