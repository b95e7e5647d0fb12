"""What reading GPUs costs per interval: NVML reads, GPU accounting and attribution, rendering.

    python -m tests.benchmarks.nvml_bench            # print the figures
    python -m tests.benchmarks.nvml_bench --write    # and rewrite docs/benchmarks-nvml.md

Runs the real NvmlSource (real pynvml binding) against the fake libnvidia-ml.so.1 built from
tests/sources/gpu/nvml/fake_nvml.c, on the 8 x H100 scenario. The fake answers from memory, so the
figures
are wattprobe's own cost (Python, ctypes, pynvml) per interval; a real driver adds its own time
per NVML call (an ioctl each), which only a real GPU can measure.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from exporter.accounting.attribution import attribute
from exporter.accounting.gpu import GpuAccounting
from exporter.exposition.gpu import gpu_families
from exporter.host.cgroupfs.classify import classify_task
from exporter.model.config import IdleAttribution, IdlePower
from exporter.model.readings import TaskSample
from exporter.model.snapshot import EMPTY_SNAPSHOT
from exporter.sources.gpu.nvml.source import NvmlSource
from tests.sources.gpu.nvml.build import LIBRARY, SCENARIO_ENV, build_fake_nvml
from tests.sources.gpu.nvml.pods import H100_PODS
from tests.sources.gpu.nvml.scenario import Scenario

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "benchmarks-nvml.md"
COMMAND = "python -m tests.benchmarks.nvml_bench --write"
SCENARIO = "h100x8-timesliced"
HOST_TASKS = 400  # processes on a busy GPU node besides the GPU pods


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    """Seconds per call, one figure per call, after a short warm-up."""
    for _ in range(min(20, repeat)):
        fn()
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def summary(samples: list[float]) -> tuple[float, float, float]:
    """(median, p90, p99) in microseconds."""
    ordered = sorted(samples)
    q = statistics.quantiles(ordered, n=100)
    return statistics.median(ordered) * 1e6, q[89] * 1e6, q[98] * 1e6


def tasks() -> list[TaskSample]:
    out = [
        TaskSample((p.pid, 1000), p.pid, p.comm, p.cgroup, False, 10.0 + i)
        for i, p in enumerate(H100_PODS)
    ]
    for i in range(HOST_TASKS):
        pid = 20000 + i
        out.append(TaskSample((pid, 1), pid, "worker", "0::/system.slice/x.service", False, 1.0))
    return out


Micros = tuple[float, float, float]


@dataclass(frozen=True)
class Result:
    gpus: int
    calls: float  # NVML calls per read
    read: Micros
    account: Micros
    render: Micros
    series: int
    repeat: int


def run(repeat: int) -> Result:
    with tempfile.TemporaryDirectory() as tmp:
        lib_dir = build_fake_nvml(Path(tmp) / "lib")
        fake = ctypes.CDLL(str(lib_dir / LIBRARY), mode=ctypes.RTLD_GLOBAL)
        fake.fakeNvmlCallCount.restype = ctypes.c_ulonglong
        scenario = Scenario.from_fixture(SCENARIO, Path(tmp) / "s.nvml")
        os.environ[SCENARIO_ENV] = str(scenario.path)
        source = NvmlSource(Path(tmp), watch_xid=False)
        try:
            reading = source.read()
            before = fake.fakeNvmlCallCount()
            reads = timed(source.read, repeat)
            calls_per_read = (fake.fakeNvmlCallCount() - before) / (repeat + min(20, repeat))
        finally:
            source.close()

    task_list = tasks()
    owner = {t.key: classify_task(t.cgroup, t.kernel_thread) for t in task_list}
    accounting = GpuAccounting(
        idle_power=IdlePower(per_zone_w=(("gpu", 60.0),)), idle_policy=IdleAttribution.NONE
    )
    clock = [0.0]

    def account() -> None:
        clock[0] += 5.0
        # every GPU draws 100 W: its counter moves by 500 J per 5 s interval
        gpus = tuple(
            replace(g, energy_mj=(g.energy_mj or 0) + int(clock[0] * 1e5)) for g in reading.gpus
        )
        moved = replace(reading, gpus=gpus)
        interval = accounting.interval(
            moved, clock[0], tasks=task_list, ioctl_deltas={}, owner=owner
        )
        attribute(interval.zones, {**owner, **interval.owner}, with_tasks=False)

    accounts = timed(account, repeat)
    snap = replace(EMPTY_SNAPSHOT, gpus=accounting.counters())
    renders = timed(lambda: list(gpu_families(snap)), repeat)
    series = sum(len(m.samples) for m in gpu_families(snap))
    return Result(
        gpus=len(reading.gpus),
        calls=calls_per_read,
        read=summary(reads),
        account=summary(accounts),
        render=summary(renders),
        series=series,
        repeat=repeat,
    )


def markdown(r: Result) -> str:
    def row(name: str, figures: Micros) -> str:
        med, p90, p99 = figures
        return f"| {name} | {med:,.0f} | {p90:,.0f} | {p99:,.0f} |"

    cpu = platform.processor() or platform.machine()
    return f"""# Benchmark: NVML read cost per interval

What wattprobe spends per interval on GPUs, measured on the 8 x H100 scenario
(`tests/fixtures/nvml/{SCENARIO}.nvml`: 8 GPUs, 6 GPU processes) against the fake
libnvidia-ml.so.1, through the real nvidia-ml-py binding. The fake answers from memory, so
these are wattprobe's own costs (Python, pynvml, ctypes); on real hardware each NVML call also
costs the driver an ioctl, which only a real GPU can measure. No real GPU was available when
these figures were taken.

Rerun: `{COMMAND}` (builds the fake with gcc; {r.repeat} repetitions each).

| per interval | median µs | p90 µs | p99 µs |
|---|---|---|---|
{row(f"NvmlSource.read(), {r.gpus} GPUs", r.read)}
{row(f"GPU accounting + attribution ({HOST_TASKS + len(H100_PODS)} tasks)", r.account)}
{row("rendering the GPU metric families (once per snapshot)", r.render)}

- NVML calls per read: {r.calls:.0f} ({r.calls / r.gpus:.1f} per GPU),
  the XID thread aside (it blocks in nvmlEventSetWait_v2 and is not counted).
- GPU series exposed: {r.series} for {r.gpus} GPUs.
- Machine: {platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} CPUs, Python
  {platform.python_version()}, load average {os.getloadavg()[0]:.1f} when measured (shared
  with other jobs, so the tails are noisy; the medians are the figures to compare).
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=500)
    parser.add_argument("--write", action="store_true", help=f"rewrite {DOC.name}")
    args = parser.parse_args()
    text = markdown(run(args.repeat))
    print(text)
    if args.write:
        DOC.parent.mkdir(exist_ok=True)
        DOC.write_text(text)


if __name__ == "__main__":
    main()
