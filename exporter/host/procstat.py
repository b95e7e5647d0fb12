"""/proc/stat and /proc/<pid>/stat as the kernel writes them: the node's busy and idle CPU
time and the fields of a process that wattprobe uses. The activity sources and the estimate
read them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from exporter.host.files import short_error
from exporter.host.hostfile import read_text_bounded
from exporter.host.kernelnum import MAX_DIGITS
from exporter.model.readings import CpuTimes, SourceError

READ_ERROR = "read error"

PF_KTHREAD = 0x00200000  # task flag of kernel threads (include/linux/sched.h)
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
# /proc/stat: ~150 bytes per CPU plus the interrupt line; 4 MiB covers thousands of CPUs
MAX_PROC_STAT_BYTES = 4 << 20


# /proc/stat fields irq and softirq (after "cpu"), 0-based
_IRQ_FIELDS = (5, 6)


def irq_ticks(text: str) -> int:
    """irq + softirq ticks of /proc/stat's aggregate cpu line: the node's time in interrupt
    context (host work in both activity modes: kernel_processes)."""
    for line in text.split("\n"):
        if line.startswith("cpu "):
            fields = line.split()[1:]
            return sum(int(fields[i]) for i in _IRQ_FIELDS if i < len(fields))
    raise ValueError("no aggregate cpu line in /proc/stat")


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of /proc/<pid>/stat that wattprobe uses."""

    pid: int
    comm: str
    flags: int
    utime_ticks: int
    stime_ticks: int
    start_ticks: int


def _number(field: str) -> int:
    """An unsigned /proc number (every field read here is one): int() bounded to what the kernel
    writes (u64 max is 20 digits), so a long one is a ValueError for this line, not an overflow
    further on, and a negative one is garbage, not negative CPU time."""
    if len(field) > MAX_DIGITS:
        raise ValueError(f"number too long ({len(field)} characters)")
    value = int(field)
    if value < 0:
        raise ValueError(f"negative value {field}")
    return value


def parse_stat(text: str) -> ProcStat:
    """Parse /proc/<pid>/stat. comm may hold spaces and ')' so it ends at the *last* ')'."""
    open_paren = text.find("(")
    close_paren = text.rfind(")")
    if open_paren < 0 or close_paren < open_paren:
        raise ValueError("no (comm) in stat line")
    rest = text[close_paren + 2 :].split()
    if len(rest) < 20:
        raise ValueError("stat line too short")
    # rest[0] is field 3 (state); field n of proc(5) is rest[n - 3].
    return ProcStat(
        pid=_number(text[:open_paren].strip()),
        comm=text[open_paren + 1 : close_paren],
        flags=_number(rest[6]),
        utime_ticks=_number(rest[11]),
        stime_ticks=_number(rest[12]),
        start_ticks=_number(rest[19]),
    )


def start_and_kthread(text: str) -> tuple[int, bool]:
    """A process's start time (ticks since boot) and whether it is a kernel thread."""
    stat = parse_stat(text)
    return stat.start_ticks, bool(stat.flags & PF_KTHREAD)


def parse_cpu_times(text: str) -> CpuTimes:
    """Parse /proc/stat: busy = user+nice+system+irq+softirq+steal, idle = idle+iowait.

    guest time is already inside user/nice, so it is not added again.
    """
    total: list[int] | None = None
    ncpu = 0
    for line in text.splitlines():
        if line.startswith("cpu "):
            total = [_number(v) for v in line.split()[1:9]]
        elif line.startswith("cpu"):
            ncpu += 1
    if total is None or len(total) < 4:
        raise ValueError("no aggregate cpu line in /proc/stat")
    total += [0] * (8 - len(total))
    user, nice, system, idle, iowait, irq, softirq, steal = total
    busy = user + nice + system + irq + softirq + steal
    return CpuTimes(
        busy_s=busy / CLOCK_TICKS, idle_s=(idle + iowait) / CLOCK_TICKS, ncpu=max(ncpu, 1)
    )


def read_cpu_times(procfs: Path | str) -> CpuTimes:
    """The node's CPU times from <procfs>/stat; a SourceError ("read error") if it cannot."""
    try:
        return parse_cpu_times(read_text_bounded(f"{procfs}/stat", MAX_PROC_STAT_BYTES))
    except (OSError, ValueError) as exc:
        raise SourceError(READ_ERROR, f"{procfs}/stat: {short_error(exc)}") from exc
