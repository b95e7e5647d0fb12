"""The report's period: last-month, this-month, YYYY-MM or START..END (dates, END included),
split into UTC days, the unit every query works on."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

DAY = timedelta(days=1)
MONTH_RE = re.compile(r"^(\d{4})-(\d{2})$")
RANGE_RE = re.compile(r"^(\d{4}-\d{2}-\d{2})\.\.(\d{4}-\d{2}-\d{2})$")


@dataclass(frozen=True)
class Period:
    """[start, end) in UTC; end may be "now" (this-month), not on a day boundary."""

    start: datetime
    end: datetime
    label: str

    def days(self) -> list[tuple[datetime, datetime]]:
        """(start, end) of each UTC day in the period, the last one cut at the period's end."""
        out = []
        day = self.start
        while day < self.end:
            out.append((day, min(day + DAY, self.end)))
            day += DAY
        return out


def _month_start(year: int, month: int) -> datetime:
    return datetime(year, month, 1, tzinfo=UTC)


def _next_month(start: datetime) -> datetime:
    return _month_start(start.year + start.month // 12, start.month % 12 + 1)


def _day(text: str) -> datetime:
    try:
        d = date.fromisoformat(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a date (YYYY-MM-DD)") from None
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


def parse_period(text: str, now: datetime) -> Period:
    """The period named by text, relative to now (UTC) for last-month and this-month."""
    text = text.strip()
    this_month = _month_start(now.year, now.month)
    if text == "last-month":
        start = _month_start(now.year - (now.month == 1), (now.month - 2) % 12 + 1)
        return Period(start, this_month, start.strftime("%Y-%m"))
    if text == "this-month":
        # to the last whole minute: the GPU-hour subqueries step by minutes
        end = now.replace(second=0, microsecond=0)
        if end <= this_month:
            raise ValueError("this-month has no whole minute yet")
        return Period(this_month, end, f"{this_month:%Y-%m} to {end:%Y-%m-%d %H:%M} UTC")
    if m := MONTH_RE.match(text):
        year, month = int(m[1]), int(m[2])
        if not 1 <= month <= 12:
            raise ValueError(f"{text!r}: no month {month}")
        start = _month_start(year, month)
        return _not_future(Period(start, _next_month(start), text), now)
    if m := RANGE_RE.match(text):
        start, last = _day(m[1]), _day(m[2])
        if last < start:
            raise ValueError(f"{text!r}: the end comes before the start")
        return _not_future(Period(start, last + DAY, text), now)
    raise ValueError(f"{text!r} is not last-month, this-month, YYYY-MM or YYYY-MM-DD..YYYY-MM-DD")


def _not_future(period: Period, now: datetime) -> Period:
    if period.end > now:
        raise ValueError(
            f"{period.label} has not ended yet ({period.end:%Y-%m-%d %H:%M} UTC); "
            "use this-month for the month so far"
        )
    return period
