"""Periods: what each spelling covers, in UTC days; and how figures are rounded."""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta
from decimal import ROUND_HALF_EVEN, Decimal, localcontext
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.app.report.figures import decimal
from exporter.app.report.period import parse_period

NOW = datetime(2026, 1, 15, 10, 30, 45, tzinfo=UTC)


def test_last_month_crosses_the_year() -> None:
    p = parse_period("last-month", NOW)
    assert (p.start, p.end, p.label) == (
        datetime(2025, 12, 1, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=UTC),
        "2025-12",
    )
    assert len(p.days()) == 31


def test_this_month_ends_at_the_last_whole_minute() -> None:
    p = parse_period("this-month", NOW)
    assert p.end == datetime(2026, 1, 15, 10, 30, tzinfo=UTC)
    days = p.days()
    assert len(days) == 15
    assert days[-1] == (datetime(2026, 1, 15, tzinfo=UTC), p.end)


def test_month_and_range() -> None:
    assert len(parse_period("2024-02", NOW).days()) == 29
    p = parse_period("2025-12-30..2026-01-02", NOW)
    assert (p.start, p.end) == (
        datetime(2025, 12, 30, tzinfo=UTC),
        datetime(2026, 1, 3, tzinfo=UTC),
    )


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("2026-01", "has not ended yet"),
        ("2025-13", "no month 13"),
        ("2025-03-05..2025-03-01", "end comes before the start"),
        ("2025-02-30..2025-03-01", "is not a date"),
        ("yesterday", "is not last-month"),
    ],
)
def test_refused(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_period(text, NOW)


@settings(deadline=None)
@given(st.dates(date(2000, 1, 1), date(2030, 12, 31)), st.integers(0, 400))
def test_days_tile_the_period(first: date, length: int) -> None:
    last = first + timedelta(days=length)
    p = parse_period(f"{first}..{last}", datetime(2033, 1, 1, tzinfo=UTC))
    days = p.days()
    assert len(days) == length + 1
    assert days[0][0] == p.start
    assert days[-1][1] == p.end
    for (_, end), (start, _) in itertools.pairwise(days):
        assert end == start  # no gap, no overlap
    assert all(end - start == timedelta(days=1) for start, end in days)


@settings(deadline=None)
@given(st.fractions(), st.integers(0, 8))
def test_figures_round_half_even_from_the_exact_value(value: Fraction, places: int) -> None:
    text = decimal(value, places)
    with localcontext() as ctx:
        ctx.prec = 200
        exact = Decimal(value.numerator) / Decimal(value.denominator)
        want = exact.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_EVEN)
    assert Decimal(text) == want
    assert len(text.partition(".")[2]) == places
