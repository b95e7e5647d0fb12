"""ExitedCpu against injected cgroup totals: what the kernel counted beyond the live processes."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from exporter.host.cgroupfs.classify import classify_task
from exporter.model.identity import SYSTEM
from exporter.model.readings import TaskKey, TaskSample
from exporter.sources.activity.procfs.cgroupcpu import V2, Location
from exporter.sources.activity.procfs.exited import (
    EXITED_COMM,
    EXITED_PID,
    LINGER_SCANS,
    QUIET_SCANS,
    ExitedCpu,
    settle,
)

POD = (
    "kubepods.slice/kubepods-burstable.slice/"
    "kubepods-burstable-pod1a2b3c4d_5e6f_4a7b_8c9d_0e1f2a3b4c5d.slice"
)
A = f"/{POD}/cri-containerd-{'a' * 64}.scope"
B = f"/{POD}/cri-containerd-{'b' * 64}.scope"
S = 1_000_000_000  # ns per second


class Files:
    """Cgroup totals set by the test; "0::<path>" texts, the root and unknown paths untracked."""

    def __init__(self) -> None:
        self.usage: dict[str, int] = {}
        self.reads: list[str] = []

    def locate(self, cgroup_text: str) -> Location | None:
        path = cgroup_text.strip().removeprefix("0::")
        return None if path in ("", "/") else (V2, path)

    def reader(self, where: Location) -> Callable[[], int]:
        def read() -> int:
            self.reads.append(where[1])
            if where[1] not in self.usage:
                raise FileNotFoundError(where[1])
            return self.usage[where[1]]

        return read


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def task(pid: int, cgroup: str, cpu_s: float, start: int = 1) -> TaskSample:
    return TaskSample((pid, start), pid, "sh", f"0::{cgroup}\n", False, cpu_s)


class Rig:
    """ExitedCpu plus what the monitor does with its output: per-key deltas, per container."""

    def __init__(self, ncpu: int = 4) -> None:
        self.files = Files()
        self.clock = Clock()
        self.exited = ExitedCpu(self.files, clock=self.clock, ncpu=ncpu)
        self.prev: dict[TaskKey, float] | None = None
        self.cpu: dict[str, float] = {}  # container id -> CPU seconds credited, as the monitor
        self.pseudo: list[TaskSample] = []

    def scan(self, tasks: Sequence[TaskSample], dt: float = 1.0) -> list[TaskSample]:
        self.clock.now += dt
        self.pseudo = self.exited.update(tasks)
        every = [*tasks, *self.pseudo]
        if self.prev is not None:  # exporter.accounting.monitor: the first interval is a baseline
            for t in every:
                delta = t.cpu_seconds - self.prev.get(t.key, 0.0)
                if delta > 0:
                    ref = classify_task(t.cgroup, t.kernel_thread)
                    cid = ref.container_id or ref.pseudo
                    self.cpu[cid] = self.cpu.get(cid, 0.0) + delta
        self.prev = {t.key: t.cpu_seconds for t in every}
        return self.pseudo


def test_settle_reports_only_rises_and_keeps_debts() -> None:
    assert settle(0.0, 0.0, 2.0, 0.5) == (1.5, 1.5)
    assert settle(1.5, 1.5, 0.0, 1.0) == (0.5, 1.5)  # over-credited: a debt, nothing taken back
    raw, level = settle(0.5, 1.5, 1.5, 0.0)  # the debt is paid first
    assert raw == pytest.approx(2.0) and level == pytest.approx(2.0)


def test_short_lived_processes_are_counted_from_the_cgroup_total() -> None:
    rig = Rig()
    rig.files.usage[A] = 100 * S
    rig.scan([task(10, A, 90.0)])  # baseline
    # the shell ran 1 s; children that lived and died between the reads ran 3 s
    rig.files.usage[A] = 104 * S
    out = rig.scan([task(10, A, 91.0)])
    assert [(t.key[0], t.pid, t.comm) for t in out] == [(EXITED_PID, 0, EXITED_COMM)]
    assert out[0].cpu_seconds == pytest.approx(3.0)
    assert classify_task(out[0].cgroup, False) == classify_task(f"0::{A}\n", False)
    assert rig.cpu["a" * 64] == pytest.approx(4.0)  # the kernel's 104 - 100


def test_a_process_that_exits_keeps_its_last_interval() -> None:
    rig = Rig()
    rig.files.usage[A] = 10 * S
    rig.scan([task(10, A, 5.0), task(11, A, 5.0)])
    rig.files.usage[A] = 14 * S  # both ran 1 s, then 11 ran 2 s more and exited
    rig.scan([task(10, A, 6.0), task(11, A, 6.0)])
    rig.files.usage[A] = 17 * S
    rig.scan([task(10, A, 7.0)])
    assert rig.cpu["a" * 64] == pytest.approx(7.0)  # 17 - 10


def test_neighbours_are_credited_their_own_time_only() -> None:
    rig = Rig()
    rig.files.usage.update({A: 0, B: 50 * S})
    rig.scan([task(10, A, 0.0), task(20, B, 50.0)])
    for i in range(1, 6):
        rig.files.usage[A] = i * 3 * S  # 3 s per interval, almost all in exited children
        rig.files.usage[B] = (50 + i) * S
        rig.scan([task(10, A, 0.1 * i), task(20, B, 50.0 + i)])
    assert rig.cpu["a" * 64] == pytest.approx(15.0)
    assert rig.cpu["b" * 64] == pytest.approx(5.0)


def test_over_credited_time_is_a_debt_not_a_negative_report() -> None:
    rig = Rig()
    rig.files.usage[A] = 10 * S
    rig.scan([task(10, A, 10.0)])
    # a process moved in with 7 s it ran elsewhere: the monitor credits all of it to A
    rig.files.usage[A] = 11 * S
    rig.scan([task(10, A, 11.0), task(11, A, 7.0)])
    assert rig.cpu["a" * 64] == pytest.approx(8.0)
    for _ in range(3):  # the kernel counts 2 s per interval, the live processes 1 s
        rig.files.usage[A] += 2 * S
        rig.scan([task(10, A, rig.prev[(10, 1)] + 1.0), task(11, A, 7.0)])  # type: ignore[index]
        assert all(t.cpu_seconds >= 0 for t in rig.pseudo)
    # a 7 s debt: 1 s more each interval pays it down, nothing is reported yet
    assert rig.cpu["a" * 64] == pytest.approx(11.0)
    rig.files.usage[A] += 10 * S
    rig.scan([task(10, A, rig.prev[(10, 1)] + 1.0), task(11, A, 7.0)])  # type: ignore[index]
    # the debt paid, the container has what the kernel counted: 27 - 10
    assert rig.cpu["a" * 64] == pytest.approx(17.0)


def test_first_scan_is_a_baseline_and_a_new_cgroup_counts_in_full() -> None:
    rig = Rig(ncpu=4)
    rig.files.usage[A] = 500 * S  # a history from before the exporter started
    assert rig.scan([task(10, A, 1.0)]) == []
    rig.files.usage[A] += 1 * S
    # B is made and its processes ran 2.5 s (one still alive, 0.5 s) since the last read
    rig.files.usage[B] = int(2.5 * S)
    rig.scan([task(10, A, 2.0), task(20, B, 0.5, start=99)])
    assert rig.cpu["b" * 64] == pytest.approx(2.5)
    assert rig.cpu["a" * 64] == pytest.approx(1.0)


def test_a_history_too_long_for_the_interval_is_a_baseline() -> None:
    rig = Rig(ncpu=2)
    rig.scan([])
    # first seen now, but it ran more than 2 CPUs could in 1 s: it existed before
    rig.files.usage[A] = 100 * S
    assert rig.scan([task(10, A, 1.0)], dt=1.0) == []
    assert rig.cpu.get("a" * 64, 0.0) == pytest.approx(1.0)  # the live process only
    rig.files.usage[A] += 2 * S
    rig.scan([task(10, A, 1.5)])
    assert rig.cpu["a" * 64] == pytest.approx(3.0)


def test_a_cgroup_made_again_under_the_same_path_counts_from_zero() -> None:
    rig = Rig()
    rig.files.usage[A] = 50 * S
    rig.scan([task(10, A, 50.0)])
    rig.files.usage[A] = 1 * S  # removed and made again: less than before
    rig.scan([task(11, A, 0.25, start=7)])
    assert rig.cpu["a" * 64] == pytest.approx(1.0)


def test_nested_cgroups_are_not_counted_twice() -> None:
    rig = Rig()
    inner = f"{A}/init"
    rig.files.usage.update({A: 10 * S, inner: 4 * S})
    rig.scan([task(10, A, 6.0), task(11, inner, 4.0)])
    # A's total holds inner's: inner grew 3 s (1 s by its live process), A itself 2 s (0)
    rig.files.usage.update({A: 15 * S, inner: 7 * S})
    rig.scan([task(10, A, 6.0), task(11, inner, 5.0)])
    assert rig.cpu["a" * 64] == pytest.approx(5.0)


def test_a_failed_read_loses_nothing_while_the_cgroup_has_processes() -> None:
    rig = Rig()
    rig.files.usage[A] = 10 * S
    rig.scan([task(10, A, 1.0)])
    del rig.files.usage[A]  # EACCES, EIO...: read again next interval
    rig.scan([task(10, A, 2.0)])
    rig.files.usage[A] = 15 * S
    rig.scan([task(10, A, 3.0)])
    assert rig.cpu["a" * 64] == pytest.approx(5.0)


def test_a_cgroup_without_processes_is_read_a_while_then_dropped() -> None:
    rig = Rig()
    rig.files.usage[A] = 10 * S
    rig.scan([task(10, A, 1.0)])
    rig.files.usage[A] = 12 * S  # its last process exits after running 2 s
    rig.scan([])
    assert rig.cpu["a" * 64] == pytest.approx(2.0)
    rig.files.reads.clear()
    for _ in range(LINGER_SCANS + 3):
        rig.scan([])
    assert rig.files.reads.count(A) == LINGER_SCANS - 1
    rig.files.reads.clear()
    rig.scan([task(10, A, 1.0)])
    del rig.files.usage[A]  # removed with its last process: not read again
    rig.scan([])
    rig.scan([])
    assert rig.files.reads.count(A) == 2


def test_host_services_share_one_pseudo_task() -> None:
    rig = Rig()
    services = ["/system.slice/cron.service", "/system.slice/ssh.service"]
    for s in services:
        rig.files.usage[s] = 10 * S
    rig.scan([task(i, s, 1.0) for i, s in enumerate(services, 1)])
    for s in services:
        rig.files.usage[s] += 2 * S
    out = rig.scan([task(i, s, 1.0) for i, s in enumerate(services, 1)])
    assert len(out) == 1 and classify_task(out[0].cgroup, False) == SYSTEM
    assert out[0].cpu_seconds == pytest.approx(4.0)


def test_root_cgroup_and_kernel_threads_are_not_read() -> None:
    rig = Rig()
    kthread = TaskSample((2, 1), 2, "kthreadd", "0::/\n", True, 5.0)
    rig.scan([kthread, task(1, "/", 3.0)])
    rig.scan([kthread, task(1, "/", 4.0)])
    assert rig.files.reads == []


def test_pseudo_task_is_reported_while_it_changes_and_restarts_from_the_change() -> None:
    rig = Rig()
    rig.files.usage[A] = 0
    rig.scan([task(10, A, 0.0)])
    rig.files.usage[A] = 2 * S
    first = rig.scan([task(10, A, 0.0)])
    key = first[0].key
    for _ in range(QUIET_SCANS - 1):
        assert [t.cpu_seconds for t in rig.scan([task(10, A, 0.0)])] == [pytest.approx(2.0)]
    assert rig.scan([task(10, A, 0.0)]) == []
    rig.files.usage[A] = 3 * S
    again = rig.scan([task(10, A, 0.0)])
    # same key (the process series stays one series), from the change: the monitor has no
    # previous value for it now and counts all of what it sees
    assert [t.key for t in again] == [key]
    assert again[0].cpu_seconds == pytest.approx(1.0)
    assert rig.cpu["a" * 64] == pytest.approx(3.0)


def test_keys_never_collide_with_processes_ebpf_or_unattributed() -> None:
    rig = Rig()
    paths = [f"/{POD}/cri-containerd-{c * 64}.scope" for c in "abcdef"]
    for p in paths:
        rig.files.usage[p] = 0
    rig.scan([task(i, p, 0.0) for i, p in enumerate(paths, 1)])
    for p in paths:
        rig.files.usage[p] = S
    out = rig.scan([task(i, p, 0.0) for i, p in enumerate(paths, 1)])
    keys = {t.key for t in out}
    assert len(keys) == len(paths)
    assert all(k[0] == EXITED_PID < 0 for k in keys)  # pids are > 0; eBPF and (0, 0) use 0


def test_a_process_moved_without_exec_is_credited_where_the_kernel_charged_it() -> None:
    """The scanner still has the mover in A (its cgroup file is re-read only every few
    intervals); A's total stops growing by the mover's time while B's grows by it. A cgroup
    credited more than it grew lost a process: its processes' cgroups are re-read (recheck)
    in the same interval, and each container gets what its cpu.stat grew by, not the mover's
    time twice (A through its stale cache, B through its exited total)."""
    rig = Rig()
    rig.files.usage.update({A: 0, B: 0})
    where = {10: A}  # the mover's cgroup as the kernel has it
    cache = {10: A}  # ... as the scanner has it: read again only when asked (recheck)
    asked: list[set[str]] = []

    def tasks(mover_s: float, neighbour_s: float, cached: str) -> list[TaskSample]:
        return [task(10, cached, mover_s), task(20, B, neighbour_s)]

    def recheck(texts: set[str]) -> list[TaskSample]:
        asked.append(texts)
        cache[10] = where[10]
        return tasks(mover, neighbour, cache[10])

    mover = neighbour = 0.0
    for i in range(1, 7):
        if i == 4:
            where[10] = B  # echo 10 > B/cgroup.procs, between two reads
        mover += 1.0
        neighbour += 0.5
        rig.files.usage[where[10]] += 1 * S
        rig.files.usage[B] += S // 2
        rig.clock.now += 1.0
        live, pseudo = rig.exited.update_checked(tasks(mover, neighbour, cache[10]), recheck)
        every = [*live, *pseudo]
        if rig.prev is not None:
            for t in every:
                delta = t.cpu_seconds - rig.prev.get(t.key, 0.0)
                if delta > 0:
                    cid = classify_task(t.cgroup, t.kernel_thread).container_id
                    rig.cpu[cid] = rig.cpu.get(cid, 0.0) + delta
        rig.prev = {t.key: t.cpu_seconds for t in every}
    # the first interval is a baseline: 5 intervals counted, 2 of the mover's in A, 3 in B
    assert rig.cpu["a" * 64] == pytest.approx(2.0)
    assert rig.cpu["b" * 64] == pytest.approx(3.0 + 2.5)
    assert asked == [{f"0::{A}\n"}]  # once, for the cgroup it left
