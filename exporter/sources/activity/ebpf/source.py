"""The eBPF activity source: GPU ioctls per process from bpf/activity.c, and with
--collector.process per-process on-CPU time.

By default no program runs on sched_switch: per-container CPU time is the kernel's own cgroup
total, which the wiring reads beside this source (exporter/app/wiring.py, KernelTotals), and the
samples here carry GPU ioctls alone. Loading (compile + attach, once at start-up) is in load.py;
turning map contents into cumulative per-task samples is in accounting.py; this module reads the
maps, looks processes up in /proc (once per new map entry), maps cgroup ids to paths, and deletes
the entries the accounting is done with.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from exporter.host.cgroupfs.ids import CgroupIdIndex, find_v2_root
from exporter.host.cgroupfs.ns import HOST_ROOT, namespace_root, to_host_path
from exporter.host.hostfile import read_text_bounded
from exporter.host.procstat import CLOCK_TICKS, PF_KTHREAD, parse_stat
from exporter.model.config import ActivitySource as ActivityChoice
from exporter.model.config import Config
from exporter.model.readings import MapStats, SourceError, TaskSample
from exporter.model.spec import ACTIVITY, BuildContext, CheckResult, Finding, SourceSpec
from exporter.sources.activity.ebpf import maps as bpf_maps
from exporter.sources.activity.ebpf.accounting import (
    Accounting,
    KernelExited,
    KernelTask,
    MapChanges,
    MapRead,
    ProcInfo,
    RunningSlice,
)
from exporter.sources.activity.ebpf.child import load_in_child
from exporter.sources.activity.ebpf.gpu_majors import DeviceClasses
from exporter.sources.activity.ebpf.interrupts import InterruptTime
from exporter.sources.activity.ebpf.load import (
    FIXES,
    IOCTL_TRACEPOINT,
    NO_CGROUP2,
    NOT_LIVE_PROCFS,
    Loaded,
    LoadInfo,
    gpu_device_nodes,
)

log = logging.getLogger(__name__)

NAME = "ebpf"
READ_ERROR = "read error"

# the counters of the stats map, in the order of enum stat_index in bpf/activity.c (a test
# compares the two)
STATS = (
    "STAT_TASK_INSERTS",
    "STAT_TASK_INSERT_FAILS",
    "STAT_EXITED_INSERTS",
    "STAT_EXITED_INSERT_FAILS",
    "STAT_LOST_NS",
    "STAT_LOST_IOCTLS",
    "STAT_FOLDS",
)
STAT_TASK_INSERTS = STATS.index("STAT_TASK_INSERTS")
STAT_TASK_INSERT_FAILS = STATS.index("STAT_TASK_INSERT_FAILS")
STAT_EXITED_INSERTS = STATS.index("STAT_EXITED_INSERTS")
STAT_EXITED_INSERT_FAILS = STATS.index("STAT_EXITED_INSERT_FAILS")
N_STATS = len(STATS)
# per-process mode with task runtime: name_slice() opens each CPU's first slice within this
# long of the attach; the first read waits for it, so that read's baseline covers every slice
SLICES_OPEN_S = 1.1


# /proc/<pid>/{stat,comm,cgroup,status}: under 2 KiB each; a v1 cgroup file a few KiB
_MAX_PROC_BYTES = 16384


class ProcReader:
    """The /proc look-ups the accounting needs, through a configurable root."""

    def __init__(self, procfs: Path, cgroup2: Path, cgroupns_root: str = HOST_ROOT) -> None:
        self._root = str(procfs)
        self._cgroup2 = cgroup2
        self._cgroupns_root = cgroupns_root  # /proc shows cgroup paths relative to it

    def info(self, tgid: int) -> ProcInfo | None:
        try:
            stat = parse_stat(read_text_bounded(f"{self._root}/{tgid}/stat", _MAX_PROC_BYTES))
        except (OSError, ValueError):
            return None
        return ProcInfo(
            start_ticks=stat.start_ticks,
            start_boot_ns=stat.start_ticks * 1_000_000_000 // CLOCK_TICKS,
            comm=stat.comm,
            kernel_thread=bool(stat.flags & PF_KTHREAD),
        )

    def comm(self, tgid: int) -> str | None:
        try:
            return read_text_bounded(f"{self._root}/{tgid}/comm", _MAX_PROC_BYTES).rstrip("\n")
        except OSError:
            return None

    def cgroup_id(self, tgid: int) -> int | None:
        """The cgroup v2 id of the process: the inode of its "0::" cgroup directory."""
        try:
            lines = read_text_bounded(f"{self._root}/{tgid}/cgroup", _MAX_PROC_BYTES).splitlines()
            path = next(ln[3:] for ln in lines if ln.startswith("0::"))
            path = to_host_path(path, self._cgroupns_root)
            return (self._cgroup2 / path.lstrip("/")).stat().st_ino
        except (OSError, StopIteration):
            return None

    def runtime_ns(self, tid: int) -> int | None:
        """The thread's se.sum_exec_runtime (the first field of /proc/<tid>/schedstat), or None."""
        try:
            text = read_text_bounded(f"{self._root}/{tid}/schedstat", _MAX_PROC_BYTES)
            return int(text.split(None, 1)[0])
        except (OSError, ValueError, IndexError):
            return None

    def tgid_of(self, tid: int) -> int | None:
        # /proc/<tid> resolves thread ids too; its status names the thread group
        try:
            for line in read_text_bounded(f"{self._root}/{tid}/status", _MAX_PROC_BYTES).split(
                "\n"
            ):
                if line.startswith("Tgid:"):
                    return int(line.split()[1])
        except (OSError, ValueError, IndexError):
            return None
        return None


def _int(value: Any) -> int:
    """bcc hands out keys as ints (batch reads) or ctypes scalars (iteration)."""
    return int(getattr(value, "value", value))


class EbpfSource:
    """ActivitySource backed by the probes. Construct with EbpfSource.start()."""

    name = NAME

    def __init__(
        self,
        loaded: Loaded,
        procfs: Path,
        cgroups: CgroupIdIndex,
        *,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
        boot_ns: Callable[[], int] = lambda: time.clock_gettime_ns(time.CLOCK_BOOTTIME),
        cgroupns_root: str = HOST_ROOT,
    ) -> None:
        self._bpf = loaded.bpf
        self.info: LoadInfo = loaded.info
        self._tasks = self._bpf[b"tasks"]
        self._exited = self._bpf[b"exited"]
        # the slices on each CPU: only the per-process build has a sched_switch program
        self._running = self._bpf[b"running"] if loaded.info.per_process else None
        # set after the first read: until then each switch names its incoming thread
        self._baseline = self._bpf[b"baseline_read"] if loaded.info.task_runtime else None
        self._stats = self._bpf[b"stats"]
        mkdir = "cgroup:cgroup_mkdir" in loaded.info.tracepoints
        self._cgroup_paths = self._bpf[b"cgroup_paths"] if mkdir else None
        ioctls = ":".join(IOCTL_TRACEPOINT) in loaded.info.tracepoints
        # GPU device majors: a driver module loaded after start-up gets its major counted
        self._devices = (
            DeviceClasses(self._bpf[b"dev_class"], procfs / "devices") if ioctls else None
        )
        self._cgroups = cgroups
        self._procs = ProcReader(procfs, cgroups.root, cgroupns_root)
        self._accounting = Accounting(self._procs, cgroups, per_process=loaded.info.per_process)
        # interrupts outside every task's runtime are kernel work, as in /proc mode
        self._interrupts = InterruptTime(procfs) if loaded.info.irq_time_apart else None
        self._monotonic_ns = monotonic_ns
        self._boot_ns = boot_ns
        self._batch = True
        self._deleted = {"tasks": 0, "exited": 0}
        self._created = 0  # tasks entries made by userspace
        self._evictions = {"tasks": 0, "exited": 0}
        self._map_stats: tuple[MapStats, ...] = ()
        self._cgroups_made = True  # the first read walks the tree

    @classmethod
    def start(
        cls,
        procfs: Path,
        cgroupfs: Path,
        kernel_headers: Path | None = None,
        gpu_ioctls: bool | None = None,
        *,
        raw_switch: bool | None = None,
        per_process: bool = True,
    ) -> EbpfSource:
        """Check, compile, attach: raises SourceError with a reason from ebpf_load.FIXES.

        gpu_ioctls: count GPU driver ioctls (None: when the node has GPU device nodes).
        raw_switch: see ebpf_load.load (None: a raw sched_switch tracepoint where the kernel
        has them, else the classic one).
        per_process: a map entry per process and a program on every context switch, as
        --collector.process needs; False (the default): no sched_switch program, entries only
        for processes that made a GPU ioctl, whose samples carry their ioctls alone (the CPU
        time is the cgroups' own totals, read beside this source)."""
        if not (procfs / "self" / "stat").is_file():
            # the probes report the kernel's own pids: they must be looked up in a live /proc
            raise SourceError(NOT_LIVE_PROCFS, f"{procfs} is not a live procfs (no self/stat)")
        root = find_v2_root(cgroupfs)
        if root is None:
            raise SourceError(
                NO_CGROUP2,
                f"no cgroup2 mount at {cgroupfs} or {cgroupfs}/unified: eBPF cgroup ids "
                "would not name containers",
            )
        ioctls = bool(gpu_device_nodes()) if gpu_ioctls is None else gpu_ioctls
        # compiled in a child: LLVM never enters this long-lived process (ebpf_child.py)
        loaded = load_in_child(
            kernel_headers,
            ioctls=ioctls,
            raw_switch=raw_switch,
            proc_devices=procfs / "devices",
            per_process=per_process,
        )
        attached = time.monotonic()
        index = CgroupIdIndex(root)
        index.walk()
        log.info("eBPF activity source loaded: %s; cgroup v2 at %s", loaded.info.describe(), root)
        if loaded.info.task_runtime:
            # every CPU's slice opened before the first read takes its baseline (bpf/activity.c
            # name_slice): no time from before that read is ever charged
            time.sleep(max(0.0, SLICES_OPEN_S - (time.monotonic() - attached)))
        return cls(loaded, procfs, index, cgroupns_root=namespace_root(cgroupfs))

    def close(self) -> None:
        """Detach the probes and free the maps."""
        self._bpf.cleanup()

    # -- ActivitySource -----------------------------------------------------------------------

    def tasks(self) -> list[TaskSample]:
        if self._devices is not None:
            self._devices.refresh()
        try:
            # counters first: an entry inserted while the maps are read then cannot look evicted
            counters = self._counters()
            read = self._read()
        except OSError as exc:
            raise SourceError(READ_ERROR, f"reading eBPF maps: {exc}") from exc
        samples, changes = self._accounting.update(read)
        if self._baseline is not None:
            self._end_naming_at_switch()
        self._update_map_stats(counters, len(read.tasks), len(read.exited))
        self._apply(changes)
        irq = self._interrupts.sample() if self._interrupts is not None else None
        return [*samples, irq] if irq is not None else samples

    def map_stats(self) -> Sequence[MapStats]:
        return self._map_stats

    def _end_naming_at_switch(self) -> None:
        """The first read is the baseline: from now on a switch only clears a slot's name, and
        name_slice() names long slices once a second (bpf/activity.c baseline_read)."""
        assert self._baseline is not None
        with contextlib.suppress(OSError):  # a failed write costs a probe read per switch
            bpf_maps.update(self._baseline.map_fd, self._baseline.Key(0), self._baseline.Leaf(1))
        self._baseline = None

    # -- maps ---------------------------------------------------------------------------------

    def _read(self) -> MapRead:
        seen_at = time.monotonic()
        self._learn_cgroup_paths()  # first: a cgroup is made before anything runs in it
        exited = [
            KernelExited(_int(k), v.on_cpu_ns, (v.ioctls[0], v.ioctls[1]))
            for k, v in self._items(self._exited)
        ]
        tasks = [
            KernelTask(
                tgid=_int(k),
                first_ns=v.first_ns,
                cgroup_id=v.cgroup_id,
                on_cpu_ns=v.on_cpu_ns,
                ioctls=(v.ioctls[0], v.ioctls[1]),
                dead_ns=v.dead_ns,
                folded_ns=v.folded_ns,
                folded_ioctls=(v.folded_ioctls[0], v.folded_ioctls[1]),
                execs=v.execs,
            )
            for k, v in self._items(self._tasks)
        ]
        running_read_ns = self._monotonic_ns()
        running: list[RunningSlice] = []
        if self._running is not None:
            # a slot is only trusted if two reads agree: a switch between them (or during one,
            # tearing start from tid) changes start_ns
            first = [(s.start_ns, s.tid) for s in self._running.getvalue(0)]
            second = [(s.start_ns, s.tid) for s in self._running.getvalue(0)]
            running = [
                RunningSlice(tid, start)
                for (start, tid), again in zip(first, second, strict=True)
                if (start, tid) == again
            ]
        runtimes = None
        if self.info.task_runtime:
            runtimes = {}
            for s in running:
                ns = self._procs.runtime_ns(s.tid) if s.tid else None
                if ns is not None:
                    runtimes[s.tid] = ns
        return MapRead(
            exited=exited,
            tasks=tasks,
            running=running,
            running_read_ns=running_read_ns,
            boot_ns=self._boot_ns(),
            seen_at=seen_at,
            runtimes=runtimes,
        )

    def _learn_cgroup_paths(self) -> None:
        if self._cgroup_paths is None:
            return
        table = self._cgroup_paths
        if self._batch:
            try:
                entries = list(table.items_lookup_and_delete_batch())
            except Exception:  # kernels without batch ops: fall through
                self._batch = False
        if not self._batch:
            entries = list(table.items())
            for k, _ in entries:
                with contextlib.suppress(KeyError):
                    del table[k]
        for k, v in entries:
            path = bytes(v.path).split(b"\0", 1)[0].decode(errors="replace")
            self._cgroups.learn(_int(k), path)
        self._cgroups_made |= bool(entries)

    def cgroups_made(self) -> bool:
        """Whether a cgroup may have been made since the last call (always, without the
        cgroup_mkdir probe): the cgroup tree is listed again only then."""
        made, self._cgroups_made = self._cgroups_made, self._cgroup_paths is None
        return made

    def _items(self, table: Any) -> Iterable[tuple[Any, Any]]:
        """All entries, in one syscall per batch where the kernel has batch ops (5.6+)."""
        if self._batch:
            try:
                return list(table.items_lookup_batch())
            except Exception as exc:  # bcc raises bare Exception when the kernel lacks it
                log.info("eBPF map batch reads unavailable (%s); reading entry by entry", exc)
                self._batch = False
        return list(table.items())

    def _apply(self, changes: MapChanges) -> None:
        for tgid, first_ns in changes.delete_tasks:
            key = self._tasks.Key(tgid)
            try:
                value = self._tasks[key]
                if value.first_ns != first_ns:
                    continue  # replaced since it was read: not the entry we are done with
                del self._tasks[key]
            except KeyError:
                continue
            self._deleted["tasks"] += 1
        for cgroup_id in changes.delete_exited:
            try:
                del self._exited[self._exited.Key(cgroup_id)]
            except KeyError:
                continue
            self._deleted["exited"] += 1
        for tgid, cgroup_id in changes.create_tasks:
            leaf = self._tasks.Leaf()
            leaf.first_ns = self._boot_ns()
            leaf.cgroup_id = cgroup_id
            key = self._tasks.Key(tgid)
            # BPF_NOEXIST: if the kernel made the entry meanwhile, its counts stay
            with contextlib.suppress(OSError):  # full, or gone: the next interval retries
                if bpf_maps.update(self._tasks.map_fd, key, leaf, bpf_maps.BPF_NOEXIST):
                    self._created += 1

    def _counters(self) -> list[int]:
        """The stats map, summed over CPUs."""
        return [int(self._stats.sum(ctypes.c_int(i)).value) for i in range(N_STATS)]

    def _update_map_stats(self, counters: list[int], tasks_len: int, exited_len: int) -> None:
        """LRU maps evict silently; every insert and delete is counted, so the difference from
        what the map holds is what it evicted (a lower bound: counters are read first)."""
        entries = {"tasks": tasks_len, "exited": exited_len}
        inserts = {
            "tasks": counters[STAT_TASK_INSERTS] + self._created,
            "exited": counters[STAT_EXITED_INSERTS],
        }
        fails = {
            "tasks": counters[STAT_TASK_INSERT_FAILS],
            "exited": counters[STAT_EXITED_INSERT_FAILS],
        }
        capacity = {"tasks": self.info.max_tasks, "exited": self.info.max_cgroups}
        stats = []
        for name in ("tasks", "exited"):
            evicted = inserts[name] - self._deleted[name] - entries[name]
            self._evictions[name] = max(self._evictions[name], evicted)
            stats.append(
                MapStats(
                    map=name,
                    entries=entries[name],
                    max_entries=capacity[name],
                    evictions=self._evictions[name],
                    insert_failures=fails[name],
                )
            )
        self._map_stats = tuple(stats)


# -- wattprobe check -------------------------------------------------------------------------


def wants_processes(config: Config) -> bool:
    """--collector.process: per-process map entries."""
    return config.collector_on("process")


def probe(config: Config, _earlier: Sequence[CheckResult], _context: BuildContext) -> Finding:
    """Load the programs for real (compile, attach, one read of the maps), then unload them."""
    if config.activity_source is ActivityChoice.PROCFS:
        return Finding(
            False,
            reason="disabled by --activity.source procfs",
            fix="--activity.source auto (or ebpf) to use it",
            disabled=True,
        )
    try:
        source = EbpfSource.start(
            config.procfs,
            config.cgroup_root,
            config.ebpf_kernel_headers,
            config.ebpf_gpu_ioctls.wanted,
            per_process=wants_processes(config),
        )
        try:
            tasks = source.tasks()
        finally:
            source.close()
    except SourceError as exc:
        return Finding.failed(exc, FIXES.get(exc.reason, ""))
    info = source.info
    items = info.programs()
    items += [f"missing (optional): {t}" for t in info.missing_optional]
    items += [f"off: {t}" for t in info.switched_off]
    items += [f"kernel headers: {info.headers.describe()}", f"compiled in {info.compile_s:.2f}s"]
    return Finding.works(
        f"{len(tasks)} tasks seen; tracefs {info.tracefs}; {info.describe()}", items
    )


# No flag: --activity.source chooses between eBPF and procfs (exporter/app/wiring.py).
SPEC = SourceSpec(name=NAME, kind=ACTIVITY, probe=probe, fixes=FIXES)
