"""The monitor's GPU accounting: energy deltas, idle, the split to pods, and its invariants.

NVML readings are scripted here (tests/sources/gpu/nvml/scripted.py) so that every joule is known;
the same
paths run against the real binding and the fake library in test_e2e.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.accounting.gpu import UNKNOWN_PROCESSES
from exporter.accounting.gpu_attribution import GpuHolders
from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.model.config import IdleAttribution, IdlePower
from exporter.model.gpu_readings import MigInstanceReading
from exporter.model.gpu_snapshot import ENERGY_COUNTER, POWER_INTEGRAL
from exporter.model.identity import ContainerRef
from exporter.model.readings import SourceError, TaskSample
from exporter.model.snapshot import Snapshot
from tests.sources.gpu.nvml.pods import H100_PODS, POD_A, POD_B, POD_C, POD_D, GpuPod
from tests.sources.gpu.nvml.scripted import (
    Clock,
    GiB,
    ScriptedGpus,
    StaticActivity,
    StaticCpu,
    gpu_reading,
    mig_instance,
    task,
)
from tests.support.identity import StaticIdentity
from tests.support.monitor import monitor_settings

IDLE_20W = IdlePower(per_zone_w=(("gpu", 20.0),))
REL = 1e-9


def make_monitor(
    gpus: ScriptedGpus,
    tasks: Sequence[TaskSample],
    clock: Clock,
    *,
    idle: IdlePower = IDLE_20W,
    policy: IdleAttribution = IdleAttribution.NONE,
    holders: GpuHolders | None = None,
    ioctls: Callable[[TaskSample], int] | None = None,
) -> Monitor:
    return Monitor(
        MonitorParts(
            cpu=StaticCpu(),
            activity=StaticActivity(list(tasks), ioctls=ioctls),
            gpus=[gpus] if gpus is not None else [],
            identity=StaticIdentity(holders=holders),
        ),
        monitor_settings(idle_power=idle, idle_policy=policy, with_processes=True),
        clock=clock,
        wall_clock=clock,
    )


def step(monitor: Monitor, clock: Clock, dt: float = 1.0) -> Snapshot:
    snap = monitor.step()
    clock.now += dt
    return snap


def gpu_energy(snap: Snapshot, index: int) -> dict[tuple[str, str], float]:
    gpu = next(g for g in snap.gpus if g.index == index)
    return {(e.source, e.mode): e.joules for e in gpu.energy}


def gpu_mode(snap: Snapshot, index: int, mode: str) -> float:
    return math.fsum(j for (_, m), j in gpu_energy(snap, index).items() if m == mode)


def by_container(snap: Snapshot, index: int, mode: str) -> dict[str, float]:
    """Container id (or pseudo-container name) -> joules in zone gpu of one GPU."""
    out: dict[str, float] = {}
    for c in snap.containers:
        for e in c.energy:
            if e.zone == "gpu" and e.gpu == str(index) and e.mode == mode:
                name = c.container_id or c.container
                out[name] = out.get(name, 0.0) + e.joules
    return out


def by_pod(snap: Snapshot, index: int, mode: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in snap.pods:
        for e in p.energy:
            if e.zone == "gpu" and e.gpu == str(index) and e.mode == mode:
                out[p.pod_uid] = out.get(p.pod_uid, 0.0) + e.joules
    return out


def assert_gpu_invariants(snap: Snapshot) -> None:
    """Per GPU: containers' active (+ held and given-up) == the GPU's active; containers' idle
    <= its idle; pod ==
    sum of its containers; container == sum of its processes (+ retired)."""
    for gpu in snap.gpus:
        index = gpu.index
        for mode in ("active", "idle"):
            containers = math.fsum(by_container(snap, index, mode).values())
            retired = math.fsum(
                e.joules
                for e in snap.retired_containers
                if e.zone == "gpu" and e.gpu == str(index) and e.mode == mode
            )
            total = gpu_mode(snap, index, mode)
            key = ("gpu", str(index), mode)
            # held for the GPU's process list, or given up without it (accounting/gpu.py)
            waiting = math.fsum(
                [
                    *(e.joules for e in snap.pending if (e.zone, e.gpu, e.mode) == key),
                    *(u.joules for u in snap.unattributed if (u.zone, u.gpu, u.mode) == key),
                ]
            )
            if mode == "active":
                assert containers + retired + waiting == pytest.approx(total, rel=REL, abs=1e-9)
            else:
                assert containers + retired <= total * (1 + REL) + 1e-9
    for p in snap.pods:
        for key in {(e.zone, e.gpu, e.mode) for e in p.energy if e.zone == "gpu"}:
            pod_j = math.fsum(e.joules for e in p.energy if (e.zone, e.gpu, e.mode) == key)
            parts = [
                e.joules
                for c in snap.containers
                if c.pod_uid == p.pod_uid
                for e in (*c.energy,)
                if (e.zone, e.gpu, e.mode) == key
            ]
            parts += [e.joules for e in p.retired_containers if (e.zone, e.gpu, e.mode) == key]
            assert pod_j == pytest.approx(math.fsum(parts), rel=REL, abs=1e-9)
    for c in snap.containers:
        for key in {(e.zone, e.gpu, e.mode) for e in c.energy if e.zone == "gpu"}:
            c_j = math.fsum(e.joules for e in c.energy if (e.zone, e.gpu, e.mode) == key)
            procs = [
                e.joules
                for pr in snap.processes
                if (pr.container_id, pr.container) == (c.container_id, c.container)
                and pr.pod_uid == c.pod_uid
                for e in pr.energy
                if (e.zone, e.gpu, e.mode) == key
            ]
            procs += [e.joules for e in c.retired_processes if (e.zone, e.gpu, e.mode) == key]
            assert c_j == pytest.approx(math.fsum(procs), rel=REL, abs=1e-9)


def test_time_sliced_gpu_splits_by_sm_share() -> None:
    gpus, clock = ScriptedGpus(), Clock()
    procs = [(POD_A.pid, 20 * GiB), (POD_B.pid, 10 * GiB)]
    sm = [(POD_A.pid, 60.0), (POD_B.pid, 20.0)]
    gpus.push(gpu_reading(0, 1_000_000, processes=procs, sm=sm))
    gpus.push(gpu_reading(0, 1_100_000, processes=procs, sm=sm))  # +100 J in 1 s
    monitor = make_monitor(gpus, [task(POD_A), task(POD_B)], clock)
    step(monitor, clock)
    snap = step(monitor, clock)
    assert gpu_energy(snap, 0) == {(ENERGY_COUNTER, "active"): 80.0, (ENERGY_COUNTER, "idle"): 20.0}
    active = by_container(snap, 0, "active")
    assert active == {
        POD_A.container_id: pytest.approx(60.0),
        POD_B.container_id: pytest.approx(20.0),
    }
    assert by_pod(snap, 0, "active")[POD_A.pod_uid] == pytest.approx(60.0)
    assert by_container(snap, 0, "idle") == {}  # --attribution.idle=none: idle stays on the GPU
    assert dict(snap.gpus[0].attribution) == {"sm": 1}
    assert_gpu_invariants(snap)


def test_gpu_process_without_a_task_goes_to_unknown_processes() -> None:
    gpus, clock = ScriptedGpus(), Clock()
    procs = [(POD_A.pid, 4 * GiB), (5104, 4 * GiB)]
    sm = [(POD_A.pid, 30.0), (5104, 10.0)]
    gpus.push(gpu_reading(2, 0, processes=procs, sm=sm))
    gpus.push(gpu_reading(2, 60_000, processes=procs, sm=sm))
    monitor = make_monitor(gpus, [task(POD_A)], clock)
    step(monitor, clock)
    snap = step(monitor, clock)
    active = by_container(snap, 2, "active")
    assert active == {
        POD_A.container_id: pytest.approx(30.0),
        UNKNOWN_PROCESSES: pytest.approx(10.0),
    }
    unknown = [p for p in snap.processes if p.container == UNKNOWN_PROCESSES]
    assert [(p.pid, p.comm) for p in unknown] == [(5104, "")]
    memory = {
        (m.gpu, m.container_id or m.container): m.used_bytes for m in snap.gpu_container_memory
    }
    assert memory == {("2", POD_A.container_id): 4 * GiB, ("2", UNKNOWN_PROCESSES): 4 * GiB}
    assert_gpu_invariants(snap)


def test_memory_then_ioctl_fallbacks_in_the_monitor() -> None:
    gpus, clock = ScriptedGpus(), Clock()
    pods = [POD_A, POD_B]
    tasks = [task(p) for p in pods]
    no_mem = [(POD_A.pid, None), (POD_B.pid, None)]
    gpus.push(
        gpu_reading(0, 0, processes=[(POD_A.pid, 3 * GiB), (POD_B.pid, GiB)], sm=[]),
        gpu_reading(1, 0, processes=no_mem, sm=None),
    )
    gpus.push(
        gpu_reading(0, 40_000, processes=[(POD_A.pid, 3 * GiB), (POD_B.pid, GiB)], sm=[]),
        gpu_reading(1, 40_000, processes=no_mem, sm=None),
    )
    # pod A issues 3 NVIDIA ioctls per interval, pod B one
    ioctls = {POD_A.pid: 3, POD_B.pid: 1}
    monitor = make_monitor(gpus, tasks, clock, ioctls=lambda t: ioctls[t.pid])
    step(monitor, clock)
    snap = step(monitor, clock)
    for index in (0, 1):  # memory 3:1 on GPU 0, ioctls 3:1 on GPU 1; 20 J active each
        active = by_container(snap, index, "active")
        assert active[POD_A.container_id] == pytest.approx(15.0)
        assert active[POD_B.container_id] == pytest.approx(5.0)
    assert dict(snap.gpus[0].attribution) == {"memory": 1}
    assert dict(snap.gpus[1].attribution) == {"ioctl": 1}
    assert_gpu_invariants(snap)


def test_even_split_and_no_process() -> None:
    gpus, clock = ScriptedGpus(), Clock()
    procs = [(POD_A.pid, None), (POD_B.pid, None)]
    gpus.push(gpu_reading(0, 0, processes=procs, sm=None), gpu_reading(1, 0, sm=None))
    gpus.push(gpu_reading(0, 40_000, processes=procs, sm=None), gpu_reading(1, 40_000, sm=None))
    monitor = make_monitor(gpus, [task(POD_A), task(POD_B)], clock)
    step(monitor, clock)
    snap = step(monitor, clock)
    assert by_container(snap, 0, "active") == {
        POD_A.container_id: pytest.approx(10.0),
        POD_B.container_id: pytest.approx(10.0),
    }
    # nobody on GPU 1: its active energy is unattributed (system_processes), not lost
    assert by_container(snap, 1, "active") == {"system_processes": pytest.approx(20.0)}
    assert dict(snap.gpus[1].attribution) == {"none": 1}
    assert_gpu_invariants(snap)


def test_requests_policy_gives_idle_to_the_pods_holding_the_gpu() -> None:
    gpus, clock = ScriptedGpus(), Clock()
    procs = [(POD_A.pid, GiB), (POD_B.pid, GiB)]
    sm = [(POD_A.pid, 50.0), (POD_B.pid, 50.0)]
    gpus.push(gpu_reading(0, 0, processes=procs, sm=sm), gpu_reading(1, 0, sm=None))
    gpus.push(gpu_reading(0, 50_000, processes=procs, sm=sm), gpu_reading(1, 50_000, sm=None))
    # as PodResources would name them: pod A holds GPU 0 (pod B time-slices it unallocated),
    # pod C holds the otherwise unused GPU 1
    held = {
        "GPU-0": [ContainerRef(container_id=POD_A.container_id, pod_uid=POD_A.pod_uid)],
        "GPU-1": [ContainerRef(container_id=POD_C.container_id, pod_uid=POD_C.pod_uid)],
    }
    asked: list[str] = []

    def holders(uuid: str) -> list[ContainerRef]:
        asked.append(uuid)
        return held.get(uuid, [])

    tasks = [task(POD_A), task(POD_B), task(POD_C)]
    monitor = make_monitor(gpus, tasks, clock, policy=IdleAttribution.REQUESTS, holders=holders)
    step(monitor, clock)
    snap = step(monitor, clock)
    assert set(asked) == {"GPU-0", "GPU-1"}
    assert by_container(snap, 0, "idle") == {POD_A.container_id: pytest.approx(20.0)}
    assert by_container(snap, 1, "idle") == {POD_C.container_id: pytest.approx(20.0)}
    assert by_container(snap, 0, "active") == {
        POD_A.container_id: pytest.approx(15.0),
        POD_B.container_id: pytest.approx(15.0),
    }
    procs_c = [p for p in snap.processes if p.container_id == POD_C.container_id]
    assert [e.joules for p in procs_c for e in p.energy if e.mode == "idle"] == [
        pytest.approx(20.0)
    ]
    assert_gpu_invariants(snap)


def test_requests_policy_on_mig_by_instance_size() -> None:
    gpus, clock = ScriptedGpus(), Clock()

    def mig() -> list[MigInstanceReading]:
        return [
            mig_instance("MIG-3g", 1, 30 * GiB, [(POD_A.pid, 12 * GiB)]),
            mig_instance("MIG-1g", 13, 10 * GiB, [(POD_B.pid, 2 * GiB)]),
            mig_instance("MIG-free", 14, 10 * GiB, []),
        ]

    gpus.push(gpu_reading(0, 0, mig=mig()))
    gpus.push(gpu_reading(0, 50_000, mig=mig()))
    held = {
        "MIG-3g": [ContainerRef(container_id=POD_A.container_id)],
        "MIG-1g": [ContainerRef(container_id=POD_B.container_id)],
    }
    monitor = make_monitor(
        gpus,
        [task(POD_A), task(POD_B)],
        clock,
        policy=IdleAttribution.REQUESTS,
        holders=lambda u: held.get(u, []),
    )
    step(monitor, clock)
    snap = step(monitor, clock)
    # 20 J idle: 3g gets 30/50, 1g 10/50, the free instance's 10/50 stays on the GPU
    assert by_container(snap, 0, "idle") == {
        POD_A.container_id: pytest.approx(12.0),
        POD_B.container_id: pytest.approx(4.0),
    }
    # 30 J active by the processes' memory, 12:2
    assert by_container(snap, 0, "active") == {
        POD_A.container_id: pytest.approx(30.0 * 12 / 14),
        POD_B.container_id: pytest.approx(30.0 * 2 / 14),
    }
    assert dict(snap.gpus[0].attribution) == {"mig_memory": 1}
    assert_gpu_invariants(snap)


def test_activity_policy_splits_idle_like_active() -> None:
    gpus, clock = ScriptedGpus(), Clock()
    procs = [(POD_A.pid, GiB), (POD_B.pid, GiB)]
    sm = [(POD_A.pid, 75.0), (POD_B.pid, 25.0)]
    gpus.push(gpu_reading(0, 0, processes=procs, sm=sm), gpu_reading(1, 0, sm=None))
    gpus.push(gpu_reading(0, 40_000, processes=procs, sm=sm), gpu_reading(1, 30_000, sm=None))
    monitor = make_monitor(gpus, [task(POD_A), task(POD_B)], clock, policy=IdleAttribution.ACTIVITY)
    step(monitor, clock)
    snap = step(monitor, clock)
    assert by_container(snap, 0, "idle") == {
        POD_A.container_id: pytest.approx(15.0),
        POD_B.container_id: pytest.approx(5.0),
    }
    assert by_container(snap, 1, "idle") == {}  # nobody used GPU 1: its idle stays on it
    assert_gpu_invariants(snap)


def test_lost_gpu_pauses_its_energy_and_counts_the_gap_when_back() -> None:
    gpus, clock = ScriptedGpus(), Clock()
    gpus.push(gpu_reading(0, 0, sm=None), gpu_reading(1, 0, sm=None))
    gpus.push(gpu_reading(0, 30_000, sm=None), gpu_reading(1, 30_000, sm=None))
    gpus.push(gpu_reading(0, 60_000, sm=None), gpu_reading(1, 0, lost=True))
    gpus.push(gpu_reading(0, 90_000, sm=None), gpu_reading(1, 90_000, sm=None))
    monitor = make_monitor(gpus, [], clock)
    step(monitor, clock)
    step(monitor, clock)
    lost = step(monitor, clock)
    gpu1 = next(g for g in lost.gpus if g.index == 1)
    assert gpu1.lost and gpu1.uuid == "GPU-1"
    assert gpu_mode(lost, 1, "active") + gpu_mode(lost, 1, "idle") == pytest.approx(30.0)
    assert gpu_mode(lost, 0, "active") + gpu_mode(lost, 0, "idle") == pytest.approx(60.0)
    back = step(monitor, clock)
    assert not next(g for g in back.gpus if g.index == 1).lost
    assert gpu_mode(back, 1, "active") + gpu_mode(back, 1, "idle") == pytest.approx(90.0)


def test_energy_counter_reset_is_never_a_negative_delta() -> None:
    gpus, clock = ScriptedGpus(), Clock()
    for energy in (5_000_000, 5_030_000, 1_000, 31_000):  # driver reload after the 2nd
        gpus.push(gpu_reading(0, energy, sm=None))
    monitor = make_monitor(gpus, [], clock)
    totals = []
    for _ in range(4):
        snap = step(monitor, clock)
        totals.append(gpu_mode(snap, 0, "active") + gpu_mode(snap, 0, "idle"))
    assert totals == [0.0, pytest.approx(30.0), pytest.approx(30.0), pytest.approx(60.0)]


def test_gpu_without_energy_counter_integrates_power() -> None:
    gpus, clock = ScriptedGpus(), Clock()
    gpus.push(gpu_reading(0, None, power_w=100.0, sm=None))
    gpus.push(gpu_reading(0, None, power_w=140.0, sm=None))
    monitor = make_monitor(gpus, [], clock)
    step(monitor, clock, dt=2.0)
    snap = step(monitor, clock)
    # trapezoid: (100 + 140) / 2 W * 2 s = 240 J; 40 J of it idle at 20 W
    assert gpu_energy(snap, 0) == {
        (POWER_INTEGRAL, "active"): 200.0,
        (POWER_INTEGRAL, "idle"): 40.0,
    }


def test_nvml_failure_keeps_counters_and_drops_gauges() -> None:
    gpus, clock = ScriptedGpus(), Clock()
    gpus.push(gpu_reading(0, 0, sm=None))
    gpus.push(gpu_reading(0, 30_000, sm=None))
    gpus.script.append(SourceError("driver/library mismatch", "NVML stopped working"))
    monitor = make_monitor(gpus, [], clock)
    step(monitor, clock)
    step(monitor, clock)
    snap = step(monitor, clock)
    status = next(s for s in snap.sources if s.source == "nvml")
    assert (status.up, status.reason) == (False, "driver/library mismatch")
    assert snap.gpus[0].reading is None
    assert gpu_mode(snap, 0, "active") + gpu_mode(snap, 0, "idle") == pytest.approx(30.0)
    monitor.close()
    assert gpus.closed


# -- property: the per-GPU invariants hold whatever NVML reports --------------------------

PODS = list(H100_PODS)
INVISIBLE = [5104, 5999]


@dataclass(frozen=True)
class GpuDraw:
    """One GPU in one interval, as hypothesis drew it."""

    energy_mj: int  # what the GPU's counter moves by in the interval (also while lost)
    lost: bool
    processes: list[tuple[int, int | None]]
    sm: list[tuple[int, float]] | None


@st.composite
def interval(draw: st.DrawFn, n_gpus: int) -> list[GpuDraw]:
    gpus = []
    for _ in range(n_gpus):
        pids = draw(st.lists(st.sampled_from([p.pid for p in PODS] + INVISIBLE), unique=True))
        memory = draw(st.booleans())
        no_sm = draw(st.booleans())
        gpus.append(
            GpuDraw(
                energy_mj=draw(st.integers(0, 2_000_000)),
                lost=draw(st.integers(0, 9)) == 0,
                processes=[
                    (pid, draw(st.integers(1, 80)) * GiB if memory else None) for pid in pids
                ],
                sm=None
                if no_sm
                else [(pid, draw(st.floats(0, 100))) for pid in pids if draw(st.booleans())],
            )
        )
    return gpus


def holders_for(pods: Sequence[GpuPod]) -> GpuHolders:
    def holders(uuid: str) -> list[ContainerRef]:
        index = int(uuid.split("-")[1])
        return [ContainerRef(container_id=pods[index % len(pods)].container_id)]

    return holders


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_gpus=st.integers(1, 3),
    data=st.data(),
    policy=st.sampled_from(list(IdleAttribution)),
    learned=st.booleans(),
    ioctl_pid=st.sampled_from([0, POD_A.pid, POD_D.pid]),
)
def test_per_gpu_invariants_hold(
    n_gpus: int, data: st.DataObject, policy: IdleAttribution, learned: bool, ioctl_pid: int
) -> None:
    intervals = data.draw(st.lists(interval(n_gpus), min_size=2, max_size=5))
    gpus, clock = ScriptedGpus(), Clock()
    counters = [0] * n_gpus
    for gpu_list in intervals:
        readings = []
        for index, g in enumerate(gpu_list):
            counters[index] += g.energy_mj
            if g.lost:
                readings.append(gpu_reading(index, None, lost=True))
            else:
                readings.append(gpu_reading(index, counters[index], processes=g.processes, sm=g.sm))
        gpus.push(*readings)
    monitor = make_monitor(
        gpus,
        [task(p) for p in PODS],
        clock,
        idle=IdlePower() if learned else IDLE_20W,
        policy=policy,
        holders=holders_for(PODS),
        ioctls=lambda t: 2 if t.pid == ioctl_pid else 0,
    )
    previous: dict[tuple[int, str], float] = {}
    for _ in intervals:
        snap = step(monitor, clock)
        assert_gpu_invariants(snap)
        for gpu in snap.gpus:
            for mode in ("active", "idle"):
                now = gpu_mode(snap, gpu.index, mode)
                assert now >= previous.get((gpu.index, mode), 0.0)  # counters never go back
                previous[(gpu.index, mode)] = now
    # active + idle == measured: the counter's movement from the first to the last good
    # reading (energy drawn while the GPU was lost is counted when it is back)
    for gpu in snap.gpus:
        good = [i for i, gl in enumerate(intervals) if not gl[gpu.index].lost] or [0]
        measured_mj = sum(
            intervals[i][gpu.index].energy_mj for i in range(good[0] + 1, good[-1] + 1)
        )
        total = gpu_mode(snap, gpu.index, "active") + gpu_mode(snap, gpu.index, "idle")
        assert total == pytest.approx(measured_mj / 1000, rel=REL, abs=1e-6)
