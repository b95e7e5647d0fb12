"""Properties of the /proc parsers: hostile process names, any numbers, arbitrary garbage."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.host.procstat import CLOCK_TICKS, parse_cpu_times, parse_stat
from tests.support.fixturehost import stat_line
from tests.support.props import PROPERTY

# what comm can hold: any character but NUL; ')' ' ' '(' and newlines are the dangerous ones
HOSTILE = st.sampled_from([")", "(", " ", "\n", "\t", ") ", " (", ")S", "1", "\ufffd"])
comm = st.lists(st.one_of(HOSTILE, st.characters(blacklist_characters="\0")), max_size=20).map(
    "".join
)
ticks = st.integers(min_value=0, max_value=2**64 - 1)


@PROPERTY
@given(
    pid=st.integers(min_value=1, max_value=2**22),
    name=comm,
    utime=ticks,
    stime=ticks,
    start=ticks,
    flags=st.integers(min_value=0, max_value=2**32 - 1),
)
def test_stat_round_trip(
    *, pid: int, name: str, utime: int, stime: int, start: int, flags: int
) -> None:
    parsed = parse_stat(stat_line(pid, name, utime, stime, start=start, flags=flags))
    assert parsed.pid == pid
    assert parsed.comm == name
    assert (parsed.utime_ticks, parsed.stime_ticks, parsed.start_ticks) == (utime, stime, start)
    assert parsed.flags == flags


@PROPERTY
@given(st.text(max_size=400))
def test_stat_garbage_raises_only_value_error(text: str) -> None:
    with contextlib.suppress(ValueError):
        parse_stat(text)


@PROPERTY
@given(
    st.lists(st.integers(min_value=0, max_value=2**63), min_size=4, max_size=10),
    st.integers(min_value=1, max_value=512),
)
def test_cpu_times_formula(values: list[int], ncpu: int) -> None:
    cpu_lines = "".join(f"cpu{i} 1 0 1 1 0 0 0 0\n" for i in range(ncpu))
    text = "cpu  " + " ".join(map(str, values)) + "\n" + cpu_lines + "intr 5 0\nctxt 9\n"
    times = parse_cpu_times(text)
    v = values + [0] * (8 - len(values))
    busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]  # user nice system irq softirq steal
    assert times.busy_s == busy / CLOCK_TICKS
    assert times.idle_s == (v[3] + v[4]) / CLOCK_TICKS
    assert times.ncpu == ncpu


@PROPERTY
@given(st.text(max_size=400))
def test_cpu_times_garbage_raises_only_value_error(text: str) -> None:
    try:
        times = parse_cpu_times(text)
    except ValueError:
        return
    assert times.ncpu >= 1


# whitespace-split fields of a stat line: 0 pid, 8 flags, 13 utime, 14 stime, 21 starttime are
# parsed; 3 (ppid) and 22 (vsize) are not
_PARSED = (0, 8, 13, 14, 21)


@PROPERTY
@given(
    index=st.sampled_from([*_PARSED, 3, 22]),
    digits=st.integers(min_value=21, max_value=6000),
)
def test_stat_long_numbers_are_value_errors(index: int, digits: int) -> None:
    fields = stat_line(42, "x", 1, 2, start=3, flags=4).split()
    fields[index] = "9" * digits
    line = " ".join(fields) + "\n"
    if index not in _PARSED:
        assert parse_stat(line).utime_ticks == 1  # a field the parser does not read
        return
    with pytest.raises(ValueError):
        parse_stat(line)


@PROPERTY
@given(
    position=st.integers(min_value=0, max_value=7), digits=st.integers(min_value=21, max_value=6000)
)
def test_cpu_times_long_numbers_are_value_errors(position: int, digits: int) -> None:
    values = ["1"] * 8
    values[position] = "9" * digits
    with pytest.raises(ValueError):
        parse_cpu_times("cpu  " + " ".join(values) + "\ncpu0 1 0 1 1 0 0 0 0\n")


@PROPERTY
@given(index=st.sampled_from(_PARSED[1:]), value=st.integers(min_value=-(2**63), max_value=-1))
def test_stat_negative_numbers_are_value_errors(index: int, value: int) -> None:
    """Every field parse_stat reads is unsigned in the kernel: a negative one is garbage (it
    would be negative CPU time). Found by tests/fuzz_atheris.py's proc_scan target."""
    fields = stat_line(42, "x", 1, 2, start=3, flags=4).split()
    fields[index] = str(value)
    with pytest.raises(ValueError):
        parse_stat(" ".join(fields) + "\n")
