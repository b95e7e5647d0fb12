"""Two scrapes -> what one screen of `wattprobe top` shows: average power over the time between.

Power is the increase of the energy counters divided by the increase of
wattprobe_last_interval_timestamp_seconds, so it is exact for the intervals in between (an
exporter without that metric falls back to the reader's own clock).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from exporter.app.registry import REGISTRY
from exporter.app.top.scrape import GpuState, Scrape, SourceState, Totals, WorkloadId
from exporter.sources.power.estimate import ESTIMATED
from exporter.sources.power.rapl import WORKLOAD_ZONES as RAPL_WORKLOAD_ZONES

# core and uncore are inside package; psys covers the whole SoC: counting them next to package
# would count the same joules twice
CONTAINED_IN_PACKAGE = ("core", "uncore")
WHOLE_SOC = "psys"


class SortKey(StrEnum):
    CPU = "cpu"  # CPU power, highest first
    GPU = "gpu"  # GPU power, highest first
    IDLE = "idle"  # idle power billed to it, highest first
    NAME = "name"  # namespace and name, A to Z


class View(StrEnum):
    PODS = "pods"
    CONTAINERS = "containers"


@dataclass(frozen=True, slots=True)
class ZonePower:
    """One zone kind of one source, summed over its devices (both sockets' package)."""

    zone: str
    source: str  # rapl, hwmon, estimated
    devices: int
    watts: float
    idle_watts: float

    @property
    def estimated(self) -> bool:
        return self.source == ESTIMATED


@dataclass(frozen=True, slots=True)
class Row:
    workload: WorkloadId
    name: str
    namespace: str
    cpu_w: float  # active power in the CPU zones
    gpu_w: float  # active GPU power, all its GPUs
    cpu_cores: float  # CPU seconds per second
    gpus: tuple[str, ...]  # GPU indices it drew energy from (active or billed idle)
    cpu_idle_w: float = 0.0  # idle power billed to it in the CPU zones (--attribution.idle)
    gpu_idle_w: float = 0.0  # idle power of the GPUs it holds billed to it

    @property
    def idle_w(self) -> float:
        return self.cpu_idle_w + self.gpu_idle_w


@dataclass(frozen=True)
class Frame:
    wall_time: float | None  # unix time of the later scrape's interval end
    seconds: float  # time between the two scrapes
    cpu_usage: float | None
    zones: tuple[ZonePower, ...]
    gpus: tuple[GpuState, ...]
    pods: tuple[Row, ...]
    containers: tuple[Row, ...]
    cpu_zones: tuple[str, ...]  # the zone kinds that make a workload's CPU power
    sources: tuple[SourceState, ...]

    def rows(self, view: View) -> tuple[Row, ...]:
        return self.pods if view is View.PODS else self.containers


def cpu_zone_kinds(attributed: Mapping[str, float]) -> tuple[str, ...]:
    """The zone kinds whose workload energy adds up to "CPU power" without counting joules twice.

    attributed: joules handed to workloads per zone kind. RAPL's package and dram do not
    overlap, so they add up. Other sensors may overlap (a board total and its rails), so then
    only the kind with the most energy counts.
    """
    found = set(attributed)
    if found & set(RAPL_WORKLOAD_ZONES):
        return tuple(sorted(found - set(CONTAINED_IN_PACKAGE) - {WHOLE_SOC}))
    if not found:
        return ()
    return (max(sorted(found), key=lambda z: attributed[z]),)


def _elapsed(prev: Scrape, cur: Scrape) -> float:
    if prev.at is not None and cur.at is not None:
        return cur.at - prev.at
    return cur.received - prev.received


def frame_between(prev: Scrape, cur: Scrape) -> Frame | None:
    """None when no interval ended between the two, or when the exporter restarted."""
    seconds = _elapsed(prev, cur)
    if not seconds > 0 or cur.intervals <= prev.intervals:
        return None
    attributed: dict[str, float] = {}
    for totals in cur.containers.values():
        for amounts in (totals.zones, totals.idle_zones):
            for zone, joules in amounts.items():
                attributed[zone] = attributed.get(zone, 0.0) + joules
    cpu_zones = cpu_zone_kinds(attributed)
    return Frame(
        wall_time=cur.at,
        seconds=seconds,
        cpu_usage=cur.cpu_usage,
        zones=_zones(prev.node, cur.node, seconds),
        gpus=cur.gpus,
        pods=_rows(prev.pods, cur.pods, seconds, cpu_zones, pods=True),
        containers=_rows(prev.containers, cur.containers, seconds, cpu_zones, pods=False),
        cpu_zones=cpu_zones,
        sources=cur.sources,
    )


def _increase(before: float | None, after: float) -> float:
    # counters start at 0 when a series appears; a series that went down was reset: no increase
    return max(after - (before or 0.0), 0.0)


def _zones(
    prev: Mapping[tuple[str, str, str], tuple[float, float]],
    cur: Mapping[tuple[str, str, str], tuple[float, float]],
    seconds: float,
) -> tuple[ZonePower, ...]:
    grouped: dict[tuple[str, str], list[float]] = {}
    for (zone, device, source), (active, idle) in cur.items():
        old_active, old_idle = prev.get((zone, device, source), (0.0, 0.0))
        acc = grouped.setdefault((zone, source), [0.0, 0.0, 0.0])
        acc[0] += _increase(old_active, active) + _increase(old_idle, idle)
        acc[1] += _increase(old_idle, idle)
        acc[2] += 1
    return tuple(
        ZonePower(zone, source, int(n), joules / seconds, idle_j / seconds)
        for (zone, source), (joules, idle_j, n) in sorted(grouped.items(), key=_zone_order)
    )


# power sources in registry order (rapl, hwmon, estimated); others after them
_SOURCE_ORDER = REGISTRY.source_order
_ZONE_ORDER = {"psys": 0, "package": 1, "core": 2, "uncore": 3, "dram": 4}


def _zone_order(item: tuple[tuple[str, str], list[float]]) -> tuple[int, int, str]:
    (zone, source), _ = item
    return _SOURCE_ORDER.get(source, len(_SOURCE_ORDER)), _ZONE_ORDER.get(zone, 9), zone


def display_name(w: WorkloadId, *, pod_row: bool) -> str:
    """Names when the exporter knows them, else short IDs (as `crictl ps` shows them)."""
    if not w.pod_uid:
        return w.container or f"container {w.container_id[:12]}"
    pod = w.pod or f"pod {w.pod_uid[:8]}"
    if pod_row:
        return pod
    return f"{pod}/{w.container or w.container_id[:12]}"


def _rows(
    prev: Mapping[WorkloadId, Totals],
    cur: Mapping[WorkloadId, Totals],
    seconds: float,
    cpu_zones: Sequence[str],
    *,
    pods: bool,
) -> tuple[Row, ...]:
    rows = []
    for workload, totals in cur.items():
        before = prev.get(workload, Totals())
        cpu_j = _zone_increase(before.zones, totals.zones, cpu_zones)
        cpu_idle_j = _zone_increase(before.idle_zones, totals.idle_zones, cpu_zones)
        gpu_j = {g: _increase(before.gpus.get(g), j) for g, j in totals.gpus.items()}
        gpu_idle_j = {g: _increase(before.idle_gpus.get(g), j) for g, j in totals.idle_gpus.items()}
        held = {g for part in (gpu_j, gpu_idle_j) for g, j in part.items() if j > 0}
        rows.append(
            Row(
                workload=workload,
                name=display_name(workload, pod_row=pods),
                namespace=workload.namespace,
                cpu_w=cpu_j / seconds,
                gpu_w=math.fsum(gpu_j.values()) / seconds,
                cpu_cores=_increase(before.cpu_seconds, totals.cpu_seconds) / seconds,
                gpus=tuple(sorted(held, key=_gpu_index)),
                cpu_idle_w=cpu_idle_j / seconds,
                gpu_idle_w=math.fsum(gpu_idle_j.values()) / seconds,
            )
        )
    return tuple(rows)


def _zone_increase(
    before: Mapping[str, float], after: Mapping[str, float], cpu_zones: Sequence[str]
) -> float:
    return math.fsum(_increase(before.get(z), j) for z, j in after.items() if z in cpu_zones)


def _gpu_index(index: str) -> tuple[int, str]:
    return (int(index), "") if index.isdigit() else (1 << 30, index)


def sort_rows(rows: Iterable[Row], key: SortKey) -> list[Row]:
    by_name = sorted(rows, key=lambda r: (r.namespace, r.name, r.workload.container_id))
    if key is SortKey.NAME:
        return by_name
    power: dict[SortKey, Callable[[Row], float]] = {
        SortKey.CPU: lambda r: r.cpu_w,
        SortKey.GPU: lambda r: r.gpu_w,
        SortKey.IDLE: lambda r: r.idle_w,
    }
    return sorted(by_name, key=power[key], reverse=True)  # stable: equal power stays by name
