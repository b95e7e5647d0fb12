"""The monitor on fake sources and a fake clock: invariants over random histories."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.model.config import IdleAttribution, IdlePower
from exporter.model.ports import PowerSource
from exporter.model.readings import CpuTimes, EnergyReading, SourceAbsent, SourceError, TaskSample
from exporter.model.snapshot import Snapshot
from exporter.sources.power.estimate import CpuPowerModel, EstimateSource
from tests.support.invariants import check_monotonic, check_snapshot
from tests.support.monitor import monitor_settings

POD = "5f1c3e2a-8b4d-4c6e-9f0a-1b2c3d4e5f60"
POD_US = POD.replace("-", "_")
CGROUPS = [
    "0::/init.scope\n",
    "0::/system.slice/kubelet.service\n",
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_US}.slice/"
    f"cri-containerd-{'a' * 64}.scope\n",
    f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_US}.slice/"
    f"cri-containerd-{'b' * 64}.scope\n",
    f"0::/kubepods/besteffort/pod{'c' * 8}-1111-2222-3333-{'d' * 12}/{'e' * 64}\n",
]
MAX_RANGE = 262_143_328_850


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class FakeHost:
    """Sources over mutable state, advanced by the test between steps."""

    busy: float = 100.0
    idle: float = 1000.0
    tasks: dict[int, TaskSample] = field(default_factory=dict)
    energy: dict[str, int] = field(
        default_factory=lambda: {"intel-rapl:0": 10**9, "intel-rapl:0:0": 10**9}
    )
    failing: str | None = None
    name: str = "procfs"

    def cpu_times(self) -> CpuTimes:
        return CpuTimes(self.busy, self.idle, 4)

    def read(self) -> Sequence[EnergyReading]:
        if self.failing:
            raise SourceError(self.failing, "injected")
        zones = {"intel-rapl:0": "package", "intel-rapl:0:0": "dram"}
        return [EnergyReading(zones[d], d, "rapl", uj, MAX_RANGE) for d, uj in self.energy.items()]

    def read_tasks(self) -> list[TaskSample]:
        return list(self.tasks.values())


class Activity:
    name = "procfs"

    def __init__(self, host: FakeHost) -> None:
        self.host = host

    def tasks(self) -> list[TaskSample]:
        return self.host.read_tasks()


class Rapl:
    name = "rapl"

    def __init__(self, host: FakeHost) -> None:
        self.host = host

    def read(self) -> Sequence[EnergyReading]:
        return self.host.read()


def make_monitor(
    host: FakeHost,
    clock: Clock,
    *,
    processes: bool = True,
    idle: IdleAttribution = IdleAttribution.NONE,
    retention: float = 60.0,
    power: Sequence[PowerSource] | None = None,
    idle_w: float | None = 5.0,
) -> Monitor:
    estimate = EstimateSource(host.cpu_times, CpuPowerModel.for_cpus, clock)
    return Monitor(
        MonitorParts(
            cpu=host,
            activity=Activity(host),
            power=[*([Rapl(host)] if power is None else power), estimate],
        ),
        monitor_settings(
            idle_power=IdlePower(default_w=idle_w),
            idle_policy=idle,
            with_processes=processes,
            retention_s=retention,
        ),
        clock=clock,
        wall_clock=clock,
    )


def task(pid: int, start: int, cgroup: str, cpu: float, *, kernel: bool = False) -> TaskSample:
    return TaskSample((pid, start), pid, f"p{pid}", cgroup, kernel, cpu)


@dataclass(frozen=True)
class Step:
    """One interval of a random history."""

    dt: float
    package_j: float
    dram_j: float
    reset: str | None  # which zone's counter restarts low (a driver reload)
    fail: bool  # the RAPL source fails this interval
    spawn: list[tuple[int, bool]]  # (cgroup index, kernel thread)
    exit: list[int]  # indexes into the sorted live pids
    reuse: list[int]  # a live pid taken over by a new process
    work: list[float]  # CPU seconds per live process, in pid order


steps_strategy = st.builds(
    Step,
    dt=st.floats(0.5, 30.0),
    package_j=st.floats(0.0, 3000.0),
    dram_j=st.floats(0.0, 500.0),
    reset=st.sampled_from([None, None, None, None, "package", "dram"]),
    fail=st.sampled_from([False, False, False, True]),
    spawn=st.lists(st.tuples(st.integers(0, len(CGROUPS) - 1), st.booleans()), max_size=3),
    exit=st.lists(st.integers(0, 20), max_size=2),
    reuse=st.lists(st.integers(0, 20), max_size=1),
    work=st.lists(st.floats(0.0, 20.0), max_size=12),
)
ZONE_DEVICES = {"package": "intel-rapl:0", "dram": "intel-rapl:0:0"}


def apply_step(host: FakeHost, clock: Clock, step: Step, index: int, next_pid: int) -> int:
    for cg_index, kernel in step.spawn:
        next_pid += 1
        host.tasks[next_pid] = task(next_pid, index, CGROUPS[cg_index], 0.0, kernel=kernel)
    pids = sorted(host.tasks)
    for n in step.exit:
        if n < len(pids):
            host.tasks.pop(pids[n], None)
    for n in step.reuse:
        if n < len(pids) and pids[n] in host.tasks:  # same PID, a new process elsewhere
            old = host.tasks[pids[n]]
            host.tasks[old.pid] = task(old.pid, old.key[1] + 1000, CGROUPS[n % len(CGROUPS)], 0.0)
    for pid, extra in zip(sorted(host.tasks), step.work, strict=False):
        old = host.tasks[pid]
        host.tasks[pid] = task(
            pid, old.key[1], old.cgroup, old.cpu_seconds + extra, kernel=old.kernel_thread
        )
    busy = sum(step.work)
    host.busy += busy
    host.idle += max(0.0, 4 * step.dt - busy)
    clock.now += step.dt
    for zone, joules in (("package", step.package_j), ("dram", step.dram_j)):
        device = ZONE_DEVICES[zone]
        if step.reset == zone:
            host.energy[device] = 12345
        else:
            host.energy[device] = (host.energy[device] + round(joules * 1e6)) % MAX_RANGE
    host.failing = "permission denied" if step.fail else None
    return next_pid


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(steps_strategy, min_size=2, max_size=25),
    idle=st.sampled_from(list(IdleAttribution)),
    idle_w=st.sampled_from([None, 0.0, 5.0, 80.0]),
)
def test_invariants_hold_over_random_histories(
    steps: list[Step], idle: IdleAttribution, idle_w: float | None
) -> None:
    host = FakeHost()
    clock = Clock()
    monitor = make_monitor(host, clock, idle=idle, retention=20.0, idle_w=idle_w)
    next_pid = 100
    prev: Snapshot | None = None
    for i, step in enumerate(steps):
        next_pid = apply_step(host, clock, step, i, next_pid)
        snap = monitor.step()
        check_snapshot(snap)
        if prev is not None:
            check_monotonic(prev, snap)
        prev = snap
    # resets and failures lose an interval's energy; nothing invents energy the counters lack
    # (a node whose RAPL never worked gets the estimate instead, labelled source="estimated")
    assert prev is not None
    package = sum(
        z.active_j + z.idle_j
        for z in prev.node_energy
        if z.zone == "package" and z.source == "rapl"
    )
    assert package <= sum(s.package_j for s in steps) * (1 + 1e-9) + 1e-6


def test_energy_split_by_cpu_share_and_idle_fixed() -> None:
    host = FakeHost()
    clock = Clock()
    host.tasks = {
        1: task(1, 1, CGROUPS[2], 10.0),
        2: task(2, 1, CGROUPS[3], 10.0),
        3: task(3, 1, CGROUPS[0], 10.0),
    }
    monitor = make_monitor(host, clock, idle_w=10.0)
    monitor.step()
    clock.now += 5.0
    host.tasks[1] = task(1, 1, CGROUPS[2], 13.0)  # 3 s
    host.tasks[2] = task(2, 1, CGROUPS[3], 11.0)  # 1 s
    host.energy["intel-rapl:0"] += 500_000_000  # 500 J in 5 s; idle 10 W -> 50 J idle
    snap = monitor.step()
    by_id = {c.container_id: c for c in snap.containers}
    active = {
        cid: next(e.joules for e in c.energy if e.zone == "package")
        for cid, c in by_id.items()
        if c.energy
    }
    assert active["a" * 64] == pytest.approx(450 * 0.75)
    assert active["b" * 64] == pytest.approx(450 * 0.25)
    assert "" not in active  # the host process did no work
    node = {z.device: z for z in snap.node_energy}
    assert node["intel-rapl:0"].idle_j == pytest.approx(50.0)
    assert node["intel-rapl:0"].active_j == pytest.approx(450.0)
    pod = snap.pods[0]
    assert pod.pod_uid == POD
    assert sum(e.joules for e in pod.energy if e.zone == "package") == pytest.approx(450.0)
    check_snapshot(snap)


def test_new_process_counts_all_its_time_and_reused_pid_is_new() -> None:
    host = FakeHost()
    clock = Clock()
    host.tasks = {7: task(7, 1, CGROUPS[2], 100.0)}
    monitor = make_monitor(host, clock)
    monitor.step()
    clock.now += 5.0
    # pid 7 exited and was reused by a new process in another container, which ran 2 s
    host.tasks = {7: task(7, 999, CGROUPS[3], 2.0)}
    snap = monitor.step()
    cpu = {c.container_id: c.cpu_seconds for c in snap.containers}
    assert cpu["b" * 64] == pytest.approx(2.0)
    assert cpu.get("a" * 64, 0.0) == 0.0


def test_terminated_container_kept_for_retention_then_dropped() -> None:
    host = FakeHost()
    clock = Clock()
    host.tasks = {1: task(1, 1, CGROUPS[2], 1.0), 2: task(2, 1, CGROUPS[0], 1.0)}
    monitor = make_monitor(host, clock, retention=30.0)
    monitor.step()
    clock.now += 5
    host.tasks[1] = task(1, 1, CGROUPS[2], 3.0)
    host.energy["intel-rapl:0"] += 100_000_000
    monitor.step()
    del host.tasks[1]
    for _ in range(6):  # 30 s: still retained
        clock.now += 5
        host.tasks[2] = task(2, 1, CGROUPS[0], host.tasks[2].cpu_seconds + 1)
        snap = monitor.step()
        assert "a" * 64 in {c.container_id for c in snap.containers}
    clock.now += 5
    snap = monitor.step()
    assert "a" * 64 not in {c.container_id for c in snap.containers}
    assert POD not in {p.pod_uid for p in snap.pods}
    assert snap.retired_containers  # its energy is still accounted for
    check_snapshot(snap)


def test_counter_wrap_is_counted_and_reset_is_not() -> None:
    host = FakeHost()
    clock = Clock()
    host.energy["intel-rapl:0"] = MAX_RANGE - 1_000_000  # 1 J before the end
    host.tasks = {1: task(1, 1, CGROUPS[0], 1.0)}
    monitor = make_monitor(host, clock, idle_w=0.0)
    monitor.step()
    clock.now += 5
    host.energy["intel-rapl:0"] = 2_000_000  # wrapped: 1 J + 2 J
    host.tasks[1] = task(1, 1, CGROUPS[0], 2.0)
    snap = monitor.step()
    assert {z.device: z.active_j for z in snap.node_energy}["intel-rapl:0"] == pytest.approx(3.0)
    clock.now += 5
    host.energy["intel-rapl:0"] = 500  # reset to below the last value without a plausible wrap
    snap = monitor.step()
    assert {z.device: z.active_j for z in snap.node_energy}["intel-rapl:0"] == pytest.approx(3.0)
    clock.now += 5
    host.energy["intel-rapl:0"] = 500 + 4_000_000  # counting resumes from the new baseline
    snap = monitor.step()
    assert {z.device: z.active_j for z in snap.node_energy}["intel-rapl:0"] == pytest.approx(7.0)


def test_failed_source_reports_reason_and_keeps_counters() -> None:
    host = FakeHost()
    clock = Clock()
    host.tasks = {1: task(1, 1, CGROUPS[0], 1.0)}
    monitor = make_monitor(host, clock)
    monitor.step()
    clock.now += 5
    host.energy["intel-rapl:0"] += 50_000_000
    before = monitor.step()
    host.failing = "permission denied"
    clock.now += 5
    snap = monitor.step()
    status = {s.source: s for s in snap.sources}
    assert not status["rapl"].up
    assert status["rapl"].reason == "permission denied"
    assert snap.node_energy == before.node_energy
    host.failing = None
    clock.now += 5
    host.energy["intel-rapl:0"] += 50_000_000  # 10 s of energy since the last good read
    snap = monitor.step()
    assert {s.source: s.up for s in snap.sources}["rapl"]
    pkg = {z.device: z for z in snap.node_energy}["intel-rapl:0"]
    assert pkg.active_j + pkg.idle_j == pytest.approx(100.0)


class Absent:
    name = "rapl"

    def read(self) -> Sequence[EnergyReading]:
        raise SourceAbsent("no powercap")


def test_estimate_used_only_without_measured_power() -> None:
    host = FakeHost()
    clock = Clock()
    host.tasks = {1: task(1, 1, CGROUPS[2], 0.0)}
    monitor = make_monitor(host, clock, power=[Absent()])
    monitor.step()
    clock.now += 10
    host.busy += 20.0  # 20 of 40 CPU-seconds busy: u = 0.5
    host.idle += 20.0
    host.tasks[1] = task(1, 1, CGROUPS[2], 20.0)
    snap = monitor.step()
    model = CpuPowerModel.for_cpus(4)
    (zone,) = snap.node_energy
    assert (zone.zone, zone.source) == ("package", "estimated")
    assert zone.idle_j == pytest.approx(model.idle_w * 10)
    assert zone.active_j == pytest.approx((model.max_w - model.idle_w) * 0.5 * 10)
    assert snap.attributed_zones == ("package",)
    assert {s.source: s.reason for s in snap.sources}["rapl"] == "absent"
    check_snapshot(snap)


def test_idle_attribution_activity_splits_idle_too() -> None:
    host = FakeHost()
    clock = Clock()
    host.tasks = {1: task(1, 1, CGROUPS[2], 0.0), 2: task(2, 1, CGROUPS[4], 0.0)}
    monitor = make_monitor(host, clock, idle=IdleAttribution.ACTIVITY, idle_w=20.0)
    monitor.step()
    clock.now += 5
    host.tasks = {1: task(1, 1, CGROUPS[2], 1.0), 2: task(2, 1, CGROUPS[4], 3.0)}
    host.energy["intel-rapl:0"] += 300_000_000
    snap = monitor.step()
    idle = {
        c.container_id: e.joules
        for c in snap.containers
        for e in c.energy
        if e.mode == "idle" and e.zone == "package"
    }
    assert idle["a" * 64] == pytest.approx(25.0)
    assert idle["e" * 64] == pytest.approx(75.0)
    assert math.fsum(idle.values()) == pytest.approx(100.0)


# -- the learned idle baseline by value (default --power.idle auto) ---------------------------


def run_steady(
    monitor: Monitor, host: FakeHost, clock: Clock, *, steps: int, usage: float, watts: float
) -> Snapshot:
    """steps intervals of 5 s at a node CPU usage and a package power; the pod's task does the
    busy part of the work."""
    snap = monitor.step()
    for _ in range(steps):
        clock.now += 5
        host.busy += 4 * 5 * usage  # 4 CPUs
        host.idle += 4 * 5 * (1 - usage)
        host.energy["intel-rapl:0"] = (host.energy["intel-rapl:0"] + int(watts * 5e6)) % MAX_RANGE
        host.energy["intel-rapl:0:0"] += int(3 * 5e6)
        t = host.tasks[1]
        host.tasks[1] = task(1, 1, CGROUPS[2], t.cpu_seconds + 4 * 5 * usage)
        snap = monitor.step()
    return snap


def package(snap: Snapshot) -> tuple[float, float]:
    z = next(z for z in snap.node_energy if z.zone == "package")
    return z.active_j, z.idle_j


def idle_in_use(snap: Snapshot, zone: str) -> tuple[object, str]:
    d = next(d for d in snap.devices if d.zone == zone)
    return d.meter.idle_w, d.meter.idle_origin


def test_steady_full_load_for_an_hour_bills_at_least_90_percent_as_active() -> None:
    """A node that never idles (issue 14): the low percentile of its load is not its idle."""
    host, clock = FakeHost(), Clock()
    host.tasks = {1: task(1, 1, CGROUPS[2], 0.0)}
    monitor = make_monitor(host, clock, idle_w=None)
    snap = run_steady(monitor, host, clock, steps=720, usage=0.97, watts=180.0)
    active, idle = package(snap)
    assert active / (active + idle) >= 0.9
    watts, origin = idle_in_use(snap, "package")
    assert (watts, origin) == (pytest.approx(0.05 * 180.0, rel=1e-3), "prior")
    # and the pod was billed that active energy (the attributed zones: package and dram)
    pod = next(p for p in snap.pods if p.pod_uid == POD)
    billed = math.fsum(e.joules for e in pod.energy if e.zone == "package")
    assert billed == pytest.approx(active, rel=1e-9)


def test_idle_then_busy_learns_the_idle_draw() -> None:
    host, clock = FakeHost(), Clock()
    host.tasks = {1: task(1, 1, CGROUPS[2], 0.0)}
    monitor = make_monitor(host, clock, idle_w=None)
    run_steady(monitor, host, clock, steps=10, usage=0.01, watts=40.0)
    snap = run_steady(monitor, host, clock, steps=720, usage=0.97, watts=180.0)
    watts, origin = idle_in_use(snap, "package")
    assert (watts, origin) == (pytest.approx(40.0, rel=1e-3), "learned")
    before_active, before_idle = package(snap)
    snap = run_steady(monitor, host, clock, steps=10, usage=0.97, watts=180.0)
    active, idle = package(snap)
    assert idle - before_idle == pytest.approx(40.0 * 5 * 10, rel=1e-3)
    assert active - before_active == pytest.approx(140.0 * 5 * 10, rel=1e-3)
