"""Every numeric flag of `wattprobe serve` is bounded (issue 41).

--estimate.max-watts inf was accepted and put NaN into every energy counter; --web.max-header-bytes
1e12 let four connections hold 104 MiB heads. The property walks every option of the serve
command (click's own list, so a flag added later is covered) and feeds it inf, nan, negatives
and absurd sizes: each value is refused by click (a one-line usage error, exit 2), or what it
parses to holds no number that is not finite, is negative or is absurdly large. Parsing runs the
flags' callbacks without starting anything (click's make_context).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.app.cli import cli, serve

# the largest number a flag may sensibly hold (a retention of 168 h is 604,800 s; a million
# connections): past this a parsed value is an absurd size let through
SANE = 10_000_000

OPTIONS = sorted(
    p.opts[0]
    for p in serve.params
    if isinstance(p, click.Option) and not p.is_flag and not p.count and p.opts[0] != "--help"
)
HOSTILE = [
    "inf",
    "-inf",
    "Infinity",
    "nan",
    "-1",
    "-0.5",
    "1e12",
    "1e308",
    "1e309",
    "99999999999999999999",
    "9" * 5000,
    "1e-400",
    "0x10",
    "1_000",
]
numbers = st.one_of(
    st.sampled_from(HOSTILE),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
)


def _numbers(value: Any) -> Iterator[float]:
    """Every number inside a parsed flag value (dataclasses, tuples, lists, dicts)."""
    if isinstance(value, bool | str | bytes | Path | enum.Enum) or value is None:
        return
    if isinstance(value, int | float):
        yield value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from _numbers(getattr(value, f.name))
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _numbers(k)
            yield from _numbers(v)
    elif isinstance(value, tuple | list | frozenset | set):
        for item in value:
            yield from _numbers(item)


def _parsed(flag: str, text: str) -> dict[str, Any] | None:
    """The serve command's parameters with flag=text, or None when click refuses it."""
    try:
        with serve.make_context("serve", [flag, text]) as ctx:
            return dict(ctx.params)
    except click.UsageError:
        return None


def test_the_walk_covers_the_numeric_flags() -> None:
    for flag in (
        "--estimate.max-watts",
        "--estimate.idle-watts",
        "--web.max-header-bytes",
        "--web.max-connections",
        "--web.max-requests",
        "--power.idle",
        "--interval",
        "--showback.pue",
        "--showback.carbon-intensity",
        "--showback.energy-price",
    ):
        assert flag in OPTIONS


@settings(max_examples=400, deadline=None)
@given(flag=st.sampled_from(OPTIONS), text=numbers)
def test_every_serve_flag_refuses_or_bounds_hostile_numbers(flag: str, text: str) -> None:
    params = _parsed(flag, text)
    if params is None:
        return  # refused: the one-line message is checked below
    for value in params.values():
        for n in _numbers(value):
            assert math.isfinite(n) and 0 <= n <= SANE, (flag, text, n)


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--estimate.max-watts", "inf"),
        ("--estimate.max-watts", "nan"),
        ("--estimate.idle-watts", "-5"),
        ("--estimate.max-watts", "1e9"),
        ("--web.max-header-bytes", "1000000000000"),
        ("--web.max-header-bytes", "1e12"),
        ("--web.max-connections", "99999999999"),
        ("--web.max-requests", "-1"),
        ("--power.idle", "1e300"),
        ("--power.idle", "package=inf"),
        ("--showback.carbon-intensity", "1e300"),
        ("--showback.energy-price", "1e300 EUR"),
    ],
)
def test_hostile_values_are_one_line_naming_the_flag(flag: str, value: str) -> None:
    # refused when parsed, first: an accepted value would start the agent below
    assert _parsed(flag, value) is None, (flag, value)
    result = CliRunner().invoke(cli, ["serve", flag, value])
    assert result.exit_code == 2, result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("Error:")]
    assert len(errors) == 1 and flag in errors[0], result.output
    assert "Traceback" not in result.output


def test_the_defaults_and_sane_values_are_accepted() -> None:
    assert _parsed("--interval", "5s") is not None
    for flag, value in (
        ("--estimate.max-watts", "350"),
        ("--web.max-header-bytes", "65536"),
        ("--web.max-connections", "10000"),
        ("--web.max-requests", "0"),
        ("--power.idle", "package=40,dram=3"),
    ):
        assert _parsed(flag, value) is not None, flag
