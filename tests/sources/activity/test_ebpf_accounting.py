"""exporter.sources.activity.ebpf.accounting against a model of bpf/activity.c.

The model kernel below does what the C programs do (same entries, folds, tombstones, late
slices); random schedules of processes starting, running, issuing ioctls, exiting and being
reaped are read at random moments, and the samples are consumed the way the monitor does (deltas
per key against the previous read only). Every nanosecond and ioctl must reach its cgroup exactly
once, and never before it happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.model.readings import TaskKey, TaskSample
from exporter.sources.activity.ebpf.accounting import (
    EXITED_COMM,
    EXITED_QUIET_READS,
    TOMBSTONE_GRACE_NS,
    Accounting,
    KernelExited,
    KernelTask,
    MapChanges,
    MapRead,
    ProcInfo,
    RunningSlice,
)

TICK_NS = 10_000_000  # USER_HZ 100
BOOT_OFFSET_NS = 7_000_000_000  # the boot clock runs ahead of the monotonic one (suspend)
NVIDIA, DRM = 0, 1
RUNTIME_LAG_NS = 10_000_000  # task_runtime worlds: tid's runtime is the clock minus tid times this


@dataclass
class Entry:
    first_ns: int
    cgroup_id: int
    on_cpu_ns: int = 0
    ioctls: list[int] = field(default_factory=lambda: [0, 0])
    dead_ns: int = 0
    folded_ns: int = 0
    folded_ioctls: list[int] = field(default_factory=lambda: [0, 0])
    execs: int = 0
    tombstone_read: bool = False  # userspace has read it since the fold (no straggler after)


class ModelKernel:
    """The maps and programs of bpf/activity.c, one event at a time.

    ioctls_only: the default build (no WATTPROBE_PER_PROCESS): no program on sched_switch, a
    process gets an entry with its first GPU ioctl, which goes straight to it."""

    def __init__(self, *, ioctls_only: bool = False) -> None:
        self.ioctls_only = ioctls_only
        self.tasks: dict[int, Entry] = {}
        self.exited: dict[int, list[int]] = {}  # cgroup -> [ns, nvidia, drm]
        self.mono_ns = 1_000_000_000

    @property
    def boot_ns(self) -> int:
        return self.mono_ns + BOOT_OFFSET_NS

    def _exited(self, cgroup_id: int, ns: int, ioctls: list[int]) -> None:
        e = self.exited.setdefault(cgroup_id, [0, 0, 0])
        e[0] += ns
        e[1] += ioctls[NVIDIA]
        e[2] += ioctls[DRM]

    def account(self, tgid: int, cgroup_id: int, ns: int, ioctls: list[int], exiting: bool) -> None:
        """A slice that ended on cpu, with the GPU ioctls counted during it (switch_slice)."""
        assert not self.ioctls_only, "the default build has no sched_switch program"
        v = self.tasks.get(tgid)
        if v is None:
            if exiting:
                self._exited(cgroup_id, ns, ioctls)
                return
            v = self.tasks[tgid] = Entry(self.boot_ns, cgroup_id)
        if v.dead_ns:
            self._exited(cgroup_id, ns, ioctls)
            return
        v.cgroup_id = cgroup_id
        v.on_cpu_ns += ns
        v.ioctls[NVIDIA] += ioctls[NVIDIA]
        v.ioctls[DRM] += ioctls[DRM]

    def ioctl(self, tgid: int, cgroup_id: int, drv: int) -> None:
        """The default build's ioctl probe: straight to the process's entry (live_entry)."""
        v = self.tasks.get(tgid)
        if v is None:
            v = self.tasks[tgid] = Entry(self.boot_ns, cgroup_id)
        if v.dead_ns:
            self._exited(cgroup_id, 0, [int(drv == NVIDIA), int(drv == DRM)])
            return
        v.ioctls[drv] += 1

    def process_exit(self, tgid: int, cgroup_id: int) -> None:
        v = self.tasks.get(tgid)
        if v is None and self.ioctls_only:
            return  # never made a GPU ioctl: nothing to fold
        if v is None:
            self.tasks[tgid] = Entry(self.boot_ns, cgroup_id, dead_ns=self.boot_ns)
            return
        if v.dead_ns:
            return
        v.dead_ns, v.cgroup_id = self.boot_ns, cgroup_id
        v.folded_ns, v.folded_ioctls = v.on_cpu_ns, list(v.ioctls)
        e = self.exited.setdefault(cgroup_id, [0, 0, 0])
        e[0] += v.on_cpu_ns
        e[1] += v.ioctls[0]
        e[2] += v.ioctls[1]

    def straggle(self, tgid: int, ns: int) -> bool:
        """Another CPU's add that raced the fold and landed in the tombstone. It races the fold
        itself (microseconds), so it lands before userspace has read the tombstone."""
        v = self.tasks.get(tgid)
        if v is None or not v.dead_ns or v.tombstone_read:
            return False
        v.on_cpu_ns += ns
        return True

    def apply(self, changes: MapChanges) -> None:
        """What EbpfSource does with the accounting's changes."""
        for tgid, first_ns in changes.delete_tasks:
            if tgid in self.tasks and self.tasks[tgid].first_ns == first_ns:
                del self.tasks[tgid]
        for cgroup_id in changes.delete_exited:
            self.exited.pop(cgroup_id, None)
        for tgid, cgroup_id in changes.create_tasks:
            self.tasks.setdefault(tgid, Entry(self.boot_ns, cgroup_id))


@dataclass
class Proc:
    tgid: int
    cgroup_id: int
    start_boot_ns: int
    comm: str = "worker"
    alive: bool = True
    visible: bool = True  # in /proc: alive, or a zombie not yet reaped


class World:
    """Processes on CPUs, the model kernel, the accounting, and a monitor-like consumer.

    raw: the raw sched_switch program, which names the task a CPU switches to only if that
    task was switched out before (its task cache); the classic one always names it.
    """

    def __init__(
        self,
        ncpu: int = 2,
        *,
        raw: bool = False,
        ioctls_only: bool = False,
        task_runtime: bool = False,
    ) -> None:
        self.kernel = ModelKernel(ioctls_only=ioctls_only)
        self.raw = raw
        # WATTPROBE_TASK_RUNTIME: slots hold the task's runtime when it was switched in, and
        # userspace reads each running thread's runtime (schedstat); a task's runtime is modelled
        # as the clock plus a fixed offset of its own, so the in-flight time is the same
        self.task_runtime = task_runtime
        self.seen: set[int] = set()  # tasks the raw program has seen switched out
        self.procs: dict[int, Proc] = {}  # by tgid, visible ones
        self.cpus: list[tuple[int, int]] = [(0, 0)] * ncpu  # (tgid running, since mono ns)
        self.pending: list[list[int]] = [[0, 0] for _ in range(ncpu)]  # ioctls per CPU slot
        self.truth_ns: dict[int, int] = {}
        self.truth_ioctls: dict[int, list[int]] = {}
        self.counted_ns: dict[int, float] = {}
        self.counted_ioctls: dict[int, list[int]] = {}
        self.prev: dict[TaskKey, TaskSample] = {}
        # the consumer below counts from the load (its truth does), not from a first-read baseline
        self.accounting = Accounting(
            self, self, per_process=not ioctls_only, first_read_is_baseline=False
        )
        self.reads = 0

    # -- ProcessTable / CgroupPaths for the accounting -------------------------------------

    def info(self, tgid: int) -> ProcInfo | None:
        p = self.procs.get(tgid)
        if p is None:
            return None
        ticks = p.start_boot_ns // TICK_NS
        return ProcInfo(ticks, ticks * TICK_NS, p.comm, False)

    def comm(self, tgid: int) -> str | None:
        p = self.procs.get(tgid)
        return p.comm if p else None

    def tgid_of(self, tid: int) -> int | None:
        return tid if tid in self.procs else None

    def cgroup_id(self, tgid: int) -> int | None:
        p = self.procs.get(tgid)
        return p.cgroup_id if p else None

    def path(self, cgroup_id: int, seen_at: float) -> str | None:
        return f"/cg{cgroup_id}"

    def gone(self, cgroup_id: int) -> bool:
        return False

    # -- events -----------------------------------------------------------------------------

    def advance(self, ns: int) -> None:
        self.kernel.mono_ns += ns

    def spawn(self, tgid: int, cgroup_id: int) -> bool:
        if tgid in self.procs:
            return False
        self.procs[tgid] = Proc(tgid, cgroup_id, self.kernel.boot_ns)
        return True

    def switch(self, cpu: int, tgid: int) -> None:
        """sched_switch on cpu: what ran there is accounted; tgid (0: idle) runs next."""
        prev, start = self.cpus[cpu]
        now = self.kernel.mono_ns
        if tgid and (not self._runnable(tgid) or tgid == prev):
            return
        if prev:
            p = self.procs.get(prev)
            cgroup_id, dead = (p.cgroup_id, not p.alive) if p else (0, True)
            if not self.kernel.ioctls_only:  # the default build has no sched_switch program
                self.kernel.account(prev, cgroup_id, now - start, self.pending[cpu], dead)
                self._truth(cgroup_id, now - start)
            if dead:
                self.seen.discard(prev)  # its last switch empties its slot
            else:
                self.seen.add(prev)
        self.pending[cpu] = [0, 0]
        self.cpus[cpu] = (tgid, now)

    def _runnable(self, tgid: int) -> bool:
        p = self.procs.get(tgid)
        return p is not None and p.alive and all(t != tgid for t, _ in self.cpus)

    def _running(self, tgid: int) -> Proc | None:
        p = self.procs.get(tgid)
        on_cpu = any(t == tgid for t, _ in self.cpus)
        return p if p is not None and p.alive and on_cpu else None

    def ioctl(self, tgid: int, drv: int) -> None:
        """Counted in the CPU's slot; the task's next switch-out adds it to its process."""
        p = self._running(tgid)
        if p is None:
            return
        cpu = next(c for c, (t, _) in enumerate(self.cpus) if t == tgid)
        if self.kernel.ioctls_only:
            self.kernel.ioctl(tgid, p.cgroup_id, drv)
        else:
            self.pending[cpu][drv] += 1
        self.truth_ioctls.setdefault(p.cgroup_id, [0, 0])[drv] += 1

    def exit(self, tgid: int) -> None:
        """do_exit runs in the task: sched_process_exit, then it stays on its CPU until its
        last switch (which sched_switch sees with an exited prev_state)."""
        p = self._running(tgid)
        if p is None:
            return
        self.kernel.process_exit(tgid, p.cgroup_id)
        p.alive = False

    def late_slice(self, tgid: int, ns: int, last: bool) -> None:
        """Another thread of a process that just died, finishing do_exit elsewhere."""
        p = self.procs.get(tgid)
        if (
            self.kernel.ioctls_only
            or p is None
            or p.alive
            or self.kernel.boot_ns - self._dead_ns(tgid) > TOMBSTONE_GRACE_NS // 2
        ):
            return
        self.kernel.account(tgid, p.cgroup_id, ns, [0, 0], last)
        self._truth(p.cgroup_id, ns)

    def _dead_ns(self, tgid: int) -> int:
        v = self.kernel.tasks.get(tgid)
        return v.dead_ns if v is not None and v.dead_ns else self.kernel.boot_ns

    def straggle(self, tgid: int, ns: int) -> None:
        p = self.procs.get(tgid)
        if p is not None and not p.alive and self.kernel.straggle(tgid, ns):
            self._truth(p.cgroup_id, ns)

    def reap(self, tgid: int) -> None:
        p = self.procs.get(tgid)
        if p is not None and not p.alive and all(t != tgid for t, _ in self.cpus):
            del self.procs[tgid]

    def move(self, tgid: int, cgroup_id: int) -> None:
        """The default build: a process without an entry moved to another cgroup while off the
        CPU (its later ioctls go to its new cgroup: exact). A tracked process's entry is
        credited to its cgroup at the read (docs/ebpf.md, Limits): not exact, so not drawn."""
        p = self.procs.get(tgid)
        if (
            not self.kernel.ioctls_only
            or p is None
            or not p.alive
            or tgid in self.kernel.tasks
            or any(t == tgid for t, _ in self.cpus)
        ):
            return
        p.cgroup_id = cgroup_id

    def exec(self, tgid: int) -> None:
        p = self._running(tgid)
        if p is None or tgid not in self.kernel.tasks or self.kernel.tasks[tgid].dead_ns:
            return
        p.comm = f"exec{self.kernel.tasks[tgid].execs + 1}"
        self.kernel.tasks[tgid].execs += 1

    def _truth(self, cgroup_id: int, ns: int) -> None:
        self.truth_ns[cgroup_id] = self.truth_ns.get(cgroup_id, 0) + ns

    # -- a read by userspace, consumed like the monitor --------------------------------------

    def read(self) -> list[TaskSample]:
        return self.read_torn(-1, "", 0, 0, 0)

    def read_torn(self, after: int, event: str, cpu: int, tgid: int, ns: int) -> list[TaskSample]:
        """A read whose map reads are not atomic: `event` happens after map number `after`
        (0: exited, 1: tasks) was read, as it can while userspace walks the maps."""
        k = self.kernel

        def meanwhile(phase: int) -> None:
            if phase == after:
                self.advance(ns)
                if event == "switch":
                    self.switch(cpu, tgid)
                elif event == "exit":
                    self.exit(tgid)

        exited = [KernelExited(c, v[0], (v[1], v[2])) for c, v in k.exited.items()]
        meanwhile(0)
        tasks = [
            KernelTask(
                pid,
                e.first_ns,
                e.cgroup_id,
                e.on_cpu_ns,
                (e.ioctls[0], e.ioctls[1]),
                e.dead_ns,
                e.folded_ns,
                (e.folded_ioctls[0], e.folded_ioctls[1]),
                e.execs,
            )
            for pid, e in k.tasks.items()
        ]
        for e in k.tasks.values():
            e.tombstone_read = e.tombstone_read or bool(e.dead_ns)
        meanwhile(1)
        running = (
            []
            if k.ioctls_only  # no running slots in the default build
            else [RunningSlice(self._named(t), s) for t, s in self.cpus]
        )
        runtimes = None
        if self.task_runtime:
            # a fresh task starts at runtime 0: a valid start, unlike the clock's 0
            running = [
                RunningSlice(r.tid, r.start_ns - RUNTIME_LAG_NS * r.tid) if r.tid else r
                for r in running
            ]
            runtimes = {r.tid: k.mono_ns - RUNTIME_LAG_NS * r.tid for r in running if r.tid}
        read = MapRead(
            exited=exited,
            tasks=tasks,
            running=running,
            running_read_ns=k.mono_ns,
            boot_ns=k.boot_ns,
            seen_at=float(self.reads),
            runtimes=runtimes,
        )
        samples, changes = self.accounting.update(read)
        k.apply(changes)
        self.reads += 1
        self._consume(samples)
        return samples

    def _named(self, tgid: int) -> int:
        """The thread a running slot names: unknown (0) to the raw program until it has seen
        the task switched out."""
        return tgid if not self.raw or tgid in self.seen else 0

    def _consume(self, samples: list[TaskSample]) -> None:
        keys = [s.key for s in samples]
        assert len(keys) == len(set(keys)), "a key reported twice in one read"
        for s in samples:
            cgroup_id = int(s.cgroup.removeprefix("/cg"))
            before = self.prev.get(s.key)
            old_cpu = before.cpu_seconds if before else 0.0
            assert s.cpu_seconds >= old_cpu - 1e-12, f"{s.key} went down"
            self.counted_ns[cgroup_id] = self.counted_ns.get(cgroup_id, 0.0) + max(
                0.0, s.cpu_seconds - old_cpu
            )
            old_io = dict(before.gpu_ioctls) if before else {}
            counted = self.counted_ioctls.setdefault(cgroup_id, [0, 0])
            for i, driver in enumerate(("nvidia", "drm")):
                now = dict(s.gpu_ioctls).get(driver, 0)
                assert now >= old_io.get(driver, 0), f"{s.key} {driver} went down"
                counted[i] += now - old_io.get(driver, 0)
        self.prev = {s.key: s for s in samples}
        self._never_ahead()

    def _never_ahead(self) -> None:
        """What was counted never exceeds what happened (running slices included)."""
        now = self.kernel.mono_ns
        happened = dict(self.truth_ns)
        for tgid, since in self.cpus:
            if tgid and tgid in self.procs and not self.kernel.ioctls_only:
                c = self.procs[tgid].cgroup_id
                happened[c] = happened.get(c, 0) + now - since
        for c, seconds in self.counted_ns.items():
            assert seconds * 1e9 <= happened.get(c, 0) + 1e-3, (c, seconds, happened.get(c))
        for c, counts in self.counted_ioctls.items():
            truth = self.truth_ioctls.get(c, [0, 0])
            assert all(n <= t for n, t in zip(counts, truth, strict=True)), (c, counts, truth)

    def settle(self) -> None:
        """Every process exits and is reaped; read until tombstones and totals are done."""
        for cpu in range(len(self.cpus)):
            self.switch(cpu, 0)
        for tgid, p in list(self.procs.items()):
            if p.alive:
                self.switch(0, tgid)
                self.exit(tgid)
                self.switch(0, 0)
            self.reap(tgid)
        for _ in range(3):
            self.advance(2 * TOMBSTONE_GRACE_NS)
            self.read()


TGIDS = st.integers(min_value=100, max_value=102)  # a small pool: tgids get reused
CGROUPS = st.integers(min_value=1, max_value=3)
NS = st.integers(min_value=1, max_value=50_000_000)

OPS = st.one_of(
    st.tuples(st.just("spawn"), TGIDS, CGROUPS),
    st.tuples(st.just("switch"), st.integers(0, 1), st.one_of(st.just(0), TGIDS)),
    st.tuples(st.just("advance"), NS),
    st.tuples(st.just("ioctl"), TGIDS, st.integers(0, 1)),
    st.tuples(st.just("exit"), TGIDS),
    st.tuples(st.just("late_slice"), TGIDS, NS, st.booleans()),
    st.tuples(st.just("straggle"), TGIDS, NS),
    st.tuples(st.just("reap"), TGIDS),
    st.tuples(st.just("exec"), TGIDS),
    st.tuples(st.just("move"), TGIDS, CGROUPS),
    st.tuples(st.just("read")),
    st.tuples(
        st.just("read_torn"),
        st.integers(0, 1),
        st.sampled_from(["switch", "exit"]),
        st.integers(0, 1),
        st.one_of(st.just(0), TGIDS),
        NS,
    ),
)


def run(world: World, ops: list[tuple[object, ...]]) -> None:
    for op in ops:
        name, *args = op
        getattr(world, str(name))(*args)


@settings(max_examples=300, deadline=None)
@given(st.lists(OPS, max_size=120), st.booleans(), st.booleans())
def test_every_nanosecond_and_ioctl_counted_once(
    ops: list[tuple[object, ...]], raw: bool, ioctls_only: bool
) -> None:
    """Per-process build: every nanosecond and ioctl; default build: every ioctl, and no CPU
    time at all (the cgroups' own totals carry it)."""
    world = World(raw=raw, ioctls_only=ioctls_only)
    run(world, ops)
    world.settle()
    for c in set(world.truth_ns) | set(world.counted_ns):
        assert world.counted_ns.get(c, 0.0) * 1e9 == _approx(world.truth_ns.get(c, 0)), c
    for c in set(world.truth_ioctls) | set(world.counted_ioctls):
        assert world.counted_ioctls.get(c, [0, 0]) == world.truth_ioctls.get(c, [0, 0]), c
    assert not world.kernel.tasks, "tombstones and entries of reaped processes are deleted"


@settings(max_examples=200, deadline=None)
@given(st.lists(OPS, max_size=120), st.booleans())
def test_default_build_counts_the_same_ioctls_as_the_per_process_path(
    ops: list[tuple[object, ...]], raw: bool
) -> None:
    """The same churning schedule (moves left out: the per-process path credits a moved
    process's interval to its new cgroup) through both builds: equal ioctls per cgroup, no CPU
    time from the default build, and only processes that made a GPU ioctl have an entry."""
    ops = [op for op in ops if op[0] != "move"]
    per_process, default = World(raw=raw), World(raw=raw, ioctls_only=True)
    for op in ops:
        name, *args = op
        for world in (per_process, default):
            getattr(world, str(name))(*args)
        if name in ("read", "read_torn"):
            assert len(default.kernel.tasks) <= len(per_process.kernel.tasks)
            assert all(sum(e.ioctls) for e in default.kernel.tasks.values() if not e.dead_ns)
    for world in (per_process, default):
        world.settle()
    assert not any(default.counted_ns.values())
    for c in set(per_process.counted_ioctls) | set(default.counted_ioctls):
        assert per_process.counted_ioctls.get(c, [0, 0]) == default.counted_ioctls.get(c, [0, 0]), c


def _approx(ns: int) -> object:
    import pytest  # noqa: PLC0415

    return pytest.approx(ns, abs=1e-3)


# -- scenarios, one behaviour each --------------------------------------------------------------


def samples_by_key(samples: list[TaskSample]) -> dict[TaskKey, TaskSample]:
    return {s.key: s for s in samples}


def test_live_process_is_keyed_by_pid_and_start_time() -> None:
    w = World()
    w.spawn(100, 1)
    w.switch(0, 100)
    w.advance(30_000_000)
    w.switch(0, 0)
    start_ticks = w.procs[100].start_boot_ns // TICK_NS
    s = samples_by_key(w.read())[(100, start_ticks)]
    assert (s.pid, s.comm, s.cgroup, s.kernel_thread) == (100, "worker", "/cg1", False)
    assert s.cpu_seconds == 0.03


@pytest.mark.parametrize("task_runtime", [False, True], ids=["clock", "task-runtime"])
def test_time_on_cpu_in_flight_is_counted_before_the_switch(task_runtime: bool) -> None:
    w = World(task_runtime=task_runtime)
    w.spawn(100, 1)
    w.switch(0, 100)
    w.advance(1_000_000)
    w.switch(1, 0)  # any switch elsewhere: the model clock moves on
    w.advance(4_000_000_000)
    # never switched out since the probes loaded: no entry yet, so userspace makes one
    assert w.read() == []
    assert 100 in w.kernel.tasks
    key = next(iter(samples_by_key(w.read())))
    # still no switch, but four seconds on the CPU are reported
    assert samples_by_key(w.read())[key].cpu_seconds == 4.001
    w.advance(1_000_000_000)
    w.switch(0, 0)
    assert samples_by_key(w.read())[key].cpu_seconds == 5.001


def test_raw_program_names_a_running_task_once_it_was_switched_out() -> None:
    w = World(raw=True)
    w.spawn(100, 1)
    w.switch(0, 100)
    w.advance(2_000_000_000)
    # switched in, never out: the raw program cannot name it, so nothing is credited yet
    assert w.read() == []
    assert 100 not in w.kernel.tasks
    w.switch(0, 0)  # its first switch-out: the slice is counted, the task is remembered
    w.switch(0, 100)
    w.advance(3_000_000_000)
    key = next(iter(samples_by_key(w.read())))
    assert samples_by_key(w.read())[key].cpu_seconds == 5.0  # in flight included
    w.advance(1_000_000_000)
    w.switch(0, 0)
    assert samples_by_key(w.read())[key].cpu_seconds == 6.0


def test_ioctls_are_added_when_the_task_leaves_its_cpu() -> None:
    w = World()
    w.spawn(100, 1)
    w.switch(0, 100)
    for _ in range(3):
        w.ioctl(100, NVIDIA)
    w.ioctl(100, DRM)
    w.advance(1_000_000)
    assert all(not s.gpu_ioctls for s in w.read())  # still in the CPU's slot
    w.switch(0, 0)
    (s,) = w.read()
    assert s.gpu_ioctls == (("nvidia", 3), ("drm", 1))
    w.switch(0, 100)  # a slice without ioctls adds none
    w.switch(0, 0)
    (s,) = w.read()
    assert s.gpu_ioctls == (("nvidia", 3), ("drm", 1))
    w.switch(1, 100)
    w.ioctl(100, NVIDIA)
    w.switch(1, 0)
    (s,) = w.read()
    assert s.gpu_ioctls == (("nvidia", 4), ("drm", 1))
    assert w.counted_ioctls[1] == [4, 1]


def test_exited_process_moves_to_its_cgroup_total_without_double_counting() -> None:
    w = World()
    w.spawn(100, 2)
    w.switch(0, 100)
    w.advance(20_000_000)
    w.switch(0, 0)
    w.read()  # 20 ms credited under the process's key
    w.switch(0, 100)
    w.advance(5_000_000)
    w.exit(100)
    w.advance(1_000_000)
    w.switch(0, 0)  # last slice, after the fold
    samples = w.read()
    exited = samples_by_key(samples)[(0, 2)]
    assert (exited.pid, exited.comm, exited.cgroup) == (0, EXITED_COMM, "/cg2")
    assert exited.cpu_seconds == 0.006  # only what the process key had not been credited
    assert all(s.key[0] == 0 for s in samples), "the dead process's key is gone"
    assert w.counted_ns[2] * 1e9 == _approx(26_000_000)


def test_short_lived_process_never_seen_alive_is_in_the_exited_total() -> None:
    w = World()
    w.spawn(100, 3)
    w.switch(0, 100)
    w.advance(7_000_000)
    w.ioctl(100, NVIDIA)
    w.exit(100)
    w.switch(0, 0)
    w.reap(100)
    exited = samples_by_key(w.read())[(0, 3)]
    assert exited.cpu_seconds == 0.007
    assert exited.gpu_ioctls == (("nvidia", 1),)


def test_exited_total_stops_being_reported_when_quiet_and_restarts_from_zero() -> None:
    w = World()
    for tgid in (100, 101):
        w.spawn(tgid, 1)
        w.switch(0, tgid)
        w.advance(3_000_000)
        w.exit(tgid)
        w.switch(0, 0)
        w.reap(tgid)
        assert samples_by_key(w.read())[(0, 1)].cpu_seconds == 0.003
        for _ in range(EXITED_QUIET_READS):
            w.read()
        assert (0, 1) not in samples_by_key(w.read())
    assert w.counted_ns[1] * 1e9 == _approx(6_000_000)


def test_tombstones_are_deleted_after_the_grace_time() -> None:
    w = World()
    w.spawn(100, 1)
    w.switch(0, 100)
    w.advance(1_000)
    w.exit(100)
    w.switch(0, 0)
    w.read()
    assert 100 in w.kernel.tasks  # a late slice may still look for it
    w.advance(TOMBSTONE_GRACE_NS)
    w.read()
    assert 100 not in w.kernel.tasks


def test_orphan_entry_goes_to_the_exited_total_and_is_deleted() -> None:
    w = World()
    # an entry whose process is not in /proc (its exit was never seen by the probes)
    w.kernel.tasks[200] = Entry(w.kernel.boot_ns, 2, on_cpu_ns=9_000_000)
    w._truth(2, 9_000_000)
    assert samples_by_key(w.read())[(0, 2)].cpu_seconds == 0.009
    for _ in range(3):
        w.read()
    assert 200 not in w.kernel.tasks
    assert w.counted_ns[2] * 1e9 == _approx(9_000_000)


def test_reused_tgid_is_a_new_key() -> None:
    w = World()
    w.spawn(100, 1)
    w.switch(0, 100)
    w.advance(TICK_NS * 3)
    w.switch(0, 0)
    first = set(samples_by_key(w.read()))
    w.switch(0, 100)
    w.exit(100)
    w.switch(0, 0)
    w.reap(100)
    w.advance(2 * TOMBSTONE_GRACE_NS)
    w.read()
    w.spawn(100, 1)
    w.switch(0, 100)
    w.advance(TICK_NS)
    w.switch(0, 0)
    second = {k for k in samples_by_key(w.read()) if k[0] == 100}
    assert second and not (second & first)


def test_comm_follows_exec() -> None:
    w = World()
    w.spawn(100, 1)
    w.switch(0, 100)
    w.advance(1_000)
    w.switch(0, 0)
    w.read()
    w.switch(0, 100)
    w.exec(100)
    w.advance(1_000)
    w.switch(0, 0)
    assert [s.comm for s in w.read() if s.key[0] == 100] == ["exec1"]


def test_work_that_reaches_a_tombstone_after_the_fold_is_counted() -> None:
    w = World()
    w.spawn(100, 1)
    w.switch(0, 100)
    w.advance(2_000_000)
    w.switch(0, 0)
    w.read()
    w.switch(0, 100)
    w.exit(100)
    w.straggle(100, 500_000)  # another CPU's add, racing the fold
    w.switch(0, 0)
    w.read()
    assert w.counted_ns[1] * 1e9 == _approx(2_500_000)


def test_slice_ending_while_the_maps_are_read_does_not_take_time_back() -> None:
    w = World()
    w.spawn(100, 1)
    w.switch(0, 100)
    w.advance(1_000)
    w.switch(0, 0)
    w.switch(0, 100)
    w.advance(50_000_000)
    key = next(iter(samples_by_key(w.read())))  # 50 ms of it in flight
    # the slice ends after the entry was read but before the CPU slots are: neither the value
    # read nor the slots hold it this time
    samples = samples_by_key(w.read_torn(1, "switch", 0, 0, 1_000_000))
    assert samples[key].cpu_seconds == 0.050001
    assert samples_by_key(w.read())[key].cpu_seconds == 0.051001


def test_fold_while_the_maps_are_read_is_counted_late_never_twice() -> None:
    w = World()
    w.spawn(100, 1)
    w.switch(0, 100)
    w.advance(10_000_000)
    w.switch(0, 0)
    w.read()  # 10 ms under the process's key
    w.switch(0, 100)
    w.advance(5_000_000)
    # it exits after the exited map was read, before its entry is: its tombstone is seen, but
    # the exited total it was folded into is not yet
    w.read_torn(0, "exit", 0, 100, 0)
    assert w.counted_ns[1] * 1e9 == _approx(10_000_000)
    w.switch(0, 0)
    w.read()
    assert w.counted_ns[1] * 1e9 == _approx(15_000_000)


def test_default_build_a_gpu_ioctl_makes_an_entry_with_ioctls_alone() -> None:
    """From its first GPU ioctl a process has its own entry (GPU attribution needs its ioctls by
    PID), with no CPU time: that stays with its cgroup's own total, read beside the probes. When
    it ends, its ioctls fold into its cgroup's exited total, counted once."""
    w = World(ioctls_only=True)
    w.spawn(100, 1)
    w.spawn(101, 1)
    w.switch(0, 100)
    w.switch(1, 101)
    w.advance(2_000_000_000)
    assert w.read() == []
    assert not w.kernel.tasks, "no entry for a process that made no GPU ioctl"
    w.ioctl(100, NVIDIA)
    w.ioctl(100, NVIDIA)
    by_key = samples_by_key(w.read())
    start_ticks = w.procs[100].start_boot_ns // TICK_NS
    tracked = by_key[(100, start_ticks)]
    assert (tracked.pid, tracked.cpu_seconds, tracked.gpu_ioctls) == (100, 0.0, (("nvidia", 2),))
    assert list(by_key) == [(100, start_ticks)]
    w.ioctl(100, DRM)
    w.exit(100)
    w.switch(0, 0)
    w.reap(100)
    for _ in range(3):
        w.advance(2 * TOMBSTONE_GRACE_NS)
        w.read()
    assert w.counted_ioctls == {1: [2, 1]}
    assert not any(w.counted_ns.values())
    assert not w.kernel.tasks


def test_time_before_the_first_read_never_reaches_a_key_that_appears_later() -> None:
    """The monitor takes the first read as its baseline. A process on a CPU since before the
    load has no entry at that read; its key appears at the next one, which the monitor counts
    whole: what its slice had run by the first read is set aside (issue 37's over-count)."""
    w = World(task_runtime=True)
    w.accounting = Accounting(w, w)  # the default: the first read is the baseline
    w.spawn(100, 1)
    w.switch(0, 100)
    w.advance(3_000_000_000)
    assert w.read() == []  # the baseline; userspace makes the entry
    w.advance(1_000_000_000)
    (sample,) = w.read()
    assert sample.cpu_seconds == 1.0  # the second after the baseline, not 4
    w.advance(500_000_000)
    w.switch(0, 0)  # the kernel adds the whole 4.5 s slice to the entry
    (sample,) = w.read()
    assert sample.cpu_seconds == 1.5
