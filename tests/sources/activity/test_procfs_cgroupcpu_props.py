"""Properties of the cgroup CPU time parsers and of the exited-time counter built on them."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exporter.host.kernelnum import MAX_DIGITS, OutOfRange
from exporter.model.readings import TaskKey, TaskSample
from exporter.sources.activity.procfs.cgroupcpu import (
    V1,
    V2,
    CgroupCpuFiles,
    parse_cpu_stat,
    parse_cpuacct_usage,
)
from exporter.sources.activity.procfs.exited import ExitedCpu, settle
from tests.sources.activity.test_procfs_exited import A, B, Clock, Files
from tests.support.props import PROPERTY

U64 = st.integers(min_value=0, max_value=2**64 - 1)
OTHER_LINES = st.lists(
    st.sampled_from(
        [
            "user_usec 5",
            "system_usec 7",
            "nice_usec 0",
            "core_sched.force_idle_usec 0",
            "nr_periods 12",
            "nr_throttled 0",
            "throttled_usec 0",
            "nr_bursts 0",
            "burst_usec 0",
        ]
    ),
    max_size=9,
)


@PROPERTY
@given(U64, OTHER_LINES, st.integers(min_value=0, max_value=9))
def test_cpu_stat_round_trip(usage: int, others: list[str], at: int) -> None:
    lines = list(others)
    lines.insert(min(at, len(lines)), f"usage_usec {usage}")
    assert parse_cpu_stat("\n".join(lines) + "\n") == usage * 1000


@PROPERTY
@given(st.text(max_size=200))
@example("usage_usec -5\n")
@example("usage_usec +5\n")
@example("usage_usec 1_000\n")
@example("usage_usec \u0663\n")
@example("usage_usec\t5\n")
def test_cpu_stat_garbage_is_a_value_error(text: str) -> None:
    try:
        ns = parse_cpu_stat(text)
    except ValueError:
        return
    # accepted only with a line the kernel could have written
    line = next(x for x in text.split("\n") if x.startswith("usage_usec "))
    digits = line.removeprefix("usage_usec ").strip(" \t\r")
    assert digits.isascii() and digits.isdigit() and len(digits) <= MAX_DIGITS
    assert ns == int(digits) * 1000


@PROPERTY
@given(st.integers(min_value=MAX_DIGITS + 1, max_value=5000), st.sampled_from("0123456789"))
@example(4301, "9")  # past int()'s default digit limit
def test_numbers_longer_than_the_kernel_writes_are_garbage(length: int, lead: str) -> None:
    number = lead + "9" * (length - 1)
    with pytest.raises(OutOfRange):
        parse_cpu_stat(f"usage_usec {number}\nuser_usec 1\n")
    with pytest.raises(OutOfRange):
        parse_cpuacct_usage(number + "\n")


@PROPERTY
@given(U64, st.sampled_from(["", "\n", " \n"]))
def test_cpuacct_usage_round_trip(usage: int, tail: str) -> None:
    assert parse_cpuacct_usage(f"{usage}{tail}") == usage


@PROPERTY
@given(st.text(max_size=40))
@example("-1\n")
@example("1 2\n")
def test_cpuacct_usage_garbage_is_a_value_error(text: str) -> None:
    try:
        ns = parse_cpuacct_usage(text)
    except ValueError:
        return
    digits = text.strip(" \t\r\n")
    assert digits.isascii() and digits.isdigit() and ns == int(digits)


_ROOT = Path(tempfile.mkdtemp(prefix="wattprobe-props-cg-"))
(_ROOT / "unified").mkdir()
(_ROOT / "unified" / "cgroup.controllers").write_text("")
(_ROOT / "cpuacct").mkdir()
(_ROOT / "cpuacct" / "cpuacct.usage").write_text("0\n")
_FILES = CgroupCpuFiles(_ROOT)
_SEGMENT = st.one_of(
    st.sampled_from(["..", ".", "", "kubepods", "x.scope", "pod1"]),
    st.text(min_size=1, max_size=8),
)


@PROPERTY
@given(st.lists(_SEGMENT, max_size=6), st.sampled_from(["0::", "3:cpu,cpuacct:", "2:cpuacct:"]))
def test_located_files_stay_under_their_mounts(segments: list[str], prefix: str) -> None:
    """Whatever a cgroup line holds, the file read is under the cgroup root."""
    text = prefix + "/" + "/".join(segments) + "\n"
    where = _FILES.locate(text)
    if where is None:
        return
    kind, path = where
    assert kind == (V2 if prefix == "0::" else V1)
    mount = _ROOT / ("unified" if kind == V2 else "cpuacct")
    resolved = Path(f"{mount}{path}").resolve()
    assert resolved != mount.resolve() and mount.resolve() in resolved.parents


@PROPERTY
@given(
    st.lists(st.tuples(st.floats(0, 1e6), st.floats(0, 1e6)), max_size=40),
)
def test_remainder_never_goes_back(steps: list[tuple[float, float]]) -> None:
    raw = level = 0.0
    reported = 0.0
    surplus = 0.0
    peak = 0.0
    for kernel_s, credited_s in steps:
        before = level
        raw, level = settle(raw, level, kernel_s, credited_s)
        assert level >= before
        reported += level - before
        surplus += kernel_s - credited_s
        peak = max(peak, surplus)
    # what is reported is the highest the kernel's surplus over the credits ever was
    assert math.isclose(reported, peak, rel_tol=1e-9, abs_tol=1e-6)


_USAGE = st.one_of(st.none(), st.integers(min_value=0, max_value=10**13))  # None: unreadable
_LIVE = st.lists(st.tuples(st.sampled_from([A, B]), st.floats(0, 1e4)), max_size=4)


@PROPERTY
@given(st.lists(st.tuples(_USAGE, _USAGE, _LIVE, st.floats(0, 30)), max_size=25))
def test_arbitrary_totals_and_live_sums_never_make_a_counter_go_back(
    scans: list[tuple[int | None, int | None, list[tuple[str, float]], float]],
) -> None:
    """Totals that jump, fall or vanish, live processes whose time does anything: every
    pseudo task the monitor sees twice in a row is at least what it was, and never negative."""
    files = Files()
    clock = Clock()
    exited = ExitedCpu(files, clock=clock, ncpu=8)
    last: dict[TaskKey, float] = {}
    for usage_a, usage_b, live, dt in scans:
        for path, usage in ((A, usage_a), (B, usage_b)):
            if usage is None:
                files.usage.pop(path, None)
            else:
                files.usage[path] = usage
        clock.now += dt
        tasks = [
            TaskSample((i + 1, 1), i + 1, "sh", f"0::{path}\n", False, cpu)
            for i, (path, cpu) in enumerate(live)
        ]
        seen = {}
        for t in exited.update(tasks):
            assert t.cpu_seconds >= 0 and math.isfinite(t.cpu_seconds)
            if t.key in last:
                assert t.cpu_seconds >= last[t.key]
            seen[t.key] = t.cpu_seconds
        last = seen
