"""The report's idle GPU minutes are the minutes WattprobeGpuIdleWhileAllocated fires, in the fast
tier: the report's PromQL condition (exporter/app/report/promql.py) is evaluated here over a minute
grid by the rules Prometheus applies to a subquery, and compared with the alert's `for` as
Prometheus' rule manager applies it (firing once the condition has held from ActiveAt for `for`:
`ts - ActiveAt >= for`, tests/alerts/showback.yml: true from 0m, firing from 60m). The
real-Prometheus test (test_report_prometheus.py) checks the same figures against the engine."""

from __future__ import annotations

import re
from collections.abc import Set

from hypothesis import example, given
from hypothesis import strategies as st

from exporter.app.report.promql import STEP_MS, Queries

MINUTE_MS = 60_000
_HELD = re.compile(
    r"count_over_time\(\((?P<cond>.*)\)\[(?P<window>\d+)ms:1m\]\) (?P<op>>=|>) (?P<n>\d+)\)"
)


def _held_clause(idle_for_ms: int, range_ms: int) -> tuple[int, str, int]:
    """(window in ms, comparison, threshold) of the report's held condition."""
    query = Queries("", range_ms, idle_for_ms).idle_gpu_minutes()
    m = _HELD.search(query)
    assert m is not None, query
    assert query.endswith(f"[{range_ms - 1}ms:1m]))")  # the chunk's minutes (start, end]
    return int(m["window"]), m["op"], int(m["n"])


def _points(t: int, window_ms: int, left_closed: bool) -> range:
    """Minute points of a subquery `[window_ms:1m]` evaluated at minute t: (t - w, t] in
    Prometheus 3, [t - w, t] in Prometheus 2."""
    low_ms = t * MINUTE_MS - window_ms
    first = -(-low_ms // MINUTE_MS)  # ceil
    if first * MINUTE_MS == low_ms and not left_closed:
        first += 1
    return range(first, t + 1)


def report_minutes(
    idle: Set[int], idle_for_ms: int, start: int, end: int, left_closed: bool
) -> list[int]:
    """The minutes in (start, end] the report counts, for a GPU allocated all along that is
    idle (the alert's condition true) at the minutes in `idle`."""
    window, op, n = _held_clause(idle_for_ms, (end - start) * MINUTE_MS)
    out = []
    for t in range(start + 1, end + 1):
        count = sum(1 for p in _points(t, window, left_closed) if p in idle)
        if count >= n if op == ">=" else count > n:
            out.append(t)
    return out


def alert_firing_minutes(idle: Set[int], idle_for_ms: int, start: int, end: int) -> list[int]:
    """The minutes in (start, end] the alert is firing, evaluated every minute from the data's
    start (minute 0): pending from the first true evaluation (ActiveAt), firing once
    `t - ActiveAt >= for`, reset by a false evaluation."""
    active_at: int | None = None
    out = []
    for t in range(0, end + 1):
        if t not in idle:
            active_at = None
            continue
        if active_at is None:
            active_at = t
        if (t - active_at) * MINUTE_MS >= idle_for_ms and t > start:
            out.append(t)
    return out


def test_a_gpu_idle_from_the_start_counts_from_when_the_alert_fires() -> None:
    """The worked example of docs/report.md: idle from 00:00 for two days, `for` 1h: the alert
    fires from 01:00, so day one has 1440 - 59 = 1381 idle minutes and day two 1440."""
    day = 1440
    idle = set(range(0, 2 * day + 1))
    for left_closed in (False, True):
        first = report_minutes(idle, 3_600_000, 0, day, left_closed)
        second = report_minutes(idle, 3_600_000, day, 2 * day, left_closed)
        assert (len(first), len(second)) == (1381, 1440)
        assert first[0] == 60
    assert len(alert_firing_minutes(idle, 3_600_000, 0, day)) == 1381


def test_the_held_window_spans_the_alerts_for_plus_its_first_evaluation() -> None:
    window, op, n = _held_clause(3_600_000, 86_400_000)
    assert (op, n) == (">=", 3_600_000 // STEP_MS + 1)
    assert len(_points(100, window, left_closed=False)) == n
    assert len(_points(100, window, left_closed=True)) == n


@given(
    flags=st.lists(st.booleans(), min_size=1, max_size=240),
    idle_for_min=st.sampled_from((1, 5, 10, 60)),
    left_closed=st.booleans(),
    data=st.data(),
)
@example(flags=[True] * 130, idle_for_min=60, left_closed=False, data=None)
def test_report_idle_minutes_are_the_alerts_firing_minutes(
    flags: list[bool], idle_for_min: int, left_closed: bool, data: st.DataObject | None
) -> None:
    """Any pattern of idle and busy minutes, any chunk: the same minutes, not one more or less."""
    idle = {t for t, flag in enumerate(flags) if flag}
    end = len(flags)
    start = data.draw(st.integers(0, end - 1)) if data is not None else 0
    idle_for_ms = idle_for_min * MINUTE_MS
    expected = alert_firing_minutes(idle, idle_for_ms, start, end)
    assert report_minutes(idle, idle_for_ms, start, end, left_closed) == expected
