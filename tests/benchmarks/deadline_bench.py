"""What reading the sources under a deadline costs per interval (exporter/accounting/deadline.py).

    python -m tests.benchmarks.deadline_bench [--steps 2000]

Two measurements, each inline (every read on the stepping thread, as before) against threaded
(each source on its worker thread, collected until the deadline):

- handoff: DeadlineReads.run / InlineReads.run on five calls that do nothing, which is the
  whole added cost of the threads: submitting, waking the workers, waiting for their results;
- step: Monitor.step on the real sources (ProcfsSource, RaplSource, HwmonSource) over a copy of
  the checked-in fixture trees (tests/fixtures), the small node every fault test runs on, where
  the handoff weighs most against the work.

Wall time per call and CPU time per call of the whole process (all threads: the workers' CPU is
what the threads cost), median and p90 of batches of 50 calls. At the default 5 s interval the
CPU share is the per-interval CPU divided by 5 s.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from exporter.accounting.deadline import Call, DeadlineReads, InlineReads, SourceReads
from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.sources.activity.procfs.source import ProcfsSource
from exporter.sources.power.hwmon import HwmonSource
from exporter.sources.power.rapl import RaplSource
from tests.support.fixturehost import FixtureHost
from tests.support.monitor import monitor_settings
from tests.support.paths import FIXTURES

BATCH = 50
INTERVAL_S = 5.0


def per_call(fn: Callable[[], object], steps: int) -> tuple[list[float], list[float]]:
    """(wall, process CPU) seconds per call, one figure per batch of BATCH calls."""
    for _ in range(min(100, steps)):
        fn()
    wall, cpu = [], []
    for _ in range(max(1, steps // BATCH)):
        w0, c0 = time.perf_counter(), time.process_time()
        for _ in range(BATCH):
            fn()
        wall.append((time.perf_counter() - w0) / BATCH)
        cpu.append((time.process_time() - c0) / BATCH)
    return wall, cpu


def row(name: str, wall: list[float], cpu: list[float]) -> str:
    def us(xs: list[float], q: int) -> float:
        return statistics.quantiles(sorted(xs), n=10)[q - 1] * 1e6 if len(xs) > 1 else xs[0] * 1e6

    cpu_med = statistics.median(cpu)
    return (
        f"| {name} | {statistics.median(wall) * 1e6:,.0f} | {us(wall, 9):,.0f} "
        f"| {cpu_med * 1e6:,.0f} | {us(cpu, 9):,.0f} | {cpu_med / INTERVAL_S * 100:.4f} % |"
    )


def handoff(reads: SourceReads, steps: int) -> tuple[list[float], list[float]]:
    calls = [Call(f"c{i}", f"w{i}", lambda: None) for i in range(5)]
    return per_call(lambda: reads.run(calls), steps)


def monitor(host: FixtureHost, timeout_s: float | None) -> Monitor:
    procfs = ProcfsSource(host.procfs)
    return Monitor(
        MonitorParts(
            cpu=procfs, activity=procfs, power=[RaplSource(host.sysfs), HwmonSource(host.sysfs)]
        ),
        monitor_settings(read_timeout_s=timeout_s),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, {platform.machine()}, {args.steps} calls each\n")
    print("| what | wall median µs | wall p90 µs | CPU median µs | CPU p90 µs | CPU at 5 s |")
    print("|---|---:|---:|---:|---:|---:|")
    inline = InlineReads()
    threaded = DeadlineReads(2.5)
    try:
        print(row("handoff, 5 no-op sources, inline", *handoff(inline, args.steps)))
        print(row("handoff, 5 no-op sources, threaded", *handoff(threaded, args.steps)))
    finally:
        threaded.close()
    with tempfile.TemporaryDirectory() as tmp:
        host = FixtureHost.copy_of(FIXTURES, Path(tmp) / "host")
        for name, timeout in (("inline", None), ("threaded", 2.5)):
            m = monitor(host, timeout)
            try:
                print(
                    row(f"Monitor.step on the fixture node, {name}", *per_call(m.step, args.steps))
                )
            finally:
                m.close()


if __name__ == "__main__":
    main()
