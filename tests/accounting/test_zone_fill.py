"""The per-zone fallback: the estimate's dram beside a measured source without a memory zone.

A node whose RAPL has package but no DRAM domain (most AMD CPUs) gets source="estimated" dram
from installed memory (Boavizta's memory model), split among workloads like RAPL's dram; a node
whose RAPL has dram gets none; a dram zone that appears later ends the estimate. The expected
watts are boaviztapi 2.5.0's for an m5.xlarge's 16 GB (tests/sources/power/test_estimate.py):
1.666 W at 0 % load, 2.023 W at 50 %.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.accounting.sourceround import SourceRound
from exporter.accounting.zones import ZoneFill, filled_kinds, workload_zones
from exporter.app.registry import REGISTRY
from exporter.model.config import IdleAttribution, IdlePower
from exporter.model.readings import EnergyReading
from exporter.model.snapshot import EstimateInfo, Snapshot
from exporter.sources.power.estimate import ESTIMATED, EstimateSource, NodeModels
from tests.accounting.test_monitor import CGROUPS, MAX_RANGE, Activity, Clock, FakeHost, Rapl, task
from tests.sources.power.test_estimate import node_tree
from tests.support.invariants import check_monotonic, check_snapshot
from tests.support.monitor import monitor_settings

PACKAGE, DRAM = "intel-rapl:0", "intel-rapl:0:0"  # FakeHost's devices: package and dram


class Counting:
    """A power source that counts its reads."""

    def __init__(self, inner: EstimateSource) -> None:
        self.inner = inner
        self.name = inner.name
        self.reads = 0

    def read(self) -> Sequence[EnergyReading]:
        self.reads += 1
        return self.inner.read()

    def estimate_info(self) -> EstimateInfo | None:
        return self.inner.estimate_info()


def node(tmp_path: Path, host: FakeHost, clock: Clock) -> tuple[Monitor, Counting]:
    """The monitor as serve builds it (the registry's preferences, fallbacks and fills, the
    learned idle baseline: no --power.idle), RAPL from FakeHost and the real estimate."""
    estimate = Counting(
        EstimateSource(host.cpu_times, NodeModels(node_tree(tmp_path, "m5.xlarge")), clock)
    )
    monitor = Monitor(
        MonitorParts(cpu=host, activity=Activity(host), power=[Rapl(host), estimate]),
        monitor_settings(idle_power=IdlePower(), idle_policy=IdleAttribution.NONE),
        clock=clock,
        wall_clock=clock,
    )
    return monitor, estimate


def busy_interval(host: FakeHost, clock: Clock, joules: float) -> None:
    """10 s at half load (20 of 40 CPU-seconds), task 1 doing all the work."""
    clock.now += 10
    host.busy += 20.0
    host.idle += 20.0
    for device in host.energy:
        host.energy[device] += round(joules * 1e6)
    t = host.tasks[1]
    host.tasks[1] = task(1, 1, CGROUPS[2], t.cpu_seconds + 20.0)


def zones(snap: Snapshot) -> dict[tuple[str, str], tuple[float, float]]:
    return {(z.zone, z.source): (z.active_j, z.idle_j) for z in snap.node_energy}


def workload_total(snap: Snapshot, zone: str) -> float:
    return sum(
        e.joules for c in snap.containers for e in c.energy if e.zone == zone and e.mode == "active"
    )


def test_package_only_rapl_gets_estimated_dram(tmp_path: Path) -> None:
    host = FakeHost(energy={PACKAGE: 10**9})  # RAPL with no DRAM domain
    clock = Clock()
    host.tasks = {1: task(1, 1, CGROUPS[2], 0.0)}
    monitor, _ = node(tmp_path, host, clock)
    monitor.step()
    busy_interval(host, clock, 100.0)
    snap = monitor.step()
    got = zones(snap)
    assert set(got) == {("package", "rapl"), ("dram", ESTIMATED)}  # no estimated package
    active, idle = got["dram", ESTIMATED]
    assert idle == pytest.approx(1.666 * 10, rel=1e-3)
    assert active + idle == pytest.approx(2.023 * 10, rel=1e-3)
    assert sum(got["package", "rapl"]) == pytest.approx(100.0)
    assert snap.attributed_zones == ("package", "dram")  # split like RAPL's dram
    assert workload_total(snap, "dram") == pytest.approx(active, rel=1e-12)
    up = {s.source: s.up for s in snap.sources}
    assert up["rapl"] and up[ESTIMATED]  # it is counted, so its health shows
    assert snap.estimate is not None and snap.estimate.instance_type == "m5.xlarge"
    check_snapshot(snap)


def test_rapl_with_dram_gets_no_estimate(tmp_path: Path) -> None:
    host = FakeHost()  # package and dram
    clock = Clock()
    host.tasks = {1: task(1, 1, CGROUPS[2], 0.0)}
    monitor, estimate = node(tmp_path, host, clock)
    for _ in range(3):
        snap = monitor.step()
        busy_interval(host, clock, 50.0)
    assert set(zones(snap)) == {("package", "rapl"), ("dram", "rapl")}
    assert ESTIMATED not in {s.source for s in snap.sources}
    assert snap.estimate is None
    assert estimate.reads == 1  # read in the first round only, before RAPL was seen
    check_snapshot(snap)


def test_dram_appearing_later_ends_the_estimate(tmp_path: Path) -> None:
    host = FakeHost(energy={PACKAGE: 10**9})
    clock = Clock()
    host.tasks = {1: task(1, 1, CGROUPS[2], 0.0)}
    monitor, estimate = node(tmp_path, host, clock)
    monitor.step()
    busy_interval(host, clock, 100.0)
    before = monitor.step()
    host.energy[DRAM] = 10**9  # the DRAM domain shows up (a driver loaded late)
    busy_interval(host, clock, 100.0)
    reads = estimate.reads
    snaps = [monitor.step()]
    busy_interval(host, clock, 100.0)
    snaps.append(monitor.step())
    assert estimate.reads == reads + 1  # the round that saw RAPL's dram was the last
    estimated = [zones(s)["dram", ESTIMATED] for s in (before, *snaps)]
    assert estimated[0] == estimated[1] == estimated[2]  # counted nothing more
    assert sum(zones(snaps[-1])["dram", "rapl"]) == pytest.approx(100.0)  # its first delta
    assert ESTIMATED not in {s.source for s in snaps[-1].sources}
    for snap in (before, *snaps):
        check_snapshot(snap)
    check_monotonic(before, snaps[0])
    check_monotonic(snaps[0], snaps[1])


# -- the zone choice, for any history ------------------------------------------------------

KINDS = ("package", "core", "uncore", "dram", "psys")
MEASURED_ROUND = st.dictionaries(st.sampled_from(KINDS), st.booleans(), max_size=5)  # kind: fault


class Scripted:
    """A measured source giving, each round, the kinds its script says (some faulted)."""

    name = "rapl"

    def __init__(self, rounds: list[dict[str, bool]]) -> None:
        self.rounds = rounds
        self.at = 0

    def read(self) -> Sequence[EnergyReading]:
        kinds = self.rounds[self.at]
        self.at += 1
        return [
            EnergyReading(k, f"d-{k}", "rapl", 10**6, MAX_RANGE, fault="unreadable" if f else "")
            for k, f in sorted(kinds.items())
        ]


class Model:
    name = ESTIMATED

    def read(self) -> Sequence[EnergyReading]:
        return [EnergyReading(k, "", ESTIMATED, 10**6, idle_w=1.0) for k in ("package", "dram")]


@settings(deadline=None, max_examples=150)
@given(rounds=st.lists(MEASURED_ROUND, min_size=1, max_size=8))
def test_a_kind_is_never_both_measured_and_estimated(rounds: list[dict[str, bool]]) -> None:
    """Over any history of what the measured source gives: the estimate counts everything
    until a measured zone reads; after that only dram, and only while no measured dram has
    read; a dram that has read once ends the estimate for good."""
    host = FakeHost()
    rapl = Scripted(rounds)
    reader = SourceRound(
        cpu=host,
        activity=Activity(host),
        power=[rapl, Model()],
        gpus=[],
        fallback=REGISTRY.fallback_sources,
        fills=REGISTRY.zone_fills,
    )
    seen: set[str] = set()  # kinds the measured source has read
    for kinds in rounds:
        got = reader.read()
        seen |= {k for k, fault in kinds.items() if not fault}
        estimated = {r.zone for r, _ in got.readings if r.source == ESTIMATED}
        if not seen:
            assert estimated == {"package", "dram"}
        else:
            assert estimated == ({"dram"} - seen)
        assert (ESTIMATED in {s.source for s in got.statuses}) == bool(estimated)
        measured = {r.zone for r, _ in got.readings if r.source == "rapl" and not r.fault}
        assert not estimated & measured


ZONE_IDS = st.sets(
    st.tuples(st.sampled_from(KINDS), st.sampled_from(("", "d0", "d1")), st.just("rapl"))
    | st.tuples(st.sampled_from(("package", "dram")), st.just(""), st.just(ESTIMATED))
    | st.tuples(st.sampled_from(("board", "dram")), st.just("s0"), st.just("hwmon")),
    max_size=10,
)


@settings(deadline=None, max_examples=300)
@given(zone_ids=ZONE_IDS)
def test_fills_only_widen_the_deciding_sources_own_group(
    zone_ids: set[tuple[str, str, str]],
) -> None:
    """With fills, the kinds split among workloads are the choice without them plus, at most,
    the filled kinds the deciding source's chosen group names (RAPL's (package, dram); psys,
    which holds memory already, takes none; nor does hwmon's every-sensor group, whose
    sensors may be whole-board rails)."""
    prefs = REGISTRY.zone_preferences
    without = workload_zones((), zone_ids, prefs)
    with_fills = workload_zones((), zone_ids, prefs, REGISTRY.zone_fills)
    filled = {z for z, _d, s in zone_ids if s == ESTIMATED and z == "dram"}
    assert set(without) <= set(with_fills) <= set(without) | filled
    assert len(set(with_fills)) == len(with_fills)
    if without == ("psys",):
        assert with_fills == ("psys",)
    if without and "package" in without and filled:
        assert "dram" in with_fills
    hwmon_decides = not any(s == "rapl" for _z, _d, s in zone_ids) and any(
        s == "hwmon" for _z, _d, s in zone_ids
    )
    if hwmon_decides:  # every sensor is split, the estimated memory is not
        assert with_fills == without
    if not without:  # nothing measured decides (the estimate alone, or nothing): as before
        assert with_fills == ()


def test_filled_kinds_is_per_kind() -> None:
    assert filled_kinds(("dram",), ()) == {"dram"}
    assert filled_kinds(("dram",), ("package", "core")) == {"dram"}
    assert filled_kinds(("dram",), ("dram",)) == frozenset()
    assert REGISTRY.zone_fills == (ZoneFill(ESTIMATED, ESTIMATED, ("dram",)),)
