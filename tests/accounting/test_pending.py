"""Energy of an interval without its activity reading waits for it (exporter/accounting/pending.py).

The pure part on its own (exact conservation per release, the bound, the reasons), then the
monitor with an activity source that fails or comes late: the energy follows the CPU time that
the next reading reports, and what stays unattributed is on the node's own counter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from exporter.accounting.attribution import ACTIVE, IDLE, ZoneEnergy, attribute
from exporter.accounting.deadline import TIMEOUT
from exporter.accounting.pending import FAILED, LATE, PendingEnergy, gap_reason
from exporter.model.config import IdleAttribution
from exporter.model.identity import SYSTEM, ContainerRef
from exporter.model.readings import SourceStatus, TaskKey
from exporter.model.snapshot import Snapshot
from tests.accounting.test_monitor import CGROUPS, Clock, FakeHost, make_monitor, task
from tests.support.invariants import check_monotonic, check_snapshot

A: TaskKey = (1, 1)
B: TaskKey = (2, 1)


def zone(active: float, idle: float = 0.0, *, weights: dict[TaskKey, float] | None = None,
         activity_idle: bool = False, name: str = "package") -> ZoneEnergy:  # fmt: skip
    w = {} if weights is None else weights
    return ZoneEnergy(name, "", active, idle, w, w if activity_idle else None)


def test_held_energy_is_released_with_the_reading_that_covers_it() -> None:
    pending = PendingEnergy(3)
    out = pending.settle([zone(10.0)], gap=LATE, weights={}, idle_weights=None)
    assert [z.active_j for z in out] == [0.0]  # nothing split without activity
    assert pending.pending() == {("package", "", ACTIVE): 10.0}
    out = pending.settle(
        [zone(5.0, weights={A: 3.0, B: 1.0})], gap="", weights={}, idle_weights=None
    )
    assert [z.active_j for z in out] == [15.0]
    assert out[0].weights == {A: 3.0, B: 1.0}  # split by the deltas covering both intervals
    assert pending.pending() == {}
    assert pending.unattributed() == {}


def test_past_the_bound_the_oldest_interval_goes_to_unattributed_with_its_reason() -> None:
    pending = PendingEnergy(2)
    pending.settle([zone(1.0)], gap=FAILED, weights={}, idle_weights=None)
    pending.settle([zone(2.0)], gap=LATE, weights={}, idle_weights=None)
    pending.settle([zone(4.0)], gap=LATE, weights={}, idle_weights=None)
    assert pending.unattributed() == {(("package", "", ACTIVE), FAILED): 1.0}
    assert pending.pending() == {("package", "", ACTIVE): 6.0}
    pending.settle([zone(8.0)], gap=LATE, weights={}, idle_weights=None)
    assert pending.unattributed() == {
        (("package", "", ACTIVE), FAILED): 1.0,
        (("package", "", ACTIVE), LATE): 2.0,
    }
    out = pending.settle([], gap="", weights={A: 1.0}, idle_weights=None)
    # the zone kind has no energy now but held energy comes back with the current deltas
    assert [(z.zone, z.active_j, dict(z.weights)) for z in out] == [("package", 12.0, {A: 1.0})]


def test_bound_zero_gives_up_at_once() -> None:
    pending = PendingEnergy(0)
    pending.settle([zone(3.0)], gap=LATE, weights={}, idle_weights=None)
    assert pending.pending() == {}
    assert pending.unattributed() == {(("package", "", ACTIVE), LATE): 3.0}


def test_idle_split_by_activity_waits_too_and_fixed_idle_does_not() -> None:
    pending = PendingEnergy(3)
    out = pending.settle(
        [zone(2.0, 7.0, activity_idle=True), zone(1.0, 9.0, name="dram")],
        gap=LATE,
        weights={},
        idle_weights=None,
    )
    assert [(z.active_j, z.idle_j) for z in out] == [(0.0, 0.0), (0.0, 9.0)]
    assert pending.pending() == {
        ("package", "", ACTIVE): 2.0,
        ("package", "", IDLE): 7.0,
        ("dram", "", ACTIVE): 1.0,
    }


@dataclass(frozen=True)
class Interval:
    gap: str
    active: float
    idle: float


intervals = st.lists(
    st.builds(
        Interval,
        gap=st.sampled_from(["", "", LATE, FAILED]),
        active=st.floats(0.0, 1e4) | st.sampled_from([0.1, 1e-310, 5e-324, 1e15]),
        idle=st.floats(0.0, 1e3),
    ),
    max_size=30,
)


@settings(deadline=None, max_examples=200)
@given(steps=intervals, bound=st.integers(0, 4))
# a subnormal beside a large amount: a sum done with + instead of fsum loses it
@example(
    steps=[Interval(LATE, 1e15, 0.0), Interval(LATE, 5e-324, 0.0), Interval("", 0.1, 0.0)],
    bound=3,
)
@example(steps=[Interval(FAILED, 1.0, 1.0)] * 6 + [Interval("", 0.0, 0.0)], bound=2)
def test_every_joule_is_released_given_up_or_held_exactly(
    steps: list[Interval], bound: int
) -> None:
    """Per release, math.fsum of the parts attribute() hands out equals math.fsum of the
    amounts held plus the current one, and what is held or given up is math.fsum of its
    intervals: no rounding beyond the one of each such sum."""
    pending = PendingEnergy(bound)
    held: list[Interval] = []  # the model: intervals waiting, oldest first
    given_up: dict[str, list[float]] = {}
    weights = {A: 2.0, B: 1.0}
    for s in steps:
        z = ZoneEnergy("package", "", s.active, s.idle, weights, weights)
        out = pending.settle([z], gap=s.gap, weights=weights, idle_weights=weights)
        if s.gap:
            held.append(s)
            while len(held) > bound:
                oldest = held.pop(0)
                if oldest.active > 0:
                    given_up.setdefault(oldest.gap, []).append(oldest.active)
            assert all(o.active_j == 0.0 and o.idle_j == 0.0 for o in out)
        else:
            [released] = out
            assert released.active_j == math.fsum([*(h.active for h in held), s.active])
            assert released.idle_j == math.fsum([*(h.idle for h in held), s.idle])
            split = attribute([released], {A: SYSTEM, B: ContainerRef("b", "")})
            for mode, total in ((ACTIVE, released.active_j), (IDLE, released.idle_j)):
                parts = [j for c in split.containers.values() for k, j in c.items() if k[2] == mode]
                assert math.fsum(parts) == total
            held = []
        assert pending.pending().get(("package", "", ACTIVE), 0.0) == math.fsum(
            h.active for h in held
        )
        assert {r: j for (k, r), j in pending.unattributed().items() if k[2] == ACTIVE} == {
            r: math.fsum(v) for r, v in given_up.items()
        }


# -- the monitor -------------------------------------------------------------------------------


def test_the_gap_reason_from_the_round_statuses() -> None:
    late = SourceStatus("procfs", False, TIMEOUT, "no answer within 1s")
    failed = SourceStatus("procfs", False, "read error", "injected")
    power_late = SourceStatus("rapl", False, TIMEOUT, "no answer within 1s")
    assert gap_reason(True, [late], "procfs") == ""
    assert gap_reason(False, [late], "procfs") == LATE
    assert gap_reason(False, [failed], "procfs") == FAILED
    # another source's timeout says nothing about why the activity read gave nothing
    assert gap_reason(False, [failed, power_late], "procfs") == FAILED


def advance(host: FakeHost, clock: Clock, work: dict[int, float], joules: float) -> None:
    """5 s: each pid gets its CPU seconds, the package its joules."""
    clock.now += 5.0
    for pid, extra in work.items():
        old = host.tasks[pid]
        host.tasks[pid] = task(pid, old.key[1], old.cgroup, old.cpu_seconds + extra)
    host.busy += sum(work.values())
    host.idle += 20.0 - sum(work.values())
    host.energy["intel-rapl:0"] += round(joules * 1e6)


def package_active(snap: Snapshot) -> dict[str, float]:
    return {
        c.container or c.container_id: e.joules
        for c in snap.containers
        for e in c.energy
        if e.zone == "package" and e.mode == ACTIVE
    }


def node_package_active(snap: Snapshot) -> float:
    return math.fsum(z.active_j for z in snap.node_energy if z.zone == "package")


def test_a_late_read_bills_the_energy_to_the_work_it_paid_for() -> None:
    host = FakeHost()
    clock = Clock()
    host.tasks = {1: task(1, 1, CGROUPS[2], 0.0), 2: task(2, 1, CGROUPS[0], 0.0)}
    monitor = make_monitor(host, clock, idle_w=None)
    monitor.step()
    snaps = []
    for i in range(6):
        host.tasks_failing = i in (1, 2)  # two reads in a row give nothing
        advance(host, clock, {1: 3.0, 2: 1.0}, 100.0)
        snaps.append(monitor.step())
        check_snapshot(snaps[-1])
        if len(snaps) > 1:
            check_monotonic(snaps[-2], snaps[-1])
    held = {(e.zone, e.mode): e.joules for e in snaps[2].pending}
    assert held[("package", ACTIVE)] == pytest.approx(2 * node_package_active(snaps[0]))
    last = snaps[-1]
    active = package_active(last)
    node = node_package_active(last)
    assert active["a" * 64] == pytest.approx(0.75 * node)  # its CPU share, gaps included
    assert active["system_processes"] == pytest.approx(0.25 * node)
    assert last.pending == () and last.unattributed == ()


def test_a_read_that_never_comes_back_ends_on_the_unattributed_counter() -> None:
    host = FakeHost()
    clock = Clock()
    host.tasks = {1: task(1, 1, CGROUPS[2], 0.0)}
    monitor = make_monitor(host, clock, idle_w=None)
    monitor.step()
    host.tasks_failing = True
    for _ in range(5):
        advance(host, clock, {1: 4.0}, 100.0)
        snap = monitor.step()
        check_snapshot(snap)
    given_up = {(u.zone, u.mode, u.reason): u.joules for u in snap.unattributed}
    held = {(e.zone, e.mode): e.joules for e in snap.pending}
    node = node_package_active(snap)
    # 5 intervals without a reading: 3 held (the bound), 2 given up, none on a workload
    assert given_up[("package", ACTIVE, FAILED)] == pytest.approx(0.4 * node)
    assert held[("package", ACTIVE)] == pytest.approx(0.6 * node)
    assert "system_processes" not in package_active(snap)


def test_conservation_with_idle_split_by_activity() -> None:
    host = FakeHost()
    clock = Clock()
    host.tasks = {1: task(1, 1, CGROUPS[2], 0.0), 2: task(2, 1, CGROUPS[4], 0.0)}
    monitor = make_monitor(host, clock, idle=IdleAttribution.ACTIVITY, idle_w=4.0)
    monitor.step()
    for i in range(8):
        host.tasks_failing = i % 3 == 1 or i in (5, 6)
        advance(host, clock, {1: 1.0, 2: 3.0}, 100.0)
        snap = monitor.step()
        check_snapshot(snap)
    idle = {
        c.container_id: e.joules
        for c in snap.containers
        for e in c.energy
        if e.mode == IDLE and e.zone == "package"
    }
    assert idle["a" * 64] / idle["e" * 64] == pytest.approx(1 / 3)
    assert not any(c.container == "system_processes" and c.energy for c in snap.containers)
