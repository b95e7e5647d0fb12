"""Plain typed readings that sources return. Nothing here knows about Prometheus."""

from __future__ import annotations

from dataclasses import dataclass

# A task's identity: (pid, start time in clock ticks since boot) for a live process, so a reused
# PID is a new task; (0, cgroup id) for the eBPF "exited tasks" accumulator of one cgroup;
# (-1, n) for the /proc source's "exited tasks" of one container
# (exporter/sources/activity/procfs/exited.py); (-2, n) for the /proc source's per-cgroup CPU time
# of one
# container bucket, and (-3, 0) for the node's busy time outside every cgroup below the root
# (the kernel_processes rest), both when it reads the cgroup tree rather than every process
# (exporter/sources/activity/procfs/cgrouptree.py). n is never reused while the source runs. Every
# non-process key has pid 0 in its TaskSample, so no GPU PID maps to it.
TaskKey = tuple[int, int]


@dataclass(frozen=True, slots=True)
class EnergyReading:
    """One power domain as a source saw it at one instant.

    Either a cumulative counter (energy_uj, wrapping after max_energy_uj) or an instantaneous
    power that the monitor integrates over the interval.
    """

    zone: str  # what the energy covers: package, dram, core, uncore, psys, a hwmon sensor kind
    device: str  # which instance: intel-rapl:0, a hwmon device, ...
    source: str  # rapl, hwmon, estimated
    energy_uj: int | None = None
    max_energy_uj: int | None = None
    power_w: float | None = None
    max_power_w: float | None = None  # what the domain can plausibly draw; None: the generic bound
    # Why this domain gave no usable value this interval ("" when it did): a source reports a
    # domain it knows but could not read, so the fault is visible per device, not just logged.
    fault: str = ""
    # A model's own idle power (the estimate): its zone's idle baseline, over --power.idle.
    # None for measured zones, whose baseline is configured or learned.
    idle_w: float | None = None


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Aggregate CPU time from /proc/stat, in seconds since boot."""

    busy_s: float
    idle_s: float
    ncpu: int

    def busy_fraction_since(self, earlier: CpuTimes) -> float | None:
        """The fraction of CPU time that was busy since an earlier reading; None when no time
        passed or the counters went back."""
        busy = self.busy_s - earlier.busy_s
        total = busy + (self.idle_s - earlier.idle_s)
        if total <= 0 or busy < 0:
            return None
        return min(busy / total, 1.0)


@dataclass(frozen=True, slots=True)
class TaskSample:
    """Cumulative activity of one task (a process, or a cgroup's exited tasks)."""

    key: TaskKey
    pid: int
    comm: str
    cgroup: str  # /proc/<pid>/cgroup content, or a bare cgroup v2 path
    kernel_thread: bool
    cpu_seconds: float
    gpu_ioctls: tuple[tuple[str, int], ...] = ()  # (driver, count), cumulative


@dataclass(frozen=True, slots=True)
class SourceStatus:
    """Whether a source worked in the last interval, and why not.

    reason is a short, low-cardinality phrase for the source_up label ("absent" when the node
    simply has no such hardware); detail is the full explanation for logs and `wattprobe check`.
    """

    source: str
    up: bool
    reason: str = ""
    detail: str = ""
    duration_s: float = 0.0


ABSENT = "absent"


@dataclass(frozen=True, slots=True)
class MapStats:
    """Fill level and losses of one bounded eBPF map (cumulative counts since load)."""

    map: str
    entries: int
    max_entries: int
    evictions: int  # entries the kernel's LRU dropped to make room
    insert_failures: int  # events that found no room in this map


class SourceError(Exception):
    """A source could not produce a reading.

    readings: what it knows of each device when every one failed (each with its fault), so the
    monitor can show the fault per device and not only on the source.
    """

    def __init__(
        self, reason: str, detail: str = "", readings: tuple[EnergyReading, ...] = ()
    ) -> None:
        super().__init__(detail or reason)
        self.reason = reason
        self.detail = detail or reason
        self.readings = readings


class SourceAbsent(SourceError):
    """The node has no such hardware or interface: not a fault, but nothing to read."""

    def __init__(self, detail: str) -> None:
        super().__init__(ABSENT, detail)
