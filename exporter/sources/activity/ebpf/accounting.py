"""From raw eBPF map contents to cumulative per-task samples. Pure: no bcc, no files.

The kernel side (bpf/activity.c) keeps, per process (tgid), cumulative on-CPU ns (per-process
mode only) and GPU ioctls in an entry named by (tgid, first_ns). By default only processes that
made a GPU ioctl have one, and their CPU time stays with their cgroup's own total, read
elsewhere (the cgroup tree): the entries here then carry GPU ioctls alone. When the process
exits, its totals are folded into a per-cgroup "exited" total and the entry stays behind as a
tombstone until userspace deletes it.

The monitor takes deltas of cumulative values per TaskKey, so every nanosecond must reach exactly
one key exactly once. This module keeps that promise across the kernel's folds:

- a live entry is credited to the key (tgid, start_ticks) of its process, plus the time its
  threads have been on a CPU since their last switch (in flight), never decreasing;
- the exited total of a cgroup is reported under the key (0, cgroup_id), minus what its folded
  processes had already been credited under their own keys (debit), and plus what reached a
  tombstone after the fold (stragglers);
- an entry whose process cannot be found (it exited before userspace first saw it, its tgid was
  reused) is an orphan: its work goes to its cgroup's exited total;
- per-process mode: a process that has been on a CPU since before the probes loaded and was
  never switched out has no entry: userspace makes one (the kernel then adds the slice to it
  when it ends), so its time in flight is credited too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from exporter.model.readings import TaskKey, TaskSample

NVIDIA = "nvidia"
DRM = "drm"
DRIVERS = (NVIDIA, DRM)  # index order of the ioctl counters in the maps
EXITED_COMM = "[exited]"

TOMBSTONE_GRACE_NS = 1_000_000_000  # late slices of a dead process arrive within this
ORPHAN_QUIET_READS = 2  # an orphan unchanged this long, whose process is gone, is deleted
EXITED_QUIET_READS = 2  # an exited total unchanged this long stops being reported
EXITED_FORGET_READS = 60  # ... and is forgotten this long after, once its cgroup is gone
START_SLACK_NS = 20_000_000  # /proc start times are in clock ticks: allow two of them
# an entry of a process running at the first read is made within this of it (by userspace right
# after it, or by the kernel at the process's next switch)
BASELINE_ENTRY_NS = 10_000_000_000

Counts = tuple[int, int]  # per driver, in DRIVERS order


@dataclass(frozen=True, slots=True)
class KernelTask:
    """One entry of the tasks map."""

    tgid: int
    first_ns: int  # boot clock
    cgroup_id: int
    on_cpu_ns: int
    ioctls: Counts
    dead_ns: int = 0  # boot clock; 0 while alive
    folded_ns: int = 0
    folded_ioctls: Counts = (0, 0)
    execs: int = 0


@dataclass(frozen=True, slots=True)
class KernelExited:
    cgroup_id: int
    on_cpu_ns: int
    ioctls: Counts


@dataclass(frozen=True, slots=True)
class RunningSlice:
    """The slice on one CPU: thread tid has been running since start_ns (its runtime then, or
    the monotonic clock: MapRead.runtimes)."""

    tid: int
    start_ns: int


@dataclass(frozen=True)
class MapRead:
    """One reading of the maps, in the order taken: exited, then tasks, then running."""

    exited: Sequence[KernelExited]
    tasks: Sequence[KernelTask]
    running: Sequence[RunningSlice]  # only slots that read the same twice (per-process mode)
    running_read_ns: int  # monotonic ns taken just before the running slots were read
    boot_ns: int  # boot-clock ns at the read
    seen_at: float  # the cgroup index's clock at the read
    # the kernel charges per-task runtime (LoadInfo.task_runtime): a slot's start_ns is its
    # thread's se.sum_exec_runtime when it was switched in, and this holds each running thread's
    # runtime read after the slots (/proc/<tid>/schedstat); None: slots hold monotonic ns
    runtimes: Mapping[int, int] | None = None


@dataclass(frozen=True, slots=True)
class ProcInfo:
    start_ticks: int
    start_boot_ns: int
    comm: str
    kernel_thread: bool


class ProcessTable(Protocol):
    def info(self, tgid: int) -> ProcInfo | None: ...

    def comm(self, tgid: int) -> str | None: ...

    def tgid_of(self, tid: int) -> int | None: ...

    def cgroup_id(self, tgid: int) -> int | None: ...


class CgroupPaths(Protocol):
    def path(self, cgroup_id: int, seen_at: float) -> str | None: ...

    def gone(self, cgroup_id: int) -> bool: ...


@dataclass(frozen=True)
class MapChanges:
    """What userspace writes back: entries it is done with, and entries to make."""

    delete_tasks: tuple[tuple[int, int], ...] = ()  # (tgid, first_ns)
    delete_exited: tuple[int, ...] = ()  # cgroup ids
    create_tasks: tuple[tuple[int, int], ...] = ()  # (tgid, cgroup id): only if absent


@dataclass
class _Identity:
    """What userspace knows of one tasks-map entry."""

    tgid: int
    key: TaskKey | None  # None: orphan, its work goes to its cgroup's exited total
    comm: str = ""
    kernel_thread: bool = False
    execs: int = 0
    cgroup_id: int = 0
    kernel_ns: int = 0  # on_cpu_ns at the last read
    credited_ns: int = 0  # credited so far (kernel_ns + in flight), never decreasing
    ioctls: list[int] = field(default_factory=lambda: [0, 0])  # as read = as credited
    dead: bool = False
    quiet_reads: int = 0


@dataclass
class _Output:
    """Cumulative totals of one live TaskKey, over all the entries that mapped to it."""

    pid: int
    comm: str
    cgroup_id: int
    kernel_thread: bool
    ns: int = 0
    ioctls: list[int] = field(default_factory=lambda: [0, 0])


@dataclass
class _ExitedLedger:
    """One cgroup's exited total: what the kernel folded (credit) less what was already
    credited elsewhere (debit). level only rises; it is reported relative to base."""

    credit_ns: int = 0
    debit_ns: int = 0
    level_ns: int = 0
    credit_ioctls: list[int] = field(default_factory=lambda: [0, 0])
    debit_ioctls: list[int] = field(default_factory=lambda: [0, 0])
    level_ioctls: list[int] = field(default_factory=lambda: [0, 0])
    kernel: tuple[int, Counts] | None = None  # the map's value at the last read
    active: bool = False  # reported under (0, cgroup_id) this read
    base_ns: int = 0
    base_ioctls: list[int] = field(default_factory=lambda: [0, 0])
    quiet_reads: int = 0
    dirty: bool = True  # credit or debit changed since the level was last worked out


class Accounting:
    """Keeps the per-entry, per-key and per-cgroup state across reads."""

    def __init__(
        self,
        procs: ProcessTable,
        cgroups: CgroupPaths,
        *,
        per_process: bool = True,
        first_read_is_baseline: bool = True,
    ) -> None:
        """per_process: the kernel keeps an entry per process with its on-CPU time (False: only
        processes that made a GPU ioctl have one, without CPU time, and nothing runs in flight:
        no slices are read). first_read_is_baseline: the consumer takes the first read as its
        baseline, as the monitor does (accounting/activity.py), so time that ran before it
        never reaches a key that first appears later (False: counted from the load)."""
        self._procs = procs
        self._cgroups = cgroups
        self._per_process = per_process
        self._identities: dict[tuple[int, int], _Identity] = {}
        self._outputs: dict[TaskKey, _Output] = {}
        self._ledgers: dict[int, _ExitedLedger] = {}
        self._slice_tgids: dict[tuple[int, int], int] = {}
        self._first_read = first_read_is_baseline
        # tgid -> (ns it had run in slices still going at the first read, boot ns of that read):
        # time before the first read, which the monitor takes as its baseline, so never counted
        self._before_baseline: dict[int, tuple[int, int]] = {}

    def update(self, read: MapRead) -> tuple[list[TaskSample], MapChanges]:
        self._credit_kernel_exited(read.exited)
        delete_tasks: list[tuple[int, int]] = []
        live: dict[int, _Identity] = {}  # tgid -> its live entry (one per tgid in the map)
        ioctl_deltas: dict[int, list[int]] = {}
        present: set[tuple[int, int]] = set()
        for t in read.tasks:
            name = (t.tgid, t.first_ns)
            present.add(name)
            if t.dead_ns:
                self._tombstone(t)
                if read.boot_ns - t.dead_ns >= TOMBSTONE_GRACE_NS:
                    delete_tasks.append(name)
                continue
            ident = self._identities.get(name)
            if ident is None:
                ident = self._resolve(t)
                self._identities[name] = ident
            delta_ns = max(0, t.on_cpu_ns - ident.kernel_ns)
            delta_io = [max(0, n - old) for n, old in zip(t.ioctls, ident.ioctls, strict=True)]
            ident.kernel_ns = t.on_cpu_ns
            ident.ioctls = list(t.ioctls)
            ident.cgroup_id = t.cgroup_id
            ident.quiet_reads = 0 if delta_ns or any(delta_io) else ident.quiet_reads + 1
            if ident.key is None:
                ident.credited_ns += delta_ns
                self._credit(t.cgroup_id, delta_ns, delta_io)
                if ident.quiet_reads >= ORPHAN_QUIET_READS and self._process_gone(t):
                    delete_tasks.append(name)
                continue
            if t.execs != ident.execs:
                ident.execs = t.execs
                ident.comm = self._procs.comm(t.tgid) or ident.comm
            live[t.tgid] = ident
            ioctl_deltas[t.tgid] = delta_io
        for name in [n for n in self._identities if n not in present]:
            del self._identities[name]  # evicted or deleted; what it was credited stays credited

        in_flight, unknown = self._in_flight(read, live)
        if self._first_read:
            # a process running since before the load has no entry yet: its key first appears
            # at a later read, where the monitor counts a new key whole, so what its slices had
            # run by now is set aside (live entries have it in their baseline already)
            self._first_read = False
            self._before_baseline = {
                tgid: (ns, read.boot_ns) for tgid, ns in unknown.items() if ns > 0
            }
        samples = self._live_samples(read, live, ioctl_deltas, in_flight)
        samples += self._exited_samples(read)
        create = (
            self._entries_to_make(set(unknown) - {name[0] for name in present})
            if self._per_process
            else ()
        )
        delete_exited = self._forget_exited()
        return samples, MapChanges(tuple(delete_tasks), tuple(delete_exited), create)

    # -- entries ------------------------------------------------------------------------------

    def _resolve(self, t: KernelTask) -> _Identity:
        """A new live entry: find its process, or call it an orphan."""
        info = self._procs.info(t.tgid)
        if info is None or info.start_boot_ns > t.first_ns + START_SLACK_NS:
            # gone already, or the tgid now belongs to a process younger than the entry
            return _Identity(t.tgid, None, execs=t.execs, cgroup_id=t.cgroup_id)
        before, at = self._before_baseline.pop(t.tgid, (0, 0))
        return _Identity(
            t.tgid,
            (t.tgid, info.start_ticks),
            comm=info.comm,
            kernel_thread=info.kernel_thread,
            execs=t.execs,
            cgroup_id=t.cgroup_id,
            # set aside at the first read for this process (not a later one with its tgid)
            credited_ns=before if info.start_boot_ns <= at + START_SLACK_NS else 0,
        )

    def _tombstone(self, t: KernelTask) -> None:
        name = (t.tgid, t.first_ns)
        ident = self._identities.get(name)
        if ident is not None and ident.dead:
            return  # settled at an earlier read
        # the fold moved folded_ns into exited; work that reached the entry after it is added
        # here, and what the entry had already been credited is taken back
        stragglers = [n - f for n, f in zip(t.ioctls, t.folded_ioctls, strict=True)]
        self._credit(t.cgroup_id, max(0, t.on_cpu_ns - t.folded_ns), stragglers)
        if ident is None:
            ident = _Identity(t.tgid, None, cgroup_id=t.cgroup_id)
            self._identities[name] = ident
            before, at = self._before_baseline.pop(t.tgid, (0, 0))
            if t.first_ns <= at + BASELINE_ENTRY_NS:
                # ended before a read saw its entry: what ran before the baseline is not counted
                self._debit(t.cgroup_id, before, (0, 0))
        else:
            self._debit(t.cgroup_id, ident.credited_ns, ident.ioctls)
        ident.dead = True

    def _process_gone(self, t: KernelTask) -> bool:
        info = self._procs.info(t.tgid)
        return info is None or info.start_boot_ns > t.first_ns + START_SLACK_NS

    # -- live keys ----------------------------------------------------------------------------

    def _in_flight(
        self, read: MapRead, live: dict[int, _Identity]
    ) -> tuple[dict[int, int], dict[int, int]]:
        """ns each live process has been on a CPU since its threads' last switch, and the same
        for the tgids running without an entry.

        The kernel adds a slice to the entry only when it ends, and the slots are read after the
        entries, so a slice still running then is in none of the values read; the clock is taken
        before the slots, so what is credited is at most what the kernel adds when it ends.
        """
        out: dict[int, int] = {}
        unknown: dict[int, int] = {}
        tgids: dict[tuple[int, int], int] = {}
        for s in read.running:
            if s.tid == 0 or (read.runtimes is None and s.start_ns == 0):
                continue
            slot = (s.tid, s.start_ns)
            tgid = self._slice_tgids.get(slot)
            if tgid is None:
                tgid = self._procs.tgid_of(s.tid)
            if tgid is None:
                continue
            tgids[slot] = tgid
            if tgid in live:
                out[tgid] = out.get(tgid, 0) + _flight_ns(read, s)
            else:
                unknown[tgid] = unknown.get(tgid, 0) + _flight_ns(read, s)
        self._slice_tgids = tgids  # a slice still running at the next read keeps its thread
        return out, unknown

    def _entries_to_make(self, tgids: set[int]) -> tuple[tuple[int, int], ...]:
        """Entries for processes on a CPU since before the probes loaded: without a switch the
        kernel never makes one. The next read credits their time in flight."""
        made = []
        for tgid in sorted(tgids):
            cgroup_id = self._procs.cgroup_id(tgid)
            if cgroup_id is not None:
                made.append((tgid, cgroup_id))
        return tuple(made)

    def _live_samples(
        self,
        read: MapRead,
        live: dict[int, _Identity],
        ioctl_deltas: dict[int, list[int]],
        in_flight: dict[int, int],
    ) -> list[TaskSample]:
        outputs: dict[TaskKey, _Output] = {}
        for tgid, ident in live.items():
            assert ident.key is not None
            out = outputs.get(ident.key) or self._outputs.get(ident.key)
            if out is None:
                out = _Output(ident.tgid, ident.comm, ident.cgroup_id, ident.kernel_thread)
            target = ident.kernel_ns + in_flight.get(tgid, 0)
            if target > ident.credited_ns:
                out.ns += target - ident.credited_ns
                ident.credited_ns = target
            for i, d in enumerate(ioctl_deltas[tgid]):
                out.ioctls[i] += d
            out.comm, out.cgroup_id = ident.comm, ident.cgroup_id
            outputs[ident.key] = out
        self._outputs = outputs  # a key without entries this read is dropped
        return [
            TaskSample(
                key=key,
                pid=out.pid,
                comm=out.comm,
                cgroup=self._cgroups.path(out.cgroup_id, read.seen_at) or "",
                kernel_thread=out.kernel_thread,
                cpu_seconds=out.ns / 1e9,
                gpu_ioctls=_driver_counts(out.ioctls),
            )
            for key, out in outputs.items()
        ]

    # -- exited totals ------------------------------------------------------------------------

    def _credit_kernel_exited(self, exited: Sequence[KernelExited]) -> None:
        seen: set[int] = set()
        for e in exited:
            seen.add(e.cgroup_id)
            ledger = self._ledgers.setdefault(e.cgroup_id, _ExitedLedger())
            prev = ledger.kernel
            if prev is not None and prev[0] == e.on_cpu_ns and prev[1] == e.ioctls:
                continue  # unchanged since the last read: most cgroups, most of the time
            if prev is None or e.on_cpu_ns < prev[0]:  # new, or evicted and made again: a reset
                delta_ns, delta_io = e.on_cpu_ns, list(e.ioctls)
            else:
                delta_ns = e.on_cpu_ns - prev[0]
                delta_io = [max(0, n - o) for n, o in zip(e.ioctls, prev[1], strict=True)]
            ledger.kernel = (e.on_cpu_ns, e.ioctls)
            self._credit(e.cgroup_id, delta_ns, delta_io)
        for cgroup_id, ledger in self._ledgers.items():
            if cgroup_id not in seen:
                ledger.kernel = None

    def _credit(self, cgroup_id: int, ns: int, ioctls: Sequence[int]) -> None:
        if not ns and not any(ioctls):
            return
        ledger = self._ledgers.setdefault(cgroup_id, _ExitedLedger())
        ledger.dirty = True
        ledger.credit_ns += ns
        for i, n in enumerate(ioctls):
            ledger.credit_ioctls[i] += max(0, n)

    def _debit(self, cgroup_id: int, ns: int, ioctls: Sequence[int]) -> None:
        if not ns and not any(ioctls):
            return
        ledger = self._ledgers.setdefault(cgroup_id, _ExitedLedger())
        ledger.dirty = True
        ledger.debit_ns += ns
        for i, n in enumerate(ioctls):
            ledger.debit_ioctls[i] += n

    def _exited_samples(self, read: MapRead) -> list[TaskSample]:
        samples = []
        for cgroup_id, ledger in self._ledgers.items():
            if not (ledger.dirty or ledger.active):
                ledger.quiet_reads += 1  # nothing moved: the level is what it was
                continue
            ledger.dirty = False
            target = ledger.credit_ns - ledger.debit_ns
            level_ns = max(ledger.level_ns, target)
            level_io = [
                max(old, c - d)
                for old, c, d in zip(
                    ledger.level_ioctls, ledger.credit_ioctls, ledger.debit_ioctls, strict=True
                )
            ]
            changed = level_ns != ledger.level_ns or level_io != ledger.level_ioctls
            if changed and not ledger.active:
                # (re)appearing key: it starts from the level before this change, so the
                # monitor, which has no previous value for it, counts only the change
                ledger.active = True
                ledger.base_ns, ledger.base_ioctls = ledger.level_ns, list(ledger.level_ioctls)
            ledger.level_ns, ledger.level_ioctls = level_ns, level_io
            ledger.quiet_reads = 0 if changed else ledger.quiet_reads + 1
            if ledger.active and ledger.quiet_reads >= EXITED_QUIET_READS:
                ledger.active = False
            if not ledger.active:
                continue
            samples.append(
                TaskSample(
                    key=(0, cgroup_id),
                    pid=0,
                    comm=EXITED_COMM,
                    cgroup=self._cgroups.path(cgroup_id, read.seen_at) or "",
                    kernel_thread=False,
                    cpu_seconds=(level_ns - ledger.base_ns) / 1e9,
                    gpu_ioctls=_driver_counts(
                        [n - b for n, b in zip(level_io, ledger.base_ioctls, strict=True)]
                    ),
                )
            )
        return samples

    def _forget_exited(self) -> list[int]:
        """Ledgers of removed cgroups, long quiet: drop them and their kernel entries."""
        forget = [
            cgroup_id
            for cgroup_id, ledger in self._ledgers.items()
            if not ledger.active
            and ledger.quiet_reads >= EXITED_FORGET_READS
            and (ledger.kernel is None or self._cgroups.gone(cgroup_id))
        ]
        delete = [c for c in forget if self._ledgers[c].kernel is not None]
        for cgroup_id in forget:
            del self._ledgers[cgroup_id]
        return delete


def _driver_counts(counts: Sequence[int]) -> tuple[tuple[str, int], ...]:
    return tuple((d, n) for d, n in zip(DRIVERS, counts, strict=True) if n > 0)


def _flight_ns(read: MapRead, s: RunningSlice) -> int:
    """ns the slice in s has run so far: never more than the kernel adds when it ends (the
    clock is taken before the slots; a thread's runtime only grows)."""
    if read.runtimes is None:
        return max(0, read.running_read_ns - s.start_ns)
    now = read.runtimes.get(s.tid)
    return 0 if now is None else max(0, now - s.start_ns)
