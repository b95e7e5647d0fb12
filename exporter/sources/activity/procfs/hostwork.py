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
"""

from __future__ import annotations

from collections.abc import Callable

from exporter.host.procstat import irq_ticks
from exporter.sources.activity.procfs.scan import StatFields


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

    def total_ns(self, cgroup_root: str) -> int:
        """Raises OSError or ValueError when /proc/stat or the root cgroup.procs is unreadable."""
        with open(f"{self._proc}/stat") as f:
            irq = irq_ticks(f.read())
        with open(f"{cgroup_root}/cgroup.procs") as f:
            pids = {int(line) for line in f.read().split()}
        self._userland &= pids
        seen: dict[tuple[int, int], int] = {}
        for pid in pids - self._userland:
            try:
                with open(f"{self._proc}/{pid}/stat") as f:
                    stat = self._parse(f.read())
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
        return (irq + self._kthread_ticks) * self._tick_ns
