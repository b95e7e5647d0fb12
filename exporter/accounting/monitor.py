"""The loop: every interval read the sources, take deltas, attribute, publish a Snapshot.

An interval is a short list of stages, each in a module of its own:
1. a source round (sourceround.py): every source read once under its deadline, with statuses;
2. activity (activity.py): CPU seconds and GPU ioctls per task since the last interval;
3. node zones (nodezones.py): each zone's meter turns readings into active and idle joules;
4. GPUs (gpu.py, gpu_merge.py): the backends' readings merged, metered and split by process;
5. attribution (attribution.py): every zone's energy split among tasks and containers;
6. the ledger (ledger.py, workloads.py): cumulative counters per node zone and workload;
7. the Snapshot, built from the ledger and published for scrapes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter.accounting.activity import Activity, ActivityDeltas
from exporter.accounting.attribution import (
    ACTIVE,
    IDLE,
    IntervalAttribution,
    ZoneEnergy,
    attribute,
)
from exporter.accounting.gpu import GpuAccounting, GpuInterval, PidResolver
from exporter.accounting.gpu_merge import GpuMerge
from exporter.accounting.ledger import CounterTable
from exporter.accounting.nodezones import NodeZones, ZoneJoules, attributable
from exporter.accounting.pending import HOLD_INTERVALS, PendingEnergy, gap_reason
from exporter.accounting.sourceround import Round, SourceRound, provided
from exporter.accounting.workloads import WorkloadLedger, energy_items
from exporter.accounting.zones import ZoneFill, ZoneId, ZonePreferences
from exporter.model.config import IdleAttribution, IdlePower
from exporter.model.gpu_readings import GpuReadings
from exporter.model.identity import ContainerRef, NoNames
from exporter.model.ports import (
    ActivitySource,
    CpuTimesSource,
    DescribesEstimate,
    GpuBackend,
    PodIdentity,
    PowerSource,
    ReportsMapStats,
)
from exporter.model.readings import SourceStatus, TaskKey
from exporter.model.snapshot import (
    EMPTY_SNAPSHOT,
    DeviceHealth,
    EstimateInfo,
    NodeZoneEnergy,
    Snapshot,
    UnattributedEnergy,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MonitorSettings:
    idle_power: IdlePower = field(default_factory=IdlePower)
    idle_policy: IdleAttribution = IdleAttribution.HOLDERS
    attribution_zones: tuple[str, ...] = ()  # empty: chosen from what is measured
    # (source label, zone groups) in preference order (Registry.zone_preferences)
    zone_preferences: ZonePreferences = ()
    # power sources used only until a measured one reads (Registry.fallback_sources)
    fallback_sources: frozenset[str] = frozenset()
    # zone kinds a fallback source fills beside measured sources (Registry.zone_fills)
    zone_fills: tuple[ZoneFill, ...] = ()
    with_processes: bool = False
    retention_s: float = 600.0
    # Each source read runs on its own thread and is waited for this long
    # (exporter/accounting/deadline.py); None: read inline on the stepping thread, no deadline.
    read_timeout_s: float | None = None
    # Intervals without an activity reading whose energy waits for it (accounting/pending.py).
    hold_intervals: int = HOLD_INTERVALS


@dataclass(frozen=True)
class MonitorParts:
    """What the monitor reads, built by exporter/app/wiring.py (tests build their own)."""

    cpu: CpuTimesSource
    activity: ActivitySource
    power: Sequence[PowerSource] = ()
    gpus: Sequence[GpuBackend] = ()  # the first is the primary (exporter/accounting/gpu_merge.py)
    identity: PodIdentity | None = None  # pod names and GPU holders; None: no Kubernetes
    # GPU processes the task list lacks (per-cgroup tasks): their container from /proc
    gpu_pids: PidResolver | None = None
    startup_statuses: Sequence[SourceStatus] = ()  # sources that failed at start-up (eBPF)
    # where each interval's merged GPU readings go (the PodResources GPU directory)
    on_gpus: Callable[[GpuReadings], None] | None = None


class Monitor:
    """Owns all cumulative state. step() is called by one thread; snapshot is read by any."""

    def __init__(
        self,
        parts: MonitorParts,
        settings: MonitorSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self._parts = parts
        self._identity = parts.identity
        self._names = parts.identity.names if parts.identity is not None else NoNames()
        self._clock = clock
        self._wall_clock = wall_clock
        self._sequence = 0
        self._snapshot = EMPTY_SNAPSHOT

        self._round = SourceRound(
            cpu=parts.cpu,
            activity=parts.activity,
            power=parts.power,
            gpus=parts.gpus,
            fallback=settings.fallback_sources,
            fills=settings.zone_fills,
            read_timeout_s=settings.read_timeout_s,
            startup_statuses=parts.startup_statuses,
            clock=clock,
        )
        self._activity = ActivityDeltas()
        self._zones = NodeZones(
            settings.idle_power,
            configured_zones=settings.attribution_zones,
            preferences=settings.zone_preferences,
            fills=settings.zone_fills,
        )
        self._gpu_merge = GpuMerge()
        self._gpu = GpuAccounting(
            idle_power=settings.idle_power,
            idle_policy=settings.idle_policy,
            holders=parts.identity.gpu_holders if parts.identity is not None else None,
            resolve_pids=parts.gpu_pids,
            hold_intervals=settings.hold_intervals,
        )
        self._node = CounterTable[ZoneId, str]()
        self._workloads = WorkloadLedger(with_processes=settings.with_processes)
        self._pending = PendingEnergy(settings.hold_intervals)

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    # -- one interval ---------------------------------------------------------------------

    def step(self) -> Snapshot:
        now = self._clock()
        read = self._round.read()
        activity = self._activity.interval(now, read.cpu, read.tasks)
        zone_energy = self._zones.measure(
            read.readings, activity.usage, self._sequence, unread=dict(read.unread)
        )
        # zones known from earlier intervals count too, so a zone missing once does not change
        # which kinds are attributed
        attributed = self._zones.attributed_kinds(
            {*zone_energy, *(k for k, _ in self._node.items())}
        )
        statuses = list(read.statuses)
        gpu = self._gpus(now, read, activity)
        if self._identity is not None:
            statuses.extend(provided(self._identity.statuses))
        statuses.extend(gpu.statuses)
        owner = {**activity.owner, **gpu.owner}  # GPU processes with no task get pseudo tasks
        zones = [*self._cpu_zones(zone_energy, attributed, activity, read), *gpu.zones]
        split = attribute(zones, owner, with_tasks=self.settings.with_processes)
        self._record(now, zone_energy, activity, split, owner)
        self._sequence += 1
        self._snapshot = self._build_snapshot(
            ready=activity.ready,
            dt=activity.dt,
            usage=activity.usage,
            statuses=statuses,
            attributed=attributed,
            estimate=self._estimate_info(read),
        )
        return self._snapshot

    def _estimate_info(self, read: Round) -> EstimateInfo | None:
        """The model behind this round's estimated readings; None when none was counted."""
        for source in self._parts.power:
            if isinstance(source, DescribesEstimate) and any(
                r.source == source.name for r, _ in read.readings
            ):
                return source.estimate_info()
        return None

    def _gpus(self, now: float, read: Round, activity: Activity) -> GpuInterval:
        reading, stamp = self._gpu_merge.merge_stamped(read.gpus, now)
        if reading is not None and self._parts.on_gpus is not None:
            self._parts.on_gpus(reading)
        return self._gpu.interval(
            reading,
            stamp,
            unread=dict(read.unread),
            tasks=activity.tasks,
            ioctl_deltas=activity.ioctl_deltas,
            owner=activity.owner,
        )

    def _cpu_zones(
        self, zone_energy: ZoneJoules, attributed: tuple[str, ...], activity: Activity, read: Round
    ) -> list[ZoneEnergy]:
        idle_weights = (
            activity.cpu_deltas if self.settings.idle_policy is IdleAttribution.ACTIVITY else None
        )
        zones = attributable(zone_energy, attributed, activity.cpu_deltas, idle_weights)
        if not activity.ready:
            return zones  # the baseline interval: nothing to hold or release
        # energy without its activity reading waits for it (accounting/pending.py)
        return self._pending.settle(
            zones,
            gap=gap_reason(read.tasks is not None, read.statuses, self._parts.activity.name),
            weights=activity.cpu_deltas,
            idle_weights=idle_weights,
        )

    def _record(
        self,
        now: float,
        zone_energy: ZoneJoules,
        activity: Activity,
        split: IntervalAttribution,
        owner: Mapping[TaskKey, ContainerRef],
    ) -> None:
        for zid, (active, idle) in zone_energy.items():
            self._node.add(zid, ACTIVE, active, now)
            self._node.add(zid, IDLE, idle, now)
        # Node zones and GPUs never expire: they are bounded by the hardware, and the workload
        # energy already handed out (retired containers included) must keep adding up to them.
        self._workloads.add_energy(now, split, activity.tasks, owner)
        self._workloads.add_activity(now, activity.cpu_deltas, activity.ioctl_deltas, owner)
        self._workloads.expire(now, self.settings.retention_s)

    # -- snapshot -------------------------------------------------------------------------

    def _build_snapshot(
        self,
        *,
        ready: bool,
        dt: float,
        usage: float | None,
        statuses: list[SourceStatus],
        attributed: tuple[str, ...],
        estimate: EstimateInfo | None = None,
    ) -> Snapshot:
        node = tuple(
            NodeZoneEnergy(zone, device, source, t.get(ACTIVE, 0.0), t.get(IDLE, 0.0))
            for (zone, device, source), t in sorted(self._node.items())
        )
        activity = self._parts.activity
        maps = activity.map_stats() if isinstance(activity, ReportsMapStats) else ()
        identity = self._identity
        gpus = self._parts.gpus
        return Snapshot(
            sequence=self._sequence,
            timestamp=self._wall_clock(),
            interval_s=dt,
            ready=ready,
            cpu_usage_ratio=usage,
            node_energy=node,
            containers=self._workloads.containers(self._names.container),
            pods=self._workloads.pods(self._names.pod),
            processes=self._workloads.processes(self._names.container),
            retired_containers=energy_items(self._workloads.retired_containers),
            unattributed=tuple(
                UnattributedEnergy(z, g, m, reason, j)
                for ((z, g, m), reason), j in sorted(
                    {**self._pending.unattributed(), **self._gpu.unattributed()}.items()
                )
            ),
            pending=(*energy_items(self._pending.pending()), *self._gpu.pending()),
            sources=tuple(statuses),
            attributed_zones=attributed,
            gpus=self._gpu.counters(),
            gpu_container_memory=self._gpu.container_memory(self._names.container),
            ebpf_maps=tuple(maps),
            devices=(
                *(
                    DeviceHealth(source, zone, device, health)
                    for (zone, device, source), health in self._zones.health()
                ),
                *(self._gpu.device_health(gpus[0].name) if gpus else ()),
            ),
            pod_info=tuple(provided(identity.pod_info)) if identity is not None else (),
            gpu_allocations=(
                tuple(provided(identity.gpu_allocations)) if identity is not None else ()
            ),
            cdi_rejections=(
                tuple(provided(identity.cdi_rejections)) if identity is not None else ()
            ),
            estimate=estimate,
        )

    def close(self) -> None:
        """Release what sources hold (NVML and its event thread). Call after the loop ended."""
        self._round.close()

    # -- the loop -------------------------------------------------------------------------

    def run(
        self, interval_s: float, stop: threading.Event, on_step: Callable[[], None] | None = None
    ) -> None:
        """Step every interval until stop is set. A slow step delays the next one but loses
        nothing: deltas are taken over the time that actually passed."""
        next_at = self._clock()
        while not stop.is_set():
            try:
                self.step()
            except Exception:
                log.exception("interval failed; the next one will retry")
            if on_step is not None:
                on_step()
            next_at += interval_s
            now = self._clock()
            if next_at < now:  # overran: skip the missed ticks instead of bunching them
                next_at = now + interval_s - ((now - next_at) % interval_s)
            stop.wait(next_at - now)
