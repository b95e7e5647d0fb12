"""A GPU's energy without its process list waits for the list that covers it
(exporter/accounting/gpu.py with exporter/accounting/pending.py).

Ground truth is the joules the scripted GPU counters advanced (integer millijoules); the list is
missing when the reading says so (GpuReading.processes_unread, set by the NVML and DRM backends:
tests/sources/gpu/nvml/test_source.py). Conservation is asserted exactly where the design
promises it: every release hands out math.fsum(held + current), which the split hands out to
the last bit (attribution.shares), and what is given up or held is the fsum of its intervals.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from exporter.accounting.attribution import attribute
from exporter.accounting.gpu import GpuAccounting
from exporter.model.config import IdleAttribution, IdlePower
from exporter.model.gpu_readings import GpuReading, GpuReadings
from exporter.model.identity import ContainerRef
from exporter.model.snapshot import UNATTRIBUTED_NO_PROCESS_LIST, Snapshot
from tests.sources.gpu.nvml.pods import POD_A, POD_B
from tests.sources.gpu.nvml.scripted import Clock, GiB, ScriptedGpus, gpu_reading, task
from tests.sources.gpu.nvml.test_monitor_gpu import (
    assert_gpu_invariants,
    by_container,
    gpu_mode,
    make_monitor,
    step,
)

MISSING = "reading compute processes failed"
NO_IDLE = IdlePower(per_zone_w=(("gpu", 0.0),))
PROCS = [(POD_A.pid, 2 * GiB), (POD_B.pid, 2 * GiB)]


def missing(reading: GpuReading) -> GpuReading:
    """The reading as NVML gives it when listing the GPU's processes failed."""
    return replace(reading, processes=(), process_utilization=None, processes_unread=MISSING)


def unattributed(snap: Snapshot, gpu: str) -> dict[str, float]:
    return {u.reason: u.joules for u in snap.unattributed if u.zone == "gpu" and u.gpu == gpu}


def pending(snap: Snapshot, gpu: str) -> float:
    return math.fsum(e.joules for e in snap.pending if e.zone == "gpu" and e.gpu == gpu)


def test_energy_without_the_list_is_split_by_the_list_that_covers_it() -> None:
    gpus, clock = ScriptedGpus(), Clock()
    gpus.push(gpu_reading(0, 0, processes=PROCS, sm=[]))
    # 40 J, 20 J of it active (20 W idle), while the process list cannot be read
    gpus.push(missing(gpu_reading(0, 40_000)))
    # 40 J more; NVML's SM samples since the last good read cover both intervals: A 3, B 1
    gpus.push(gpu_reading(0, 80_000, processes=PROCS, sm=[(POD_A.pid, 60.0), (POD_B.pid, 20.0)]))
    monitor = make_monitor(gpus, [task(POD_A), task(POD_B)], clock)
    step(monitor, clock)
    held = step(monitor, clock)
    assert by_container(held, 0, "active") == {}  # not to system_processes, not to anyone
    assert pending(held, "0") == 20.0
    assert unattributed(held, "0") == {}
    assert dict(held.gpus[0].attribution) == {}  # a held interval is split later
    assert_gpu_invariants(held)
    snap = step(monitor, clock)
    assert by_container(snap, 0, "active") == {
        POD_A.container_id: 30.0,
        POD_B.container_id: 10.0,
    }
    assert gpu_mode(snap, 0, "active") == 40.0
    assert pending(snap, "0") == 0.0
    assert dict(snap.gpus[0].attribution) == {"sm": 1}
    assert_gpu_invariants(snap)


def test_past_the_bound_it_is_given_up_per_gpu_never_to_a_pseudo_container() -> None:
    gpus, clock = ScriptedGpus(), Clock()
    gpus.push(gpu_reading(0, 0, processes=PROCS, sm=[]), gpu_reading(1, 0, processes=PROCS))
    for i in range(1, 6):  # GPU 0's list fails 5 times in a row; GPU 1 reads fine
        gpus.push(
            missing(gpu_reading(0, 30_000 * i)),
            gpu_reading(1, 30_000 * i, processes=PROCS, sm=[(POD_B.pid, 50.0)]),
        )
    monitor = make_monitor(gpus, [task(POD_A), task(POD_B)], clock)
    snaps = [step(monitor, clock) for _ in range(6)]
    # 10 J active an interval; 3 intervals held, the 2 before them given up with their reason
    assert pending(snaps[-1], "0") == 30.0
    assert unattributed(snaps[-1], "0") == {UNATTRIBUTED_NO_PROCESS_LIST: 20.0}
    assert unattributed(snaps[-1], "1") == {}
    assert by_container(snaps[-1], 0, "active") == {}
    assert by_container(snaps[-1], 1, "active") == {POD_B.container_id: 50.0}
    for snap in snaps:
        assert_gpu_invariants(snap)


def test_a_gpu_that_gives_nothing_ages_what_it_holds() -> None:
    """The bound is in intervals: a GPU lost after a missing list gives its held energy up
    after 3 intervals instead of holding it for as long as it is gone."""
    gpus, clock = ScriptedGpus(), Clock()
    gpus.push(gpu_reading(0, 0, processes=PROCS, sm=[]))
    gpus.push(missing(gpu_reading(0, 30_000)))
    for _ in range(3):
        gpus.push(gpu_reading(0, None, lost=True))
    monitor = make_monitor(gpus, [task(POD_A)], clock)
    snaps = [step(monitor, clock) for _ in range(5)]
    assert [pending(s, "0") for s in snaps] == [0.0, 10.0, 10.0, 10.0, 0.0]
    assert unattributed(snaps[-1], "0") == {UNATTRIBUTED_NO_PROCESS_LIST: 10.0}


def test_idle_under_the_activity_policy_stays_on_the_node_while_the_list_is_missing() -> None:
    gpus, clock = ScriptedGpus(), Clock()
    gpus.push(gpu_reading(0, 0, processes=PROCS, sm=[]))
    gpus.push(missing(gpu_reading(0, 40_000)))
    monitor = make_monitor(gpus, [task(POD_A)], clock, policy=IdleAttribution.ACTIVITY)
    step(monitor, clock)
    snap = step(monitor, clock)
    assert by_container(snap, 0, "idle") == {}  # no weights to split it by: not a guess
    assert pending(snap, "0") == 20.0
    assert_gpu_invariants(snap)


# -- exact conservation under any sequence -----------------------------------------------------

OWNER = {task(POD_A).key: ContainerRef("a" * 64, POD_A.pod_uid), task(POD_B).key: ContainerRef(
    "b" * 64, POD_B.pod_uid)}  # fmt: skip

# per interval: (energy step in units of 125 mJ, list read?, SM % of A, SM % of B)
Interval = tuple[int, bool, int, int]
intervals = st.lists(
    st.tuples(st.integers(0, 4000), st.booleans(), st.integers(0, 100), st.integers(0, 100)),
    max_size=20,
)


@settings(deadline=None, max_examples=150)
@given(intervals, st.integers(0, 4))
@example([(1, False, 1, 1), (3, True, 7, 3)], 3)
@example([(7, False, 0, 0)] * 6 + [(1, True, 33, 67)], 3)  # given up, then nobody on the list
@example([(4000, False, 1, 0), (0, True, 0, 0), (13, True, 99, 1)], 0)
def test_every_joule_is_split_held_or_given_up_exactly(script: list[Interval], hold: int) -> None:
    """Against a model of the bound: every release is fsum(held + current) to the last bit,
    its split sums to it exactly, and what is held or given up is the fsum of its intervals."""
    acc = GpuAccounting(idle_power=NO_IDLE, idle_policy=IdleAttribution.NONE, hold_intervals=hold)
    tasks = [task(POD_A), task(POD_B)]
    counter = 0
    acc.interval(_readings(gpu_reading(0, 0, processes=PROCS, sm=[])), 0.0, tasks=tasks,
                 ioctl_deltas={}, owner=OWNER)  # fmt: skip
    held: list[float] = []  # the model: active joules per held interval, oldest first
    given_up: list[float] = []
    for i, (units, listed, sm_a, sm_b) in enumerate(script, start=1):
        counter += 125 * units
        joules = units * 0.125  # exact in binary: the ground truth of this interval
        sm = [(p, float(s)) for p, s in ((POD_A.pid, sm_a), (POD_B.pid, sm_b)) if s]
        reading = gpu_reading(0, counter, processes=PROCS, sm=sm)
        if not listed:
            reading = missing(reading)
        zones = acc.interval(_readings(reading), float(i), tasks=tasks, ioctl_deltas={},
                             owner=OWNER).zones  # fmt: skip
        active = [z.active_j for z in zones]
        if listed:
            assert active == [math.fsum([*held, joules])]
            held = []
            split = attribute(zones, OWNER)
            parts = [j for energy in split.containers.values() for j in energy.values()]
            assert math.fsum(parts) == active[0]
        else:
            assert active == [0.0]
            held.append(joules)
            while len(held) > hold:
                given_up.append(held.pop(0))
        assert {(e.zone, e.gpu, e.mode): e.joules for e in acc.pending()} == (
            {("gpu", "0", "active"): math.fsum(held)} if any(held) else {}
        )
        got = acc.unattributed()
        want = math.fsum(given_up)
        assert got.get((("gpu", "0", "active"), UNATTRIBUTED_NO_PROCESS_LIST), 0.0) == want


def _readings(*gpus: GpuReading) -> GpuReadings:
    return GpuReadings("550.54.15", "12.550.54.15", "12.4", tuple(gpus))


@pytest.mark.parametrize("hold", [0, 1])
def test_a_small_bound_gives_up_at_once_or_after_one(hold: int) -> None:
    acc = GpuAccounting(idle_power=NO_IDLE, idle_policy=IdleAttribution.NONE, hold_intervals=hold)
    tasks = [task(POD_A)]
    for i, reading in enumerate(
        [
            gpu_reading(0, 0, processes=PROCS, sm=[]),
            missing(gpu_reading(0, 1_000)),
            missing(gpu_reading(0, 3_000)),
        ]
    ):
        acc.interval(_readings(reading), float(i), tasks=tasks, ioctl_deltas={}, owner=OWNER)
    given = acc.unattributed()[(("gpu", "0", "active"), UNATTRIBUTED_NO_PROCESS_LIST)]
    assert given == (3.0 if hold == 0 else 1.0)
