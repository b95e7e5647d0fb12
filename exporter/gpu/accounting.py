"""Per-GPU energy accounting for the monitor: deltas, idle baselines, and the zones to attribute.

Every interval, per GPU: dE from the total-energy counter (or, where the GPU has none, power
integrated over the interval; the source label says which), idle = min(P_idle * dt, dE) with a
per-GPU IdleBaseline, active = dE - idle. The active energy becomes a ZoneEnergy("gpu", index)
whose task weights come from exporter.gpu.attribution; the monitor attributes it with the CPU
zones, so containers and pods get zone="gpu", gpu="<index>" series.

NVML PIDs are mapped to the interval's tasks by PID. A GPU process with no task (its /proc
entry is not visible here, or it exited in between) keeps its energy under a pseudo task of the
"unknown_processes" pseudo-container, so the per-GPU sums stay exact.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from exporter.attribution import ACTIVE, IDLE, ZoneEnergy, split_active_idle
from exporter.config import IdleAttribution, IdlePower
from exporter.counters import MAX_PLAUSIBLE_POWER_W, counter_delta_uj, integrate_power_j
from exporter.gpu.attribution import (
    GpuHolders,
    holder_weights,
    ioctls_by_pid,
    process_weights,
)
from exporter.gpu.readings import GpuReading, NvmlReading
from exporter.gpu.snapshot import (
    ENERGY_COUNTER,
    POWER_INTEGRAL,
    ContainerGpuMemory,
    GpuCounters,
    GpuEnergy,
)
from exporter.identity import ContainerRef
from exporter.idle import IdleBaseline
from exporter.readings import SourceStatus, TaskKey, TaskSample

log = logging.getLogger(__name__)

GPU_ZONE = "gpu"
XID_SOURCE = "nvml_xid"
UNKNOWN_PROCESSES = "unknown_processes"
# GPU processes whose PID has no task this interval (not visible in this PID namespace).
UNKNOWN = ContainerRef(pseudo=UNKNOWN_PROCESSES)
UNMAPPED_START = -1  # start_ticks of such a process's pseudo task: never a real start time


class GpuSource(Protocol):
    name: str

    def read(self) -> NvmlReading: ...

    def close(self) -> None: ...


# What container names are looked up with: (namespace, pod, container) of a ContainerRef.
ContainerNames = Callable[[ContainerRef], tuple[str, str, str]]


@dataclass(frozen=True)
class GpuInterval:
    """What one interval's GPUs add to the monitor's attribution."""

    zones: list[ZoneEnergy]
    owner: dict[TaskKey, ContainerRef]  # pseudo tasks of unmapped GPU processes
    statuses: list[SourceStatus]


@dataclass
class _Baseline:
    """The previous reading of one GPU's energy, which this interval's delta is taken from."""

    energy_mj: int | None
    power_w: float | None
    stamp: float


@dataclass
class _GpuState:
    index: int
    uuid: str
    model: str
    pci_bus_id: str
    idle: IdleBaseline
    lost: bool = False
    mig_mode: str = ""
    previous: _Baseline | None = None
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
    ) -> None:
        self._idle_power = idle_power
        self._idle_policy = idle_policy
        self._holders = holders
        self._gpus: dict[str, _GpuState] = {}
        self._driver_version = ""
        self._cuda_version = ""
        self._memory: list[tuple[GpuReading, ContainerRef, int]] = []

    def interval(
        self,
        reading: NvmlReading | None,
        stamp: float,
        *,
        tasks: Sequence[TaskSample],
        ioctl_deltas: Mapping[TaskKey, Mapping[str, int]],
        owner: Mapping[TaskKey, ContainerRef],
    ) -> GpuInterval:
        """Energy deltas of this interval's GPU reading and the zones that split them."""
        for state in self._gpus.values():
            state.reading = None
        self._memory = []
        if reading is None:
            return GpuInterval([], {}, [])
        self._driver_version = reading.driver_version
        self._cuda_version = reading.cuda_version
        pid_keys = {t.pid: t.key for t in tasks if t.pid > 0 and not t.kernel_thread}
        ioctls = ioctls_by_pid(ioctl_deltas)
        extra_owner: dict[TaskKey, ContainerRef] = {}
        zones = []
        for gpu in reading.gpus:
            state = self._state(gpu)
            if gpu.lost:
                continue  # keep the old baseline: the gap is counted when the GPU is back
            self._memory.extend(_container_memory(gpu, pid_keys, owner))
            measured = self._measure(state, gpu, stamp)
            if measured is None:
                continue
            energy_j, source, dt = measured
            active, idle = self._split_idle(state, gpu, energy_j, dt)
            _add(state.energy, (source, ACTIVE), active)
            _add(state.energy, (source, IDLE), idle)
            zones.append(
                self._zone(
                    state,
                    gpu,
                    energy=(active, idle),
                    pid_keys=pid_keys,
                    ioctls=ioctls,
                    owner=owner,
                    extra_owner=extra_owner,
                )
            )
        statuses = []
        if reading.xid_watch is not None:
            w = reading.xid_watch
            statuses.append(SourceStatus(XID_SOURCE, w.up, w.reason, w.detail))
        return GpuInterval(zones, extra_owner, statuses)

    def _state(self, gpu: GpuReading) -> _GpuState:
        key = gpu.uuid or f"index:{gpu.index}"
        state = self._gpus.get(key)
        if state is None:
            state = _GpuState(
                index=gpu.index,
                uuid=gpu.uuid,
                model=gpu.name,
                pci_bus_id=gpu.pci_bus_id,
                idle=IdleBaseline(fixed_w=self._idle_power.for_zone(GPU_ZONE)),
            )
            self._gpus[key] = state
        state.index = gpu.index
        state.lost = gpu.lost
        state.reading = gpu
        if gpu.mig_enabled is not None:
            state.mig_mode = "enabled" if gpu.mig_enabled else "disabled"
        _count_xids(state, gpu.xid_errors)
        return state

    def _measure(
        self, state: _GpuState, gpu: GpuReading, stamp: float
    ) -> tuple[float, str, float] | None:
        """(joules, source, dt) since the previous reading; None on the first or a bad step.

        The baseline always moves to this reading, so that an interval integrated from power
        (the counter failed once) is never counted again by the next counter delta.
        """
        before, state.previous = state.previous, _Baseline(gpu.energy_mj, gpu.power_w, stamp)
        dt = stamp - before.stamp if before is not None else 0.0
        if before is None or dt <= 0:
            return None
        if before.energy_mj is not None and gpu.energy_mj is not None:
            delta_uj = counter_delta_uj(before.energy_mj * 1000, gpu.energy_mj * 1000, None, dt)
            if delta_uj is None:
                log.warning(
                    "GPU %d (%s): energy counter reset or implausible jump (%d -> %d mJ); "
                    "re-baselined",
                    gpu.index,
                    gpu.uuid,
                    before.energy_mj,
                    gpu.energy_mj,
                )
                return None
            return delta_uj / 1e6, ENERGY_COUNTER, dt
        if (
            before.power_w is not None
            and gpu.power_w is not None
            and math.isfinite(gpu.power_w)
            and 0 <= gpu.power_w <= MAX_PLAUSIBLE_POWER_W
        ):
            return integrate_power_j(before.power_w, gpu.power_w, dt), POWER_INTEGRAL, dt
        return None

    @staticmethod
    def _split_idle(
        state: _GpuState, gpu: GpuReading, energy_j: float, dt: float
    ) -> tuple[float, float]:
        # MIG GPUs report no utilization: observed at 0, the baseline falls back to a low
        # percentile of the power seen, which keeps more energy idle rather than less.
        state.idle.observe(gpu.utilization_ratio or 0.0, energy_j / dt)
        return split_active_idle(energy_j, state.idle.watts, dt)

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
        if self._idle_policy is IdleAttribution.ACTIVITY and weights:
            idle_weights = weights
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


def _container_memory(
    gpu: GpuReading, pid_keys: Mapping[int, TaskKey], owner: Mapping[TaskKey, ContainerRef]
) -> Iterable[tuple[GpuReading, ContainerRef, int]]:
    processes = [p for inst in gpu.mig_instances for p in inst.processes] or gpu.processes
    for p in processes:
        if p.used_memory_bytes is None:
            continue
        key = pid_keys.get(p.pid)
        yield gpu, owner.get(key, UNKNOWN) if key is not None else UNKNOWN, p.used_memory_bytes
