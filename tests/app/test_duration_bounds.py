"""Every duration flag has a range; a value outside it is a one-line error naming the flag.

An --interval of 1 us burned a core; 1e9 s left /readyz at 503 forever. Both now stop at start-up
(exit 2) with the range in one line, as click reports any bad flag value.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.app.cli import cli
from exporter.model.config import (
    INTERVAL_RANGE,
    RETENTION_RANGE,
    TIMEOUT_RANGE,
    DurationRange,
    bounded_duration,
    format_duration,
    parse_duration,
)
from tests.app.test_cli import wattprobe

# (command, flag, its range): every flag that takes a duration
FLAGS: list[tuple[str, str, DurationRange]] = [
    ("serve", "--interval", INTERVAL_RANGE),
    ("serve", "--source.timeout", TIMEOUT_RANGE),
    ("serve", "--workload.retention", RETENTION_RANGE),
    ("serve", "--web.read-header-timeout", TIMEOUT_RANGE),
    ("serve", "--web.idle-timeout", TIMEOUT_RANGE),
    ("serve", "--web.write-timeout", TIMEOUT_RANGE),
    ("serve", "--kube.timeout", TIMEOUT_RANGE),
    ("serve", "--kube.poll-interval", INTERVAL_RANGE),
    ("serve", "--kube.metadata-ttl", RETENTION_RANGE),
    ("top", "--interval", INTERVAL_RANGE),
]


def _outside(bounds: DurationRange) -> list[str]:
    low, high = bounds
    return [f"{low / 2:.3f}s", f"{high * 2:.0f}s", "0.000001s", "1e9"]


@pytest.mark.parametrize(("command", "flag", "bounds"), FLAGS)
def test_out_of_range_is_one_line_naming_the_flag_and_range(
    command: str, flag: str, bounds: DurationRange
) -> None:
    runner = CliRunner()
    for value in _outside(bounds):
        result = runner.invoke(cli, [command, flag, value])
        assert result.exit_code == 2, (flag, value, result.output)
        assert isinstance(result.exception, SystemExit)
        line = next(ln for ln in result.output.splitlines() if ln.startswith("Error:"))
        assert flag in line and "out of range" in line, line
        assert f"{format_duration(bounds[0])} to {format_duration(bounds[1])}" in line


def test_the_agent_refuses_the_reported_intervals_in_one_line() -> None:
    """The two values from the report, through the real entry point."""
    for value in ("0.000001s", "1e9"):
        result = wattprobe("serve", "--interval", value)
        assert result.returncode == 2
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "--interval" in lines[0] and "100ms to 1h" in lines[0], lines


@pytest.mark.parametrize("bounds", [INTERVAL_RANGE, TIMEOUT_RANGE, RETENTION_RANGE])
def test_the_edges_are_accepted_and_named_as_parse_duration_reads_them(
    bounds: DurationRange,
) -> None:
    parse = bounded_duration(bounds)
    for edge in bounds:
        assert parse(format_duration(edge)) == edge
        assert parse_duration(format_duration(edge)) == edge


@settings(deadline=None, max_examples=200)
@given(st.floats(min_value=1e-6, max_value=1e7, allow_nan=False))
def test_a_value_is_accepted_exactly_when_inside_the_range(seconds: float) -> None:
    low, high = INTERVAL_RANGE
    parse = bounded_duration(INTERVAL_RANGE)
    text = repr(seconds)
    if low <= float(text) <= high:
        assert parse(text) == float(text)
    else:
        with pytest.raises(ValueError, match="out of range"):
            parse(text)
