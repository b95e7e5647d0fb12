"""Per-GPU energy accounting for the monitor: deltas, idle baselines, and the zones to attribute.

Every interval, per GPU, its ZoneMeter (exporter/accounting/meter.py, the same one CPU zones
use): dE from the total-energy counter (or, where the GPU has none, power integrated over the
interval; the source label says which), readings gated against the GPU's power limit, idle =
min(P_idle * dt, dE) with the meter's idle baseline, active = dE - idle. The active energy becomes
a ZoneEnergy("gpu", index) whose task weights come from exporter.accounting.gpu_attribution; the
idle goes to
the GPU's holders under the default policy; the monitor attributes both with the CPU zones, so
containers and pods get zone="gpu", gpu="<index>" series.

NVML PIDs are mapped to the interval's tasks by PID. A GPU process with no task (the task list
has per-cgroup buckets, not processes) is looked up by a PidResolver (its /proc/<pid>/cgroup,
exporter/sources/activity/procfs/pidowner.py) and gets a task key (pid, start time) owned by its
container. One that cannot be found there either (its /proc entry is not visible here, or it
exited in between) keeps its energy under a pseudo task of the "unknown_processes"
pseudo-container, so the per-GPU sums stay exact.

A GPU whose process list could not be read this interval (GpuReading.processes_unread: a failed
NVML process or utilization call, a failed fdinfo scan) has energy but nothing to split it by.
Its active energy is held (exporter/accounting/pending.py, per GPU, the bound of the CPU zones)
and split with the next list of that GPU, which covers the held time: NVML's utilization samples
and fdinfo's engine times are taken since the last successful read. Past the bound it is given
up to the node's unattributed counter with reason no_process_list, per GPU; never to a
pseudo-container. Its idle follows the idle policy as usual, except that the activity policy
leaves it on the node (its weights would be a guess).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from exporter.accounting.attribution import ACTIVE, IDLE, ZoneEnergy
from exporter.accounting.gpu_attribution import (
    DRM_DRIVER,
    NVIDIA_DRIVER,
    GpuHolders,
    holder_weights,
    idle_holders,
    ioctls_by_pid,
    process_weights,
)
from exporter.accounting.idle import IdleBaseline
from exporter.accounting.meter import COUNTER, DeviceSample, ZoneMeter
from exporter.accounting.pending import HOLD_INTERVALS, PendingEnergy
from exporter.model.config import IdleAttribution, IdlePower
from exporter.model.gpu_readings import GpuReading, GpuReadings
from exporter.model.gpu_snapshot import (
    ContainerGpuMemory,
    GpuCounters,
    GpuEnergy,
    energy_source,
)
from exporter.model.identity import ContainerRef
from exporter.model.readings import SourceStatus, TaskKey, TaskSample
from exporter.model.snapshot import UNATTRIBUTED_NO_PROCESS_LIST, DeviceHealth, Energy

log = logging.getLogger(__name__)

GPU_ZONE = "gpu"
XID_SOURCE = "nvml_xid"
UNKNOWN_PROCESSES = "unknown_processes"
# GPU processes whose PID has no task this interval (not visible in this PID namespace).
UNKNOWN = ContainerRef(pseudo=UNKNOWN_PROCESSES)
UNMAPPED_START = -1  # start_ticks of such a process's pseudo task: never a real start time


# GPU PIDs missing from the task list -> {pid: ((pid, start ticks), container)} for those found
PidResolver = Callable[[Collection[int]], Mapping[int, tuple[TaskKey, ContainerRef]]]


# What container names are looked up with: (namespace, pod, container) of a ContainerRef.
ContainerNames = Callable[[ContainerRef], tuple[str, str, str]]


@dataclass(frozen=True)
class GpuInterval:
    """What one interval's GPUs add to the monitor's attribution."""

    zones: list[ZoneEnergy]
    owner: dict[TaskKey, ContainerRef]  # pseudo tasks of unmapped GPU processes
    statuses: list[SourceStatus]


@dataclass
class _GpuState:
    index: int
    uuid: str
    model: str
    pci_bus_id: str
    meter: ZoneMeter
    lost: bool = False
    mig_mode: str = ""
    vendor: str = "nvidia"
    backend: str = "nvml"
    energy: dict[tuple[str, str], float] = field(default_factory=dict)  # (source, mode) -> J
    methods: dict[str, int] = field(default_factory=dict)
    reading: GpuReading | None = None
    xids: dict[int, int] = field(default_factory=dict)  # cumulative, survives NVML restarts
    xids_seen: dict[int, int] = field(default_factory=dict)  # the watcher's last counts


class GpuAccounting:
    """Owns the per-GPU cumulative state. Driven by Monitor.step() on one thread."""

    def __init__(
        self,
        *,
        idle_power: IdlePower,
        idle_policy: IdleAttribution,
        holders: GpuHolders | None = None,
        resolve_pids: PidResolver | None = None,
        hold_intervals: int = HOLD_INTERVALS,
    ) -> None:
        self._resolve_pids = resolve_pids
        self._hold_intervals = hold_intervals
        # per GPU (its state key): active energy waiting for the process list that covers it
        self._pending: dict[str, PendingEnergy] = {}
        self._idle_power = idle_power
        self._idle_policy = idle_policy
        self._holders = holders
        self._gpus: dict[str, _GpuState] = {}
        self._driver_version = ""
        self._cuda_version = ""
        self._memory: list[tuple[GpuReading, ContainerRef, int]] = []
        self._interval = 0  # counts interval() calls: a meter's readings are consecutive or not

    def interval(
        self,
        reading: GpuReadings | None,
        stamp: float,
        *,
        tasks: Sequence[TaskSample],
        ioctl_deltas: Mapping[TaskKey, Mapping[str, int]],
        owner: Mapping[TaskKey, ContainerRef],
        unread: Mapping[str, str] | None = None,
    ) -> GpuInterval:
        """Energy deltas of this interval's GPU reading and the zones that split them.

        unread: backend -> why it gave no reading this interval (failed, timed out, still
        busy); each GPU it read before is marked down with that reason, so the fault shows per
        GPU and not only on source_up."""
        self._interval += 1
        for state in self._gpus.values():
            state.reading = None
        self._memory = []
        for state in self._gpus.values():
            why = (unread or {}).get(state.backend)
            if why is not None:
                state.meter.measure(
                    DeviceSample(stamp, fault=f"source {why or 'gave nothing'}"),
                    interval=self._interval,
                    utilization=None,
                )
        if reading is None:
            self._age_held(set())
            return GpuInterval([], {}, [])
        self._driver_version = reading.driver_version
        self._cuda_version = reading.cuda_version
        pid_keys = {t.pid: t.key for t in tasks if t.pid > 0 and not t.kernel_thread}
        # each GPU's fallback counts its own driver's ioctls: NVIDIA's, or DRM's (AMD, Intel)
        ioctls = {d: ioctls_by_pid(ioctl_deltas, d) for d in (NVIDIA_DRIVER, DRM_DRIVER)}
        extra_owner: dict[TaskKey, ContainerRef] = {}
        if self._resolve_pids is not None:
            missing = {pid for gpu in reading.gpus for pid in _gpu_pids(gpu)} - pid_keys.keys()
            found = self._resolve_pids(missing) if missing else {}
            if found:
                pid_keys = {**pid_keys, **{pid: key for pid, (key, _) in found.items()}}
                extra_owner.update(found.values())
                owner = {**owner, **extra_owner}
        zones = []
        settled: set[str] = set()
        for gpu in reading.gpus:
            state = self._state(gpu)
            # A lost GPU counts as unreadable and keeps its baseline: the gap is counted when
            # it is back, if the counter moved plausibly.
            measured = state.meter.measure(
                _device_sample(gpu, stamp), interval=self._interval, utilization=_utilization(gpu)
            )
            if gpu.lost:
                continue
            self._memory.extend(_container_memory(gpu, pid_keys, owner))
            key = _state_key(gpu)
            if measured is None and not self._held(key):
                continue
            active, idle = 0.0, 0.0
            if measured is not None:
                source = energy_source(gpu.backend, counter=measured.method == COUNTER)
                active, idle = measured.active_j, measured.idle_j
                _add(state.energy, (source, ACTIVE), active)
                _add(state.energy, (source, IDLE), idle)
            zone = self._zone(
                state,
                gpu,
                energy=(active, idle),
                pid_keys=pid_keys,
                ioctls=ioctls[NVIDIA_DRIVER if gpu.vendor == "nvidia" else DRM_DRIVER],
                owner=owner,
                extra_owner=extra_owner,
            )
            zones.extend(self._settle(key, zone, gap=bool(gpu.processes_unread)))
            settled.add(key)
        self._age_held(settled)
        statuses = []
        if reading.event_watch is not None:
            w = reading.event_watch
            statuses.append(SourceStatus(XID_SOURCE, w.up, w.reason, w.detail))
        return GpuInterval(zones, extra_owner, statuses)

    def _held(self, key: str) -> bool:
        pending = self._pending.get(key)
        return pending is not None and bool(pending.pending())

    def _settle(self, key: str, zone: ZoneEnergy, *, gap: bool) -> list[ZoneEnergy]:
        """The GPU's zone to attribute now: held (active energy 0) when its process list is
        missing, else with what was held for it added (pending.py keeps the sums exact)."""
        pending = self._pending.get(key)
        if pending is None:
            if not gap:
                return [zone]
            pending = self._pending[key] = PendingEnergy(self._hold_intervals)
        return pending.settle(
            [zone],
            gap=UNATTRIBUTED_NO_PROCESS_LIST if gap else "",
            weights=zone.weights,
            idle_weights=zone.idle_weights,
        )

    def _age_held(self, settled: set[str]) -> None:
        """A GPU with held energy and no zone this interval (lost, unread, no measurement):
        one more interval without its list, so the bound holds in intervals."""
        for key, pending in self._pending.items():
            if key not in settled and pending.pending():
                pending.settle([], gap=UNATTRIBUTED_NO_PROCESS_LIST, weights={}, idle_weights=None)

    def pending(self) -> tuple[Energy, ...]:
        """Joules held now per GPU, waiting for its process list."""
        return tuple(
            Energy(zone, gpu, mode, joules)
            for pending in self._pending.values()
            for (zone, gpu, mode), joules in sorted(pending.pending().items())
        )

    def unattributed(self) -> dict[tuple[tuple[str, str, str], str], float]:
        """Cumulative joules given up per ((zone, gpu, mode), reason), all GPUs."""
        out: dict[tuple[tuple[str, str, str], str], float] = {}
        for pending in self._pending.values():
            out.update(pending.unattributed())
        return out

    def _state(self, gpu: GpuReading) -> _GpuState:
        key = _state_key(gpu)
        state = self._gpus.get(key)
        if state is None:
            state = _GpuState(
                index=gpu.index,
                uuid=gpu.uuid,
                model=gpu.name,
                pci_bus_id=gpu.pci_bus_id,
                meter=ZoneMeter(
                    IdleBaseline(fixed_w=self._idle_power.for_zone(GPU_ZONE)),
                    name=f"GPU {gpu.index} ({gpu.uuid})",
                ),
            )
            self._gpus[key] = state
        state.index = gpu.index
        state.vendor, state.backend = gpu.vendor, gpu.backend
        state.lost = gpu.lost
        state.reading = gpu
        if gpu.mig_enabled is not None:
            state.mig_mode = "enabled" if gpu.mig_enabled else "disabled"
        _count_xids(state, gpu.xid_errors)
        return state

    def _zone(
        self,
        state: _GpuState,
        gpu: GpuReading,
        *,
        energy: tuple[float, float],
        pid_keys: Mapping[int, TaskKey],
        ioctls: Mapping[int, float],
        owner: Mapping[TaskKey, ContainerRef],
        extra_owner: dict[TaskKey, ContainerRef],
    ) -> ZoneEnergy:
        active, idle = energy
        split = process_weights(gpu, ioctls)
        missing = bool(gpu.processes_unread)
        if not missing:  # a held interval is split later, by the list that covers it
            state.methods[split.method] = state.methods.get(split.method, 0) + 1
        weights: dict[TaskKey, float] = {}
        for pid, w in split.weights.items():
            key = pid_keys.get(pid)
            if key is None:
                key = (pid, UNMAPPED_START)
                extra_owner[key] = UNKNOWN
            weights[key] = weights.get(key, 0.0) + w
        idle_weights: Mapping[TaskKey, float] | None = None
        idle_containers: Mapping[ContainerRef, float] | None = None
        attributable_idle = idle
        if self._idle_policy is IdleAttribution.ACTIVITY and weights and not missing:
            idle_weights = weights
        elif self._idle_policy is IdleAttribution.HOLDERS:
            context = {pid: owner.get(key, UNKNOWN) for pid, key in pid_keys.items()}
            by_container: dict[ContainerRef, float] = {}
            for key, w in weights.items():
                ref = extra_owner.get(key) or owner.get(key, UNKNOWN)
                by_container[ref] = by_container.get(ref, 0.0) + w
            held, fraction = idle_holders(
                gpu, self._holders, set(owner.values()), context, by_container
            )
            if held:
                idle_containers = held
                attributable_idle = idle * fraction
        elif self._idle_policy is IdleAttribution.REQUESTS and self._holders is not None:
            held, fraction = holder_weights(gpu, self._holders, set(owner.values()))
            if held:
                idle_containers = held
                attributable_idle = idle * fraction
        return ZoneEnergy(
            GPU_ZONE,
            str(gpu.index),
            active,
            attributable_idle,
            weights,
            idle_weights,
            idle_containers=idle_containers,
        )

    # -- snapshot ----------------------------------------------------------------------------

    def counters(self) -> tuple[GpuCounters, ...]:
        out = []
        for state in sorted(self._gpus.values(), key=lambda s: (s.index, s.uuid)):
            out.append(
                GpuCounters(
                    index=state.index,
                    uuid=state.uuid,
                    model=state.model,
                    pci_bus_id=state.pci_bus_id,
                    driver_version=self._driver_version,
                    cuda_version=self._cuda_version,
                    mig_mode=state.mig_mode,
                    lost=state.lost,
                    vendor=state.vendor,
                    reading=state.reading,
                    energy=tuple(
                        GpuEnergy(source, mode, joules)
                        for (source, mode), joules in sorted(state.energy.items())
                    ),
                    attribution=tuple(sorted(state.methods.items())),
                    xid_errors=tuple(sorted(state.xids.items())),
                )
            )
        return tuple(out)

    def device_health(self, source: str) -> tuple[DeviceHealth, ...]:
        return tuple(
            DeviceHealth(
                source if state.backend == "nvml" else state.backend,
                GPU_ZONE,
                str(state.index),
                state.meter.health(),
            )
            for state in sorted(self._gpus.values(), key=lambda s: (s.index, s.uuid))
        )

    def container_memory(self, names: ContainerNames) -> tuple[ContainerGpuMemory, ...]:
        totals: dict[tuple[int, str, ContainerRef], int] = {}
        for gpu, ref, used in self._memory:
            key = (gpu.index, gpu.uuid, ref)
            totals[key] = totals.get(key, 0) + used
        out = []
        for (index, uuid, ref), used in sorted(totals.items(), key=lambda kv: kv[0][:2]):
            namespace, pod, container = names(ref)
            out.append(
                ContainerGpuMemory(
                    str(index), uuid, ref.container_id, container, pod, namespace, used, ref.pod_uid
                )
            )
        return tuple(out)


# NVML's power readings may exceed the enforced limit briefly (excursions); more than twice the
# limit is garbage. A GPU that reports no limit gets the generic bound.
POWER_LIMIT_HEADROOM = 2.0


def _device_sample(gpu: GpuReading, stamp: float) -> DeviceSample:
    limit = gpu.power_limit_w if gpu.power_limit_w and gpu.power_limit_w > 0 else None
    return DeviceSample(
        stamp=stamp,
        energy_uj=gpu.energy_mj * 1000 if gpu.energy_mj is not None else None,
        power_w=gpu.power_w,
        max_power_w=limit * POWER_LIMIT_HEADROOM if limit else None,
        rated_power_w=limit,
        fault="lost" if gpu.lost else gpu.fault,
    )


def _state_key(gpu: GpuReading) -> str:
    return gpu.uuid or f"index:{gpu.index}"


def _utilization(gpu: GpuReading) -> float | None:
    """Evidence for the idle baseline. MIG GPUs report no utilization: no evidence, so their idle
    stays at the prior rather than being learned from load."""
    if gpu.mig_enabled or gpu.mig_instances:
        return None
    return gpu.utilization_ratio


def _count_xids(state: _GpuState, counts: Iterable[tuple[int, int]]) -> None:
    """Add the watcher's new events; a watcher restarted with NVML starts again from zero."""
    for xid, count in counts:
        seen = state.xids_seen.get(xid, 0)
        new = count - seen if count >= seen else count
        if new > 0:
            state.xids[xid] = state.xids.get(xid, 0) + new
        state.xids_seen[xid] = count


def _add(totals: dict[tuple[str, str], float], key: tuple[str, str], amount: float) -> None:
    totals[key] = totals.get(key, 0.0) + amount


def _gpu_pids(gpu: GpuReading) -> Iterable[int]:
    """Every PID the reading names on this GPU."""
    for p in gpu.processes:
        yield p.pid
    for inst in gpu.mig_instances:
        for p in inst.processes:
            yield p.pid
    for u in gpu.process_utilization or ():
        yield u.pid
    for e in gpu.process_engine_time or ():
        yield e.pid


def _container_memory(
    gpu: GpuReading, pid_keys: Mapping[int, TaskKey], owner: Mapping[TaskKey, ContainerRef]
) -> Iterable[tuple[GpuReading, ContainerRef, int]]:
    processes = [p for inst in gpu.mig_instances for p in inst.processes] or gpu.processes
    for p in processes:
        if p.used_memory_bytes is None:
            continue
        key = pid_keys.get(p.pid)
        yield gpu, owner.get(key, UNKNOWN) if key is not None else UNKNOWN, p.used_memory_bytes
