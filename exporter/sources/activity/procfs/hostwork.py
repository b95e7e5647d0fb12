"""The kernel's own CPU time, to tell it apart from host userland in the per-cgroup /proc mode.

Per cgroup, what runs outside every cgroup below the root is one number: the node's busy time
less the cgroups' growth. It holds kernel threads, interrupts, and processes left in the root
cgroup, which on a host without systemd slices is all of its userland. Kernel work belongs to
kernel_processes and host userland to system_processes (as in eBPF mode and per process), so
this reads the kernel's part:
- irq and softirq from /proc/stat (the node's time in interrupt context);
- kernel threads' utime+stime from /proc/<pid>/stat, for the PF_KTHREAD tasks among the root
  cgroup's processes (kernel threads always sit in the root cgroup).
A pid found to be userland is not read again while it stays in the root cgroup (a host of
thousands of root processes costs one listing, not thousands of reads); kernel threads are few
(tens per CPU) and read every interval.

The total only rises: a kernel thread's positive growth is added, one that is gone adds nothing.

Every file goes through the bounded reader (exporter/host/hostfile.py): a FIFO, a device or a
huge file where /proc/stat, cgroup.procs or a /proc/<pid>/stat should be is refused at once and
costs at most its bound, never a read that waits for a writer or fills memory. A refused
/proc/<pid>/stat is that process skipped (as one that exited); a refused /proc/stat or
cgroup.procs fails the read, so the caller leaves the kernel's part out for that interval.
One warning per episode names such files (a hostile or broken node), not one per interval.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from exporter.host.hostfile import FileTooLarge, NotRegularFile, read_whole
from exporter.host.hostile import HostileEpisodes
from exporter.host.procstat import MAX_PROC_STAT_BYTES, irq_ticks
from exporter.sources.activity.procfs.scan import StatFields

log = logging.getLogger(__name__)

# /proc/<pid>/stat is one line of about 300 bytes (comm is at most 64, each of 52 fields at most
# 20 digits): 4 KiB is more than the kernel writes
MAX_PID_STAT_BYTES = 4096
# cgroup.procs: one PID (at most 7 digits, pid_max is 2^22) and a newline per process; 8 MiB is a
# million processes in the root cgroup alone
MAX_CGROUP_PROCS_BYTES = 8 << 20


class KernelWork:
    """Cumulative ns of interrupts and kernel threads (see module)."""

    def __init__(
        self,
        proc_root: str,
        parse_stat: Callable[[str], StatFields],
        kthread_flag: int,
        ticks_per_second: int,
    ) -> None:
        self._proc = proc_root
        self._parse = parse_stat
        self._flag = kthread_flag
        self._tick_ns = 1_000_000_000 // ticks_per_second
        self._kthreads: dict[tuple[int, int], int] = {}  # (pid, start) -> last utime+stime
        self._userland: set[int] = set()
        self._kthread_ticks = 0
        self._first = True
        self._hostile = HostileEpisodes("kernel CPU time", log)

    def total_ns(self, cgroup_root: str) -> int:
        """Raises OSError or ValueError when /proc/stat or the root cgroup.procs is unreadable
        (NotRegularFile or FileTooLarge when it is not a file the kernel wrote)."""
        try:
            irq = irq_ticks(_text(f"{self._proc}/stat", MAX_PROC_STAT_BYTES))
            pids = {
                int(line)
                for line in _text(f"{cgroup_root}/cgroup.procs", MAX_CGROUP_PROCS_BYTES).split()
            }
        except (NotRegularFile, FileTooLarge) as exc:
            self._hostile.saw(exc)
            self._hostile.end_round()
            raise
        self._userland &= pids
        seen: dict[tuple[int, int], int] = {}
        for pid in pids - self._userland:
            try:
                stat = self._parse(_text(f"{self._proc}/{pid}/stat", MAX_PID_STAT_BYTES))
            except (NotRegularFile, FileTooLarge) as exc:
                self._hostile.saw(exc)
                continue
            except (OSError, ValueError):
                continue  # exited while listed
            if not stat.flags & self._flag:
                self._userland.add(pid)
                continue
            ticks = stat.utime_ticks + stat.stime_ticks
            key = (pid, stat.start_ticks)
            before = self._kthreads.get(key, None if self._first else 0)
            if before is not None and ticks > before:
                self._kthread_ticks += ticks - before
            seen[key] = max(ticks, before or 0)
        self._kthreads = seen
        self._first = False
        self._hostile.end_round()
        return (irq + self._kthread_ticks) * self._tick_ns


def _text(path: str, limit: int) -> str:
    return read_whole(path, limit).decode("utf-8", "replace")
