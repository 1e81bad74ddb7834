"""Points in time as people type them: `1h`, `90m`, `2d` (ago), `2026-12-03T12:00:00Z`,
`2026-12-03 12:00` (UTC unless an offset is given), `2026-12-03`, `14:05` (the last 14:05 UTC).
Pure: `now` is passed in."""

from __future__ import annotations

import datetime as dt
import re

_RELATIVE = re.compile(r"\A(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?\Z")
_COMMIT = re.compile(r"\A[0-9a-fA-F]{4,40}\Z")
_CLOCK = re.compile(r"\A\d{1,2}:\d{2}(?::\d{2})?\Z")


class TimeError(ValueError):
    """Not a time this module reads (the message says what it takes)."""


def duration(text: str) -> dt.timedelta | None:
    """`1h30m`, `2d`, `45s` as a duration; None when `text` is not one."""
    match = _RELATIVE.match(text.strip())
    if match is None or not any(match.groups()):
        return None
    days, hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
    return dt.timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def parse_time(text: str, now: dt.datetime) -> dt.datetime:
    """An absolute time (aware, UTC when no offset is given), or a duration before `now`."""
    ago = duration(text)
    if ago is not None:
        return now - ago
    value = text.strip()
    if _CLOCK.match(value):  # a time of day: the last one, UTC
        clock = dt.time.fromisoformat(value.zfill(len(value) + (value.index(":") == 1)))
        today = dt.datetime.combine(now.astimezone(dt.UTC).date(), clock, dt.UTC)
        return today if today <= now else today - dt.timedelta(days=1)
    if value.endswith(("Z", "z")):
        value = value[:-1] + "+00:00"
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise TimeError(
            f"{text!r} is not a time: give a duration ago (30m, 1h, 2d), a date and time "
            "(2026-12-03T14:05:00Z, 2026-12-03 14:05, 2026-12-03), a time of day (14:05, UTC) "
            "or a commit"
        ) from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def looks_like_commit(text: str) -> bool:
    """Hex of 4 to 40 digits that is not a plain date or number (those are times)."""
    return bool(_COMMIT.match(text)) and not text.isdigit()


def utc(when: dt.datetime) -> str:
    """How a time is shown: UTC to the second."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
