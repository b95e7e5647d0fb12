"""procfs races: processes exiting while being read, PIDs reused with a new start time."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.host.procstat import CLOCK_TICKS
from exporter.sources.activity.procfs.source import ProcfsSource
from tests.support.faults_support import CounterWatch
from tests.support.fixturehost import FixtureHost, stat_line, write_atomic
from tests.support.paths import FIXTURES
from tests.support.running import ExporterProcess, Samples, select, start_exporter

pytestmark = pytest.mark.container_series  # its exporters serve them

POD_A = "aaaaaaaa-1111-4111-8111-aaaaaaaaaaaa"
POD_B = "bbbbbbbb-2222-4222-8222-bbbbbbbbbbbb"
CID_A = "a7" * 32
CID_B = "b8" * 32


def cgroup(pod: str, cid: str) -> str:
    slug = pod.replace("-", "_")
    return (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{slug}.slice/cri-containerd-{cid}.scope\n"
    )


def cpu_seconds(samples: Samples, cid: str) -> float:
    found = select(samples, "wattprobe_container_cpu_seconds_total", container_id=cid)
    return sum(found.values())


@pytest.fixture
def exporter(host: FixtureHost, tmp_path: Path) -> Iterator[ExporterProcess]:
    proc = start_exporter([*host.args(), "--interval", "0.2s"], log_dir=tmp_path)
    yield proc
    proc.stop()


def test_pid_reuse_is_a_new_task(host: FixtureHost, exporter: ExporterProcess) -> None:
    watch = CounterWatch(exporter)
    watch.next()
    host.add_process(5000, "worker", cgroup(POD_A, CID_A), start=50_000, utime=1000)
    samples = watch.next()
    # first seen after start-up: everything it ran counts, it started within the interval
    assert cpu_seconds(samples, CID_A) == pytest.approx(1000 / CLOCK_TICKS)
    host.add_process_ticks(5000, 100)
    samples = watch.next()
    a_total = cpu_seconds(samples, CID_A)
    assert a_total == pytest.approx(1100 / CLOCK_TICKS)

    # pid 5000 exits and, before the next read, the kernel hands 5000 to a new process with
    # less CPU time: keyed by pid alone that would be a negative delta for container A, or
    # 30 ticks charged to the wrong container
    host.remove_process(5000)
    host.add_process(5000, "other", cgroup(POD_B, CID_B), start=60_000, utime=30)
    samples = watch.next()
    assert cpu_seconds(samples, CID_A) == pytest.approx(a_total)
    assert cpu_seconds(samples, CID_B) == pytest.approx(30 / CLOCK_TICKS)
    host.add_process_ticks(5000, 20)
    samples = watch.next()
    assert cpu_seconds(samples, CID_B) == pytest.approx(50 / CLOCK_TICKS)
    assert cpu_seconds(samples, CID_A) == pytest.approx(a_total)


def test_process_exits_between_listing_and_reading(tmp_path: Path) -> None:
    """What a reader finds when a process exits mid-read: every partial state is skipped."""
    proc = tmp_path / "proc"
    shutil.copytree(FIXTURES / "proc", proc)
    (proc / "7000").mkdir()  # listed, then its files were gone
    (proc / "7001").mkdir()  # stat read, then gone before cgroup
    (proc / "7001" / "stat").write_text(stat_line(7001, "half", 1, 1, start=1))
    (proc / "7002").mkdir()  # torn read: a truncated stat line
    (proc / "7002" / "stat").write_text("7002 (torn) S 1 7002")
    (proc / "7002" / "cgroup").write_text("0::/\n")
    source = ProcfsSource(proc)
    pids = {t.pid for t in source.tasks()}
    assert pids.isdisjoint({7000, 7001, 7002})
    assert 1 in pids and 2001 in pids


def test_concurrent_churn_in_a_proc_tree(tmp_path: Path) -> None:
    """A writer creates and deletes process directories as fast as it can while tasks() runs."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "stat").write_text("cpu  1 0 1 100 0 0 0 0\ncpu0 1 0 1 100 0 0 0 0\n")
    stop = threading.Event()
    churned = [0]

    def churn() -> None:
        pid = 10_000
        while not stop.is_set():
            d = proc / str(pid)
            d.mkdir()
            (d / "stat").write_text(stat_line(pid, f"p{pid}", pid % 7, 0, start=pid))
            (d / "cgroup").write_text(cgroup(POD_A, CID_A))
            if pid % 3 == 0:
                shutil.rmtree(proc / str(pid - 2), ignore_errors=True)
            pid += 1
            churned[0] += 1

    writer = threading.Thread(target=churn, daemon=True)
    writer.start()
    source = ProcfsSource(proc)
    reads = 0
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            for t in source.tasks():
                assert t.key == (t.pid, t.pid) and t.comm == f"p{t.pid}"
                assert t.cpu_seconds == (t.pid % 7) / CLOCK_TICKS
            reads += 1
    finally:
        stop.set()
        writer.join(5)
    assert reads > 5 and churned[0] > 100


def test_real_proc_while_processes_come_and_go() -> None:
    """The real kernel's /proc, read while short-lived processes start and exit."""
    stop = threading.Event()
    spawned = [0]

    def spawn() -> None:
        while not stop.is_set():
            subprocess.run(["true"], check=False)
            spawned[0] += 1

    spawner = threading.Thread(target=spawn, daemon=True)
    spawner.start()
    source = ProcfsSource(Path("/proc"))
    reads = 0
    deadline = time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            tasks = source.tasks()
            keys = [t.key for t in tasks]
            assert len(keys) == len(set(keys))
            assert all(t.pid > 0 and t.key[0] == t.pid and t.cpu_seconds >= 0 for t in tasks)
            assert any(t.pid == os.getpid() for t in tasks)
            source.cpu_times()
            reads += 1
    finally:
        stop.set()
        spawner.join(10)
    assert reads > 3 and spawned[0] > 10


def test_hostile_comm_through_the_file(tmp_path: Path) -> None:
    """comm may hold ')', spaces, newlines and bytes that are not UTF-8 (prctl PR_SET_NAME)."""
    proc = tmp_path / "proc"
    proc.mkdir()
    names = {7100: b"a) (b", 7101: b"x\ny) 1 2", 7102: b"\xff\xfe)", 7103: b") R 0 0"}
    for pid, comm in names.items():
        d = proc / str(pid)
        d.mkdir()
        line = stat_line(pid, "COMM", 11, 22, start=pid).encode().replace(b"COMM", comm)
        (d / "stat").write_bytes(line)
        (d / "cgroup").write_bytes(cgroup(POD_A, CID_A).encode())
    tasks = {t.pid: t for t in ProcfsSource(proc).tasks()}
    # a process must not drop out of attribution (its energy billed to others) by its name
    assert set(tasks) == set(names)
    for pid, comm in names.items():
        assert tasks[pid].comm == comm.decode("utf-8", errors="replace")
        assert tasks[pid].cpu_seconds == pytest.approx(33 / CLOCK_TICKS)
        assert tasks[pid].key == (pid, pid)


def test_real_process_with_a_non_utf8_name() -> None:
    """A real process renames itself with prctl(PR_SET_NAME) to bytes that are not UTF-8."""
    script = (
        "import ctypes, sys, time\n"
        "libc = ctypes.CDLL(None)\n"
        "libc.prctl(15, b'\\xff\\xfe) (x', 0, 0, 0)\n"
        "print('ready', flush=True)\n"
        "time.sleep(30)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        raw = Path(f"/proc/{child.pid}/stat").read_bytes()
        assert b"(\xff\xfe) (x)" in raw  # the kernel shows the bytes as they are
        tasks = {t.pid: t for t in ProcfsSource(Path("/proc")).tasks()}
        assert child.pid in tasks
        assert tasks[child.pid].comm == "\ufffd\ufffd) (x"
    finally:
        child.kill()
        child.wait(10)


def test_proc_stat_unreadable_then_back(host: FixtureHost, exporter: ExporterProcess) -> None:
    """/proc/stat turns to garbage: procfs is down with a reason, power is still measured."""
    watch = CounterWatch(exporter)
    start = watch.next()
    stat = host.procfs / "stat"
    good = stat.read_text()
    stat.write_text("garbage\n")
    for _ in range(2):
        host.add_energy_j("intel-rapl:0", 5.0)
        samples = watch.next()
        up = select(samples, "wattprobe_source_up", source="procfs")
        assert list(up.values()) == [0.0]
        assert dict(next(iter(up))).get("reason") == "read error"
        rapl = select(samples, "wattprobe_source_up", source="rapl")
        assert list(rapl.values()) == [1.0]
    node = "wattprobe_node_energy_joules_total"
    package = {"device": "intel-rapl:0", "source": "rapl"}
    counted = sum(select(samples, node, **package).values()) - sum(
        select(start, node, **package).values()
    )
    assert counted == pytest.approx(10.0)
    stat.write_text(good)
    host.add_cpu_ticks(busy=50, idle=50)
    samples = watch.next()
    assert list(select(samples, "wattprobe_source_up", source="procfs").values()) == [1.0]


@pytest.mark.parametrize(
    "digits",
    [
        21,
        309,
        5000,
    ],
)
def test_a_long_utime_in_one_process_does_not_take_down_procfs(
    host: FixtureHost, exporter: ExporterProcess, digits: int
) -> None:
    """A 309+ digit utime overflowed the float division of one process's CPU seconds and took
    every process's activity down. Now that process alone is skipped."""
    watch = CounterWatch(exporter)
    # the agent's first read is its baseline (time run before start-up is not billed): a
    # process added before that read lost its first 100 ticks on a loaded machine
    watch.next(1)
    host.add_process(5000, "worker", cgroup(POD_A, CID_A), start=50_000, utime=100)
    host.add_process(5001, "liar", cgroup(POD_B, CID_B), start=50_001, utime=100)
    samples = watch.next()
    b_before = cpu_seconds(samples, CID_B)
    head, *rest = host.process_stat(5001)
    rest[11] = "9" * digits
    write_atomic(host.procfs / "5001" / "stat", head + " " + " ".join(rest) + "\n")
    for step in range(1, 3):
        host.add_process_ticks(5000, 50)
        samples = watch.next()
        assert list(select(samples, "wattprobe_source_up", source="procfs").values()) == [1.0]
        assert cpu_seconds(samples, CID_A) == pytest.approx((100 + 50 * step) / CLOCK_TICKS)
        assert cpu_seconds(samples, CID_B) == pytest.approx(b_before)  # counts nothing false
