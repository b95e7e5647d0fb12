"""Interrupt time in eBPF mode: /proc/stat's irq + softirq as one kernel task (kernel_processes).

With on-CPU time from the kernel's per-task runtime (se.sum_exec_runtime), what a kernel built
with CONFIG_IRQ_TIME_ACCOUNTING spends in hardirq and softirq context (softirqs that ksoftirqd
does not run) is taken out of the interrupted task's runtime and counted in /proc/stat's irq and
softirq fields instead: it reaches no task and no cgroup's cpu.stat. Left out, it would be
spread over every workload by share; reported here as one kernel task, it is kernel_processes'
as in /proc mode (exporter/sources/activity/procfs/hostwork.py), and the cgroups keep exactly
their cpu.stat time.

Without that option (tick-based accounting), or with on-CPU time from clock reads between
switches, interrupt time stays inside the interrupted task's time (and its cgroup's cpu.stat):
reporting the ticks as well would count it twice, so the source does not use this reader there
(LoadInfo.irq_time_apart).
"""

from __future__ import annotations

from pathlib import Path

from exporter.host.hostfile import read_text_bounded
from exporter.host.procstat import CLOCK_TICKS, MAX_PROC_STAT_BYTES, irq_ticks
from exporter.model.readings import TaskSample

IRQ_PID = -4  # key (IRQ_PID, 0): not a process; the /proc source's pseudo keys are -2 and -3
IRQ_KEY = (IRQ_PID, 0)
IRQ_COMM = "[irq]"


class InterruptTime:
    """Cumulative irq + softirq time of the node since the first read, as a kernel task sample.

    From the first read, not from boot: the monitor counts all of a key it has not seen
    before as new time. Never missing once read: when /proc/stat cannot be read, the last
    value is repeated, so the next reading's delta covers the gap once."""

    def __init__(self, procfs: Path, ticks_per_second: int = CLOCK_TICKS) -> None:
        self._stat = str(procfs / "stat")
        self._ticks_per_second = ticks_per_second
        self._first: int | None = None
        self._last = 0

    def sample(self) -> TaskSample | None:
        """None only while /proc/stat has never been read."""
        try:
            ticks = irq_ticks(read_text_bounded(self._stat, MAX_PROC_STAT_BYTES))
        except (OSError, ValueError):
            if self._first is None:
                return None
        else:
            if self._first is None:
                self._first = ticks
            self._last = max(self._last, ticks - self._first)  # the kernel's sum only rises
        return TaskSample(
            key=IRQ_KEY,
            pid=IRQ_PID,
            comm=IRQ_COMM,
            cgroup="",
            kernel_thread=True,
            cpu_seconds=self._last / self._ticks_per_second,
        )
