"""The loop: every interval read the sources, take deltas, attribute, publish a Snapshot."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

from exporter.accounting.attribution import (
    ACTIVE,
    IDLE,
    ZoneEnergy,
    attribute,
)
from exporter.accounting.deadline import (
    TIMEOUT,
    Call,
    DeadlineReads,
    InlineReads,
    Outcome,
    SourceReads,
)
from exporter.accounting.idle import IdleBaseline
from exporter.accounting.ledger import CounterTable
from exporter.accounting.meter import DeviceSample, ZoneMeter
from exporter.accounting.workloads import WorkloadLedger, energy_items
from exporter.accounting.zones import workload_zones
from exporter.cgroupfs.classify import classify_task
from exporter.config import IdleAttribution, IdlePower
from exporter.gpu.accounting import GpuAccounting, PidResolver
from exporter.gpu.attribution import GpuHolders
from exporter.gpu.backend import GpuBackend
from exporter.gpu.merge import GpuMerge
from exporter.gpu.readings import GpuReadings
from exporter.identity import NoNames, WorkloadNames
from exporter.readings import (
    CpuTimes,
    EnergyReading,
    MapStats,
    SourceError,
    SourceStatus,
    TaskKey,
    TaskSample,
)
from exporter.registry import REGISTRY
from exporter.snapshot import (
    EMPTY_SNAPSHOT,
    DeviceHealth,
    GpuAllocation,
    NodeZoneEnergy,
    PodInfo,
    Snapshot,
)
from exporter.sources.estimate import ESTIMATED, CpuPowerModel

log = logging.getLogger(__name__)

T = TypeVar("T")


ZoneId = tuple[str, str, str]  # (zone, device, source)


class PowerSource(Protocol):
    name: str

    def read(self) -> Sequence[EnergyReading]: ...


class CpuTimesSource(Protocol):
    def cpu_times(self) -> CpuTimes: ...


class ActivitySource(Protocol):
    name: str

    def tasks(self) -> Sequence[TaskSample]: ...


@runtime_checkable
class ReportsMapStats(Protocol):
    """An activity source with bounded kernel maps (eBPF) reports their fill and evictions."""

    def map_stats(self) -> Sequence[MapStats]: ...


# A source that runs on its own thread (pod metadata, PodResources): each step asks it how it is.
StatusProvider = Callable[[], Sequence[SourceStatus]]


@dataclass(frozen=True)
class MonitorSettings:
    idle_power: IdlePower = field(default_factory=IdlePower)
    idle_policy: IdleAttribution = IdleAttribution.HOLDERS
    attribution_zones: tuple[str, ...] = ()  # empty: chosen from what is measured
    with_processes: bool = False
    retention_s: float = 600.0
    # Each source read runs on its own thread and is waited for this long
    # (exporter/accounting/deadline.py); None: read inline on the stepping thread, no deadline.
    read_timeout_s: float | None = None


@dataclass
class _Previous:
    """What the last interval ended with; deltas are taken against it."""

    time: float
    cpu: CpuTimes | None = None
    task_cpu: dict[TaskKey, float] = field(default_factory=dict)
    task_ioctls: dict[TaskKey, tuple[tuple[str, int], ...]] = field(default_factory=dict)


class Monitor:
    """Owns all cumulative state. step() is called by one thread; snapshot is read by any."""

    def __init__(
        self,
        *,
        cpu: CpuTimesSource,
        activity: ActivitySource,
        power_sources: Sequence[PowerSource],
        cpu_model: Callable[[int], CpuPowerModel] | None,
        settings: MonitorSettings,
        names: WorkloadNames | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        gpus: GpuBackend | None = None,
        more_gpus: Sequence[GpuBackend] = (),
        gpu_holders: GpuHolders | None = None,
        gpu_pids: PidResolver | None = None,
        startup_statuses: Sequence[SourceStatus] = (),
        status_providers: Sequence[StatusProvider] = (),
        pod_info: Callable[[], Sequence[PodInfo]] | None = None,
        gpu_allocations: Callable[[], Sequence[GpuAllocation]] | None = None,
    ) -> None:
        self._cpu = cpu
        self._activity = activity
        self._power_sources = list(power_sources)
        self._cpu_model = cpu_model
        self.settings = settings
        self._names = names or NoNames()
        self._clock = clock
        self._wall_clock = wall_clock
        # sources that failed at start-up (e.g. eBPF in auto mode): shown in every snapshot
        self._startup_statuses = tuple(startup_statuses)
        self._status_providers = list(status_providers)
        self._pod_info = pod_info
        self._gpu_allocations = gpu_allocations

        self._prev: _Previous | None = None
        self._meters: dict[ZoneId, ZoneMeter] = {}
        self._measured_seen = False
        self._sequence = 0
        self._snapshot = EMPTY_SNAPSHOT

        self._node = CounterTable[ZoneId, str]()
        self._workloads = WorkloadLedger(with_processes=settings.with_processes)
        # GPUs: read like a power source, accounted per device (exporter/gpu/accounting.py)
        self._gpus = gpus
        # other vendors' backends (DRM beside NVML): merged into one reading (exporter/gpu/merge.py)
        self._more_gpus = tuple(more_gpus) if gpus is not None else ()
        self._gpu_merge = GpuMerge()
        self._gpu = GpuAccounting(
            idle_power=settings.idle_power,
            idle_policy=settings.idle_policy,
            holders=gpu_holders,
            resolve_pids=gpu_pids,
        )
        self._reads: SourceReads = (
            DeadlineReads(settings.read_timeout_s, clock)
            if settings.read_timeout_s
            else InlineReads(clock)
        )

    @property
    def snapshot(self) -> Snapshot:
        return self._snapshot

    # -- one interval ---------------------------------------------------------------------

    def step(self) -> Snapshot:
        now = self._clock()
        statuses: list[SourceStatus] = []
        got = self._reads.run(self._calls())
        cpu = self._take("procfs", got["cpu"], statuses)
        tasks = self._take(self._activity.name, got["tasks"], statuses)
        if self._activity.name == "procfs" and len(statuses) == 2:
            statuses = _merge_statuses(statuses[0], statuses[1])
        statuses.extend(self._startup_statuses)
        readings: list[tuple[EnergyReading, float]] = []
        for i, source in enumerate(self._power_sources):
            outcome = got[f"power.{i}"]
            power = self._take(source.name, outcome, statuses)
            if power is None:
                power = self._unread(source.name, outcome, statuses[-1].reason)
            readings.extend((r, outcome.stamp) for r in power)
        if any(not r.fault for r, _ in readings):
            self._measured_seen = True
        gpu_reading, gpu_stamp, gpus_unread = self._read_gpus(got, now, statuses)
        for provider in self._status_providers:
            statuses.extend(_provided(provider, ()))

        prev = self._prev
        dt = now - prev.time if prev else 0.0
        usage = _cpu_usage(prev.cpu if prev else None, cpu)
        task_list = list(tasks or ())
        cpu_deltas, ioctl_deltas = self._task_deltas(prev, task_list)
        owner = {t.key: classify_task(t.cgroup, t.kernel_thread) for t in task_list}

        zone_energy = self._zone_deltas(readings, usage)
        if not self._measured_seen and self._cpu_model is not None and cpu is not None:
            zone_energy.update(self._estimated_zone(prev, cpu, usage, dt, statuses))

        attributed = self._workload_zones(zone_energy)
        zones = self._attributable(zone_energy, attributed, cpu_deltas)
        gpu = self._gpu.interval(
            gpu_reading,
            gpu_stamp,
            unread=gpus_unread,
            tasks=task_list,
            ioctl_deltas=ioctl_deltas,
            owner=owner,
        )
        statuses.extend(gpu.statuses)
        owner = {**owner, **gpu.owner}  # GPU processes with no task get pseudo tasks
        zones.extend(gpu.zones)
        split = attribute(zones, owner, with_tasks=self.settings.with_processes)

        for zid, (active, idle) in zone_energy.items():
            self._node.add(zid, ACTIVE, active, now)
            self._node.add(zid, IDLE, idle, now)
        # Node zones and GPUs never expire: they are bounded by the hardware, and the workload
        # energy already handed out (retired containers included) must keep adding up to them.
        self._workloads.add_energy(now, split, task_list, owner)
        self._workloads.add_activity(now, cpu_deltas, ioctl_deltas, owner)
        self._workloads.expire(now, self.settings.retention_s)

        # A source that gave nothing this interval keeps its last reading as the baseline, so its
        # next reading's delta covers the gap once (an empty baseline would count every task's
        # whole lifetime again).
        self._prev = _Previous(
            time=now,
            cpu=cpu if cpu is not None or prev is None else prev.cpu,
            task_cpu=(
                {t.key: t.cpu_seconds for t in task_list}
                if tasks is not None or prev is None
                else prev.task_cpu
            ),
            task_ioctls=(
                {t.key: t.gpu_ioctls for t in task_list if t.gpu_ioctls}
                if tasks is not None or prev is None
                else prev.task_ioctls
            ),
        )
        self._sequence += 1
        self._snapshot = self._build_snapshot(
            ready=prev is not None, dt=dt, usage=usage, statuses=statuses, attributed=attributed
        )
        return self._snapshot

    def _read_gpus(
        self, got: Mapping[str, Outcome[Any]], now: float, statuses: list[SourceStatus]
    ) -> tuple[GpuReadings | None, float, dict[str, str]]:
        """The GPU backends' readings merged, their stamp, and the backends that gave none
        (with why: their GPUs are marked down)."""
        gpu_reading = None
        gpu_stamp = now
        # backends that gave no reading this interval, and why: their GPUs are marked down
        gpus_unread: dict[str, str] = {}
        if self._gpus:
            gpu_reading = self._take(self._gpus.name, got["gpu"], statuses)
            if gpu_reading is None:
                gpus_unread[self._gpus.name] = statuses[-1].reason
            gpu_stamp = got["gpu"].stamp
            if self._more_gpus:
                more: list[GpuReadings | None] = []
                for i, b in enumerate(self._more_gpus):
                    more.append(self._take(b.name, got[f"gpu.{i}"], statuses))
                    if more[-1] is None:
                        gpus_unread[b.name] = statuses[-1].reason
                if gpu_reading is None:
                    gpu_stamp = next(
                        (got[f"gpu.{i}"].stamp for i, r in enumerate(more) if r is not None), now
                    )
                gpu_reading = self._gpu_merge.merge([gpu_reading, *more])
        return gpu_reading, gpu_stamp, gpus_unread

    def _calls(self) -> list[Call]:
        """This interval's source reads; each source's calls share its worker thread."""
        calls = [
            Call("cpu", "procfs", self._cpu.cpu_times),
            Call("tasks", self._activity.name, self._activity.tasks),
        ]
        calls += [Call(f"power.{i}", s.name, s.read) for i, s in enumerate(self._power_sources)]
        if self._gpus:
            calls.append(Call("gpu", self._gpus.name, self._gpus.read))
        calls += [Call(f"gpu.{i}", b.name, b.read) for i, b in enumerate(self._more_gpus)]
        return calls

    def _take(self, name: str, outcome: Outcome[T], statuses: list[SourceStatus]) -> T | None:
        """A read's value (None if it gave none), its status appended to statuses."""
        took = outcome.duration_s
        if outcome.missed:
            detail = (
                f"no answer within {self._reads.timeout_s:g}s"
                if outcome.missed == TIMEOUT
                else f"the read started earlier has run {took:.3g}s and not returned"
            )
            if outcome.value is not None:
                detail += f"; used the reading that came {outcome.late_by_s:.3g}s late"
            statuses.append(SourceStatus(name, False, outcome.missed, detail, took))
            return outcome.value
        exc = outcome.error
        if isinstance(exc, SourceError):
            statuses.append(SourceStatus(name, False, exc.reason, exc.detail, took))
            return None
        if exc is not None:  # a source must never take the loop down
            log.error("source %s failed unexpectedly", name, exc_info=exc)
            statuses.append(SourceStatus(name, False, "internal error", repr(exc), took))
            return None
        statuses.append(SourceStatus(name, True, duration_s=took))
        return outcome.value

    def _unread(self, name: str, outcome: Outcome[object], reason: str) -> list[EnergyReading]:
        """The devices of a power source that gave no readings this interval, each with the
        fault that kept it unread: so a source that failed, timed out or is stuck in a read
        shows on every one of its devices (device_up 0, a rejection counted), not only on
        source_up. A SourceError that carries per-device readings (every zone failed, each for
        its own reason) gives those; otherwise every device this source has had a meter for."""
        exc = outcome.error
        if isinstance(exc, SourceError) and exc.readings:
            return list(exc.readings)
        fault = f"source {reason or 'gave nothing'}"
        return [
            EnergyReading(zone, device, source, fault=fault)
            for (zone, device, source) in self._meters
            if source == name
        ]

    def _task_deltas(
        self, prev: _Previous | None, tasks: Sequence[TaskSample]
    ) -> tuple[dict[TaskKey, float], dict[TaskKey, dict[str, int]]]:
        """CPU seconds and GPU ioctls per task since the last interval.

        On the first interval everything is a baseline. Later, a task not seen before started
        during the interval (its key includes its start time), so all its time is new.
        """
        if prev is None:
            return {}, {}
        cpu: dict[TaskKey, float] = {}
        ioctls: dict[TaskKey, dict[str, int]] = {}
        for t in tasks:
            before = prev.task_cpu.get(t.key, 0.0)
            delta = t.cpu_seconds - before
            if delta > 0:
                cpu[t.key] = delta
            if t.gpu_ioctls:
                old = dict(prev.task_ioctls.get(t.key, ()))
                counts = {d: n - old.get(d, 0) for d, n in t.gpu_ioctls if n > old.get(d, 0)}
                if counts:
                    ioctls[t.key] = counts
        return cpu, ioctls

    def _zone_deltas(
        self, readings: Sequence[tuple[EnergyReading, float]], usage: float | None
    ) -> dict[ZoneId, tuple[float, float]]:
        """(active, idle) joules per measured zone over the interval, through each zone's meter
        (a zone's first reading, and a rejected one, give nothing)."""
        out: dict[ZoneId, tuple[float, float]] = {}
        for reading, stamp in readings:
            zid = (reading.zone, reading.device, reading.source)
            meter = self._meters.get(zid)
            if meter is None:
                fixed = self.settings.idle_power.for_zone(reading.zone)
                name = f"{reading.source} {reading.zone} {reading.device}"
                meter = self._meters[zid] = ZoneMeter(IdleBaseline(fixed_w=fixed), name=name)
            measured = meter.measure(
                _device_sample(reading, stamp), interval=self._sequence, utilization=usage
            )
            if measured is not None:
                out[zid] = (measured.active_j, measured.idle_j)
        return out

    def _estimated_zone(
        self,
        prev: _Previous | None,
        cpu: CpuTimes,
        usage: float | None,
        dt: float,
        statuses: list[SourceStatus],
    ) -> dict[ZoneId, tuple[float, float]]:
        assert self._cpu_model is not None
        model = self._cpu_model(cpu.ncpu)
        statuses.append(
            SourceStatus(ESTIMATED, True, detail=f"{model.idle_w:g} W idle, {model.max_w:g} W max")
        )
        if prev is None or usage is None:
            return {}
        return {("package", "", ESTIMATED): model.energy_j(usage, dt)}

    def _workload_zones(self, zone_energy: Mapping[ZoneId, tuple[float, float]]) -> tuple[str, ...]:
        """Which zone kinds are split among workloads (exporter/accounting/zones.py)."""
        return workload_zones(
            self.settings.attribution_zones,
            self._node_zone_ids(zone_energy),
            REGISTRY.zone_preferences,
        )

    def _node_zone_ids(self, zone_energy: Mapping[ZoneId, tuple[float, float]]) -> list[ZoneId]:
        # zones known from earlier intervals count too, so a zone missing once does not
        # change which kinds are attributed
        return list({*zone_energy, *(k for k, _ in self._node.items())})

    def _attributable(
        self,
        zone_energy: Mapping[ZoneId, tuple[float, float]],
        attributed: Sequence[str],
        cpu_deltas: Mapping[TaskKey, float],
    ) -> list[ZoneEnergy]:
        idle_weights = cpu_deltas if self.settings.idle_policy is IdleAttribution.ACTIVITY else None
        per_kind: dict[str, list[float]] = {}
        for (zone, _device, _source), (active, idle) in zone_energy.items():
            if zone in attributed:
                acc = per_kind.setdefault(zone, [0.0, 0.0])
                acc[0] += active
                acc[1] += idle
        return [
            ZoneEnergy(zone, "", active, idle, cpu_deltas, idle_weights)
            for zone, (active, idle) in sorted(per_kind.items())
        ]

    # -- snapshot -------------------------------------------------------------------------

    def _build_snapshot(
        self,
        *,
        ready: bool,
        dt: float,
        usage: float | None,
        statuses: list[SourceStatus],
        attributed: tuple[str, ...],
    ) -> Snapshot:
        node = tuple(
            NodeZoneEnergy(zone, device, source, t.get(ACTIVE, 0.0), t.get(IDLE, 0.0))
            for (zone, device, source), t in sorted(self._node.items())
        )
        maps = self._activity.map_stats() if isinstance(self._activity, ReportsMapStats) else ()
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
            sources=tuple(statuses),
            attributed_zones=attributed,
            gpus=self._gpu.counters(),
            gpu_container_memory=self._gpu.container_memory(self._names.container),
            ebpf_maps=tuple(maps),
            devices=(
                *(
                    DeviceHealth(source, zone, device, meter.health())
                    for (zone, device, source), meter in sorted(self._meters.items())
                ),
                *(self._gpu.device_health(self._gpus.name) if self._gpus else ()),
            ),
            pod_info=tuple(_provided(self._pod_info, ())) if self._pod_info else (),
            gpu_allocations=(
                tuple(_provided(self._gpu_allocations, ())) if self._gpu_allocations else ()
            ),
        )

    def close(self) -> None:
        """Release what sources hold (NVML and its event thread). Call after the loop ended."""
        if self._gpus is not None:
            # on its own worker: NVML is used by one thread at a time, and a hung read holds it
            self._reads.call_on(self._gpus.name, self._gpus.close, timeout_s=5.0)
        for backend in self._more_gpus:
            self._reads.call_on(backend.name, backend.close, timeout_s=5.0)
        self._reads.close()

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


def _merge_statuses(cpu: SourceStatus, tasks: SourceStatus) -> list[SourceStatus]:
    """procfs serves both /proc/stat and the process list: report it once."""
    if not cpu.up:
        return [
            SourceStatus(
                cpu.source, False, cpu.reason, cpu.detail, cpu.duration_s + tasks.duration_s
            )
        ]
    return [
        SourceStatus(
            "procfs", tasks.up, tasks.reason, tasks.detail, cpu.duration_s + tasks.duration_s
        )
    ]


def _cpu_usage(prev: CpuTimes | None, cur: CpuTimes | None) -> float | None:
    if prev is None or cur is None:
        return None
    busy = cur.busy_s - prev.busy_s
    total = busy + (cur.idle_s - prev.idle_s)
    if total <= 0 or busy < 0:
        return None
    return min(busy / total, 1.0)


def _device_sample(reading: EnergyReading, stamp: float) -> DeviceSample:
    return DeviceSample(
        stamp=stamp,
        energy_uj=reading.energy_uj,
        max_energy_uj=reading.max_energy_uj,
        power_w=reading.power_w,
        max_power_w=reading.max_power_w,
        fault=reading.fault,
    )


def _provided(fn: Callable[[], Sequence[T]], default: Sequence[T]) -> Sequence[T]:
    """What a background source's accessor returns; its failure must not fail the interval."""
    try:
        return fn()
    except Exception:
        log.exception("background source accessor %r failed", fn)
        return default
