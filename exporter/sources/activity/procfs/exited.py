"""The CPU time /proc cannot show, per container, from the kernel's cgroup totals.

The /proc source reports each live process's CPU time under its own TaskKey, and the monitor
credits each key's increase to the key's container. A process that exits takes the time it ran
since the last read with it, and one that starts and exits between two reads is never seen: a
container whose work is short-lived processes (a shell loop) lost 96 % of its CPU time.

The kernel charges every process's run time to its cgroup
(exporter/sources/activity/procfs/cgroupcpu.py) and
keeps it after the process exits. For every cgroup that holds a live process (and for a few
intervals after its last one) this module reads that total once per interval and keeps

    raw   += growth of the cgroup's total (less that of the tracked cgroups below it)
             - what the monitor credits the cgroup's live processes this interval
    level  = max(level, raw)

so level is the time the kernel counted and no live process was credited with. What a live
process was over-credited (a process moved in with time it ran elsewhere, tick rounding) is a
debt paid before anything more is reported; level never goes back. Per container bucket (all
cgroups that classify alike, so host services share one) the growth of the levels is reported
as one pseudo task, comm "[exited]", pid 0 and key (EXITED_PID, n): -1 is no process's pid and
not the eBPF source's (0, cgroup id), so keys never collide.

A process moved to another cgroup without exec'ing keeps its cached cgroup in the scanner until
a recheck (scan.py), so its old cgroup is credited time the kernel charged to the new one (and
the new one's total shows the same time again: counted twice, per container +70-100 % in
tests/support/groundtruth.py's mover). The totals tell: a cgroup whose live processes were
credited more than its total grew by (beyond tick rounding) lost a process. update() then has
the caller re-read those processes' cgroups (recheck) and credits this interval by the corrected
cgroups, so a move costs at most the part of one interval it ran before moving.

A cgroup first seen after the first interval is new (it got its first process since the last
read), so its whole total counts, unless that is more than the node's CPUs could have run since
the last read (then it had a history: it is a baseline, like every cgroup at the first read).
Work between a cgroup's last read and its removal is lost (at most one interval; the eBPF source
keeps it). The root cgroup is never read: its total is the machine's, interrupts included, so
host processes left in the root (rare under systemd) keep today's /proc-only accounting.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Protocol

from exporter.host.cgroupfs.classify import classify_cgroup
from exporter.host.files import short_error
from exporter.host.hostile import HostileEpisodes, is_hostile
from exporter.model.identity import ContainerRef
from exporter.model.readings import TaskKey, TaskSample
from exporter.sources.activity.procfs.cgroupcpu import Location

log = logging.getLogger(__name__)

EXITED_PID = -1  # key (EXITED_PID, n): no process has pid -1
# credited beyond a cgroup's growth by more than this: one of its processes left (rounding to
# clock ticks gives each live process up to one tick, 10 ms at 100 Hz, either way)
MOVED_SLACK_S = 0.02
EXITED_COMM = "[exited]"  # as the eBPF source names its per-cgroup exited totals
LINGER_SCANS = 12  # a cgroup without live processes is read this many more intervals
QUIET_SCANS = 2  # a bucket's pseudo task unchanged this long stops being reported
MAX_BUCKETS = 4096  # buckets remembered (their keys stay stable while remembered)
MAX_TEXTS = 8192  # cgroup texts whose location is cached
_UNSET = ("", "")


class UsageFiles(Protocol):
    """exporter.sources.activity.procfs.cgroupcpu.CgroupCpuFiles."""

    def locate(self, cgroup_text: str) -> Location | None: ...

    def reader(self, where: Location) -> Callable[[], int]: ...


def settle(raw: float, level: float, kernel_s: float, credited_s: float) -> tuple[float, float]:
    """One cgroup's unreported time after one more interval: raw carries debts, level only
    rises. The kernel counted kernel_s, the live processes were credited credited_s.

    Returns (raw, level); level minus the old level is what to report more.
    """
    raw += kernel_s - credited_s
    return raw, raw if raw > level else level


class _Cgroup:
    __slots__ = (
        "bucket",
        "counts",
        "delta_ns",
        "last_live",
        "level",
        "new",
        "own_ns",
        "raw",
        "read",
        "usage_ns",
    )

    def __init__(self, bucket: ContainerRef, read: Callable[[], int], new: bool, scan: int) -> None:
        self.bucket = bucket
        self.read = read  # its total, in ns
        self.new = new  # first seen at this scan, after the first: its whole total may count
        self.last_live = scan
        self.usage_ns: int | None = None  # at the last read that worked
        self.raw = self.level = 0.0  # seconds (settle)
        self.counts = False  # this scan's read worked and is not a baseline
        self.delta_ns = 0  # growth of the total this scan
        self.own_ns = 0  # ... less that of the tracked cgroups below it


class _Bucket:
    __slots__ = ("active", "base", "cgroup", "key", "quiet", "reported", "sample", "total")

    def __init__(self, key: TaskKey, cgroup: str) -> None:
        self.key = key
        self.cgroup = cgroup  # a path that classifies as the bucket, for the monitor
        self.total = 0.0  # seconds, only rises
        self.reported = 0.0  # total at the last scan
        self.base = 0.0  # reported relative to this (see update)
        self.active = False
        self.quiet = 0
        self.sample: TaskSample | None = None  # the last one reported, reused while unchanged


class ExitedCpu:
    """Per scan of /proc: the pseudo tasks that complete each container's CPU time."""

    def __init__(
        self,
        files: UsageFiles,
        *,
        clock: Callable[[], float] = time.monotonic,
        ncpu: int | None = None,
    ) -> None:
        self._files = files
        self._clock = clock
        self._ncpu = ncpu or os.cpu_count() or 1
        self._where: dict[str, Location | None] = {}
        self._prev_cpu: dict[TaskKey, float] = {}
        self._cgroups: dict[Location, _Cgroup] = {}
        self._parents: dict[Location, Location] = {}
        self._parents_stale = True
        self._buckets: OrderedDict[ContainerRef, _Bucket] = OrderedDict()
        self._active: set[ContainerRef] = set()
        self._next_seq = 1
        self._scans = 0
        self._last_time: float | None = None
        self.reads = 0  # for benchmarks and tests: cgroup files read
        self._hostile = HostileEpisodes("cgroup CPU time", log)

    def update(self, samples: Sequence[TaskSample]) -> list[TaskSample]:
        return self.update_checked(samples)[1]

    def update_checked(
        self,
        samples: Sequence[TaskSample],
        recheck: Callable[[set[str]], Sequence[TaskSample]] | None = None,
    ) -> tuple[Sequence[TaskSample], list[TaskSample]]:
        """(the live samples, corrected where a process moved; the pseudo tasks).

        recheck(cgroup texts) re-reads the cgroup of every process cached in one of them and
        returns the scan's samples again; it is called when a cgroup lost a process."""
        now = self._clock()
        self._scans += 1
        elapsed = None if self._last_time is None else now - self._last_time
        self._last_time = now
        prev_cpu = self._prev_cpu
        credited = self._credited(samples)
        self._read_totals(elapsed)
        self._subtract_nested()
        if recheck is not None:
            left = self._left(samples, credited)
            if left:
                samples = recheck(left)
                self._prev_cpu = prev_cpu
                new = self._credited(samples)
                for where in new.keys() - credited.keys():  # a cgroup first live now: read it
                    self._read_one(where, elapsed)
                credited = new
        self._hostile.end_round()
        for where, cg in self._cgroups.items():
            if not cg.counts:
                continue
            own_s, credited_s = cg.own_ns / 1e9, credited.get(where, 0.0)
            if not own_s and not credited_s:
                continue
            level = cg.level
            cg.raw, cg.level = settle(cg.raw, level, own_s, credited_s)
            if cg.level > level:
                self._bucket(cg.bucket, where[1]).total += cg.level - level
        return samples, self._report()

    def _left(self, samples: Sequence[TaskSample], credited: dict[Location, float]) -> set[str]:
        """The cgroup texts of the cgroups whose live processes were credited more than the
        cgroup's own total grew by: one of their processes is elsewhere now."""
        over = {
            where
            for where, cg in self._cgroups.items()
            if cg.counts and credited.get(where, 0.0) - cg.own_ns / 1e9 > MOVED_SLACK_S
        }
        if not over:
            return set()
        return {t.cgroup for t in samples if self._where.get(t.cgroup) in over}

    # -- what the live processes were credited --------------------------------------------------

    def _credited(self, samples: Sequence[TaskSample]) -> dict[Location, float]:
        """Per cgroup, the CPU seconds the monitor credits its live processes this interval:
        the increase of each key's value, all of a key seen for the first time (as
        exporter.accounting.monitor takes deltas). Also marks the cgroups that hold a live
        process."""
        where = self._where
        if len(where) > MAX_TEXTS:
            where.clear()
        locate = self._files.locate
        prev = self._prev_cpu
        cur: dict[TaskKey, float] = {}
        credited: dict[Location, float] = {}
        for t in samples:
            if t.kernel_thread:
                continue
            cpu = t.cpu_seconds
            cur[t.key] = cpu
            loc = where.get(t.cgroup, _UNSET)
            if loc is _UNSET:
                loc = where[t.cgroup] = locate(t.cgroup)
            if loc is None:
                continue
            d = cpu - prev.get(t.key, 0.0)
            credited[loc] = credited.get(loc, 0.0) + (d if d > 0 else 0.0)
        self._prev_cpu = cur
        scan = self._scans
        cgroups = self._cgroups
        for loc in credited:
            cg = cgroups.get(loc)
            if cg is None:
                read = self._files.reader(loc)
                cgroups[loc] = _Cgroup(classify_cgroup(loc[1]), read, self._scans > 1, scan)
                self._parents_stale = True
            else:
                cg.last_live = scan
        return credited

    # -- the kernel's totals ---------------------------------------------------------------------

    def _read_totals(self, elapsed: float | None) -> None:
        scan = self._scans
        for where in list(self._cgroups):
            cg = self._cgroups[where]
            if cg.last_live != scan and scan - cg.last_live > LINGER_SCANS:
                cg.counts = False
                self._drop(where)
                continue
            self._read_one(where, elapsed)

    def _read_one(self, where: Location, elapsed: float | None) -> None:
        """This scan's growth of one cgroup's total (cg.counts: whether it counts)."""
        cg = self._cgroups[where]
        live = cg.last_live == self._scans
        limit_ns = None if elapsed is None else (max(elapsed, 0.0) * self._ncpu + 1.0) * 1e9
        cg.counts = False
        cg.delta_ns = cg.own_ns = 0
        new, cg.new = cg.new, False
        try:
            ns = cg.read()
            self.reads += 1
        except (OSError, ValueError) as exc:
            if isinstance(exc, OSError) and is_hostile(exc):
                self._hostile.saw(exc)  # a FIFO, device or huge file as cpu.stat: said once
            log.debug("cgroup CPU time of %s %s: %s", where[0], where[1], short_error(exc))
            if not live:
                self._drop(where)  # removed with (or after) its last process
            # what its live processes were credited is a debt that the next read's
            # growth covers
            cg.counts = cg.usage_ns is not None
            return
        before = cg.usage_ns
        cg.usage_ns = ns
        if before is not None and ns >= before:
            delta: int | None = ns - before
        elif (new or before is not None) and limit_ns is not None and ns <= limit_ns:
            delta = ns  # new since the last read, or made again under the same path
        else:
            delta = None  # a history from before it was tracked: a baseline
        if delta is not None:
            cg.counts = True
            cg.delta_ns = cg.own_ns = delta

    def _drop(self, where: Location) -> None:
        del self._cgroups[where]
        self._parents_stale = True

    def _subtract_nested(self) -> None:
        """A cgroup's total holds its descendants': what a tracked descendant reports is taken
        out of its nearest tracked ancestor's (containers are leaves: this is rare)."""
        if self._parents_stale:
            self._parents = _nearest_ancestors(self._cgroups)
            self._parents_stale = False
        for child, parent in self._parents.items():
            c = self._cgroups[child]
            if c.counts:
                self._cgroups[parent].own_ns -= c.delta_ns

    # -- pseudo tasks ----------------------------------------------------------------------------

    def _bucket(self, ref: ContainerRef, cgroup: str) -> _Bucket:
        b = self._buckets.get(ref)
        if b is None:
            b = self._buckets[ref] = _Bucket((EXITED_PID, self._next_seq), cgroup)
            self._next_seq += 1
            if len(self._buckets) > MAX_BUCKETS:
                self._evict()
        self._buckets.move_to_end(ref)
        self._active.add(ref)
        return b

    def _evict(self) -> None:
        for ref in list(self._buckets)[: len(self._buckets) - MAX_BUCKETS]:
            if ref not in self._active:
                del self._buckets[ref]

    def _report(self) -> list[TaskSample]:
        """A bucket is reported while its total changes and QUIET_SCANS after. When it
        reappears it starts from the total before the change, so the monitor, which has no
        previous value for the key then, counts only the change."""
        out: list[TaskSample] = []
        for ref in list(self._active):
            b = self._buckets[ref]
            changed = b.total != b.reported
            if changed and not b.active:
                b.active = True
                b.base = b.reported
            b.reported = b.total
            b.quiet = 0 if changed else b.quiet + 1
            if b.quiet >= QUIET_SCANS:
                b.active = False
                self._active.discard(ref)
                continue
            if changed or b.sample is None:
                b.sample = TaskSample(
                    key=b.key,
                    pid=0,
                    comm=EXITED_COMM,
                    cgroup=b.cgroup,
                    kernel_thread=False,
                    cpu_seconds=b.total - b.base,
                )
            out.append(b.sample)
        return out


def _nearest_ancestors(cgroups: dict[Location, _Cgroup]) -> dict[Location, Location]:
    """For each tracked cgroup, its nearest tracked ancestor in the same hierarchy, if any."""
    out: dict[Location, Location] = {}
    for kind, path in cgroups:
        parent = path
        while (cut := parent.rfind("/")) > 0:
            parent = parent[:cut]
            if (kind, parent) in cgroups:
                out[(kind, path)] = (kind, parent)
                break
    return out
