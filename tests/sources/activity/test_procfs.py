from __future__ import annotations

from pathlib import Path

import pytest

from exporter.host.procstat import CLOCK_TICKS, parse_cpu_times, parse_stat
from exporter.model.readings import SourceError
from exporter.sources.activity.procfs.source import ProcfsSource
from tests.support.fixturehost import FixtureHost, stat_line
from tests.support.paths import FIXTURES

FIXTURE_PROC = FIXTURES / "proc"


@pytest.mark.parametrize(
    "comm", ["systemd", "my (weird) proc", "a) b (c", ") )", "x (y)", "tab\there", ""]
)
def test_parse_stat_keeps_odd_comm_names(comm: str) -> None:
    stat = parse_stat(stat_line(42, comm, 300, 200, start=777, flags=0x208040))
    assert (stat.pid, stat.comm, stat.utime_ticks, stat.stime_ticks, stat.start_ticks) == (
        42,
        comm,
        300,
        200,
        777,
    )
    assert stat.flags == 0x208040


def test_parse_stat_rejects_truncated_lines() -> None:
    with pytest.raises(ValueError):
        parse_stat("42 (x) S 1 2")


def test_parse_cpu_times_counts_busy_and_idle() -> None:
    cpu = parse_cpu_times((FIXTURE_PROC / "stat").read_text())
    assert cpu.ncpu == 4
    # user+nice+system+irq+softirq+steal ; idle+iowait
    assert cpu.busy_s == pytest.approx((1_000_000 + 2_000 + 300_000 + 0 + 5_000 + 0) / CLOCK_TICKS)
    assert cpu.idle_s == pytest.approx((50_000_000 + 10_000) / CLOCK_TICKS)


def test_reads_every_process_of_the_fixture_tree() -> None:
    tasks = {t.pid: t for t in ProcfsSource(FIXTURE_PROC).tasks()}
    assert len(tasks) == 22
    assert tasks[950].comm == "my (weird) proc"
    assert tasks[951].comm == "a) b (c"
    assert tasks[2].kernel_thread and tasks[15].kernel_thread and not tasks[1].kernel_thread
    assert tasks[1001].cpu_seconds == pytest.approx((3000 + 1000) / CLOCK_TICKS)
    assert tasks[1001].key == (1001, 7010)
    assert "cpu,cpuacct:/kubepods/burstable/pod" in tasks[2001].cgroup


def test_process_exiting_between_listing_and_reading_is_skipped(host: FixtureHost) -> None:
    (host.procfs / "1001" / "cgroup").unlink()  # stat read fine, cgroup gone: it exited
    (host.procfs / "1002" / "stat").unlink()
    pids = {t.pid for t in ProcfsSource(host.procfs).tasks()}
    assert 1001 not in pids and 1002 not in pids and 1101 in pids


def test_missing_proc_is_a_source_error(tmp_path: Path) -> None:
    source = ProcfsSource(tmp_path / "nope")
    with pytest.raises(SourceError):
        source.tasks()
    with pytest.raises(SourceError):
        source.cpu_times()
