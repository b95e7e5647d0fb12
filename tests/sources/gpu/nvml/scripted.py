"""In-memory sources for monitor-level GPU tests: scripted NVML readings, fixed tasks and CPU.

These stand in for the hardware where the test is about the monitor's arithmetic; the NVML
source itself is tested through the real binding and the fake library (test_source, test_e2e).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from exporter.model.gpu_readings import (
    GpuProcess,
    GpuReading,
    GpuReadings,
    MigInstanceReading,
    ProcessUtilization,
)
from exporter.model.readings import CpuTimes, SourceError, TaskSample
from tests.sources.gpu.nvml.pods import GpuPod

GiB = 1024**3


def task(pod: GpuPod, start: int = 1000) -> TaskSample:
    return TaskSample(
        key=(pod.pid, start),
        pid=pod.pid,
        comm=pod.comm,
        cgroup=pod.cgroup,
        kernel_thread=False,
        cpu_seconds=1.0,
    )


def gpu_reading(
    index: int,
    energy_mj: int | None,
    *,
    power_w: float | None = 300.0,
    utilization: float | None = 0.5,
    processes: Sequence[tuple[int, int | None]] = (),
    sm: Sequence[tuple[int, float]] | None = None,
    lost: bool = False,
    mig: Sequence[MigInstanceReading] = (),
) -> GpuReading:
    """A GPU: processes as (pid, memory bytes), sm as (pid, SM %) samples (None: unsupported)."""
    procs = tuple(GpuProcess(pid, mem) for pid, mem in processes)
    util = None if sm is None else tuple(ProcessUtilization(p, s, 0.0, 1) for p, s in sm)
    if lost:
        return GpuReading(index, f"GPU-{index}", "Fake GPU", f"0000:{index:02x}:00.0", lost=True)
    return GpuReading(
        index=index,
        uuid=f"GPU-{index}",
        name="Fake GPU",
        pci_bus_id=f"0000:{index:02x}:00.0",
        mig_enabled=bool(mig),
        utilization_ratio=None if mig else utilization,
        power_w=power_w,
        energy_mj=energy_mj,
        processes=tuple(p for inst in mig for p in inst.processes) if mig else procs,
        process_utilization=None if mig else util,
        mig_instances=tuple(mig),
    )


def mig_instance(
    uuid: str, gi: int, total: int, processes: Sequence[tuple[int, int | None]], used: int = 0
) -> MigInstanceReading:
    return MigInstanceReading(
        uuid=uuid,
        name=f"Fake GPU MIG {gi}g",
        gpu_instance=gi,
        compute_instance=0,
        memory_used_bytes=used or sum(m or 0 for _, m in processes),
        memory_total_bytes=total,
        processes=tuple(
            GpuProcess(pid, mem, gpu_instance=gi, compute_instance=0) for pid, mem in processes
        ),
    )


@dataclass
class ScriptedGpus:
    """Returns the next scripted reading (or raises the scripted error) on each read()."""

    script: list[GpuReadings | SourceError] = field(default_factory=list)
    name: str = "nvml"
    closed: bool = False

    def push(self, *gpus: GpuReading) -> None:
        self.script.append(GpuReadings("550.54.15", "12.550.54.15", "12.4", tuple(gpus)))

    def read(self) -> GpuReadings:
        item = self.script.pop(0)
        if isinstance(item, SourceError):
            raise item
        return item

    def close(self) -> None:
        self.closed = True


@dataclass
class StaticActivity:
    """A fixed set of tasks; each read adds the per-task ioctl counts given by ioctls()."""

    tasks_now: list[TaskSample]
    name: str = "procfs"
    ioctls: Callable[[TaskSample], int] | None = None
    _reads: int = 0

    def tasks(self) -> Sequence[TaskSample]:
        self._reads += 1
        if self.ioctls is None:
            return list(self.tasks_now)
        out = []
        for t in self.tasks_now:
            n = self.ioctls(t) * self._reads
            out.append(
                TaskSample(
                    t.key, t.pid, t.comm, t.cgroup, t.kernel_thread, t.cpu_seconds, (("nvidia", n),)
                )
            )
        return out


class StaticCpu:
    def __init__(self) -> None:
        self._busy = 0.0

    def cpu_times(self) -> CpuTimes:
        self._busy += 1.0
        return CpuTimes(busy_s=self._busy, idle_s=self._busy, ncpu=4)


class Clock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now
