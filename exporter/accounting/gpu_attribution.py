"""Pure functions that decide how one GPU's energy is split among processes and containers.

Active energy, per GPU, by the first signal that has something to say:
0. engine share: per-process engine busy time in the interval (DRM GPUs: fdinfo's drm-engine-*
   ns or drm-cycles-*, exporter/sources/gpu/drm/clients.py), the AMD/Intel counterpart of 1;
1. SM share: per-process SM utilization summed over NVML's samples since the last read;
2. memory share: each process's GPU memory;
3. ioctl share: the GPU's driver's ioctls (NVIDIA's; DRM's for DRM GPUs) per process counted
   by eBPF (among the GPU's processes, or among all processes that issued any when NVML lists
   none, e.g. without hostPID);
4. even among the GPU's processes;
5. none: nobody to give it to (the monitor books it to the unattributed pseudo task).
MIG GPUs have no per-process (or per-instance) utilization in NVML, so they are split by the
processes' memory ("mig_memory"), an approximation: memory held is not work done.

Idle energy with --attribution.idle=holders (the default) goes to the pods that hold the GPU:
those kubelet PodResources names, else those with a process that has a context on it; split by
their active share in the interval, evenly when none was active (idle_holders). With
--attribution.idle=requests it goes evenly to the PodResources holders alone (holder_weights).
For MIG, each instance's holders take the instance's share (by its size).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from exporter.model.gpu_readings import GpuProcess, GpuReading
from exporter.model.identity import ContainerRef

ENGINE = "engine"
SM = "sm"
MEMORY = "memory"
MIG_MEMORY = "mig_memory"
IOCTL = "ioctl"
EVEN = "even"
NONE = "none"
METHODS = (ENGINE, SM, MEMORY, MIG_MEMORY, IOCTL, EVEN, NONE)

NVIDIA_DRIVER = "nvidia"  # the driver name eBPF counts NVIDIA ioctls under
DRM_DRIVER = "drm"  # ... and DRM ioctls (/dev/dri/*)

GpuHolders = Callable[[str], Sequence[ContainerRef]]


@dataclass(frozen=True)
class ProcessSplit:
    """How a GPU's active energy is split in one interval: the method and weights per PID."""

    method: str
    weights: Mapping[int, float]


def _processes(gpu: GpuReading) -> tuple[GpuProcess, ...]:
    from_instances = tuple(p for inst in gpu.mig_instances for p in inst.processes)
    return from_instances or gpu.processes


def process_weights(gpu: GpuReading, ioctls_by_pid: Mapping[int, float]) -> ProcessSplit:
    """The weights per PID that split this GPU's active energy (see the module docstring)."""
    processes = _processes(gpu)
    if gpu.mig_enabled or gpu.mig_instances:
        split = _mig_memory(gpu, processes)
        if split is not None:
            return split
    else:
        engine = {e.pid: e.busy for e in gpu.process_engine_time or () if e.busy > 0}
        if engine:
            return ProcessSplit(ENGINE, engine)
        sm = {u.pid: u.sm_percent for u in gpu.process_utilization or () if u.sm_percent > 0}
        if sm:
            return ProcessSplit(SM, sm)
        memory = {p.pid: float(p.used_memory_bytes) for p in processes if p.used_memory_bytes}
        if memory:
            return ProcessSplit(MEMORY, memory)
    return _ioctl_or_even({p.pid for p in processes}, ioctls_by_pid)


def _mig_memory(gpu: GpuReading, processes: Sequence[GpuProcess]) -> ProcessSplit | None:
    weights: dict[int, float] = {}
    for p in processes:
        if p.used_memory_bytes:
            weights[p.pid] = weights.get(p.pid, 0.0) + p.used_memory_bytes
    if weights:
        return ProcessSplit(MIG_MEMORY, weights)
    # No per-process memory (NVML hides it without privileges): each instance's memory,
    # spread evenly over the instance's processes.
    for inst in gpu.mig_instances:
        if inst.processes and inst.memory_used_bytes:
            share = inst.memory_used_bytes / len(inst.processes)
            for p in inst.processes:
                weights[p.pid] = weights.get(p.pid, 0.0) + share
    return ProcessSplit(MIG_MEMORY, weights) if weights else None


def _ioctl_or_even(pids: set[int], ioctls_by_pid: Mapping[int, float]) -> ProcessSplit:
    ioctls = {
        pid: float(n) for pid, n in ioctls_by_pid.items() if n > 0 and (not pids or pid in pids)
    }
    if ioctls:
        return ProcessSplit(IOCTL, ioctls)
    if pids:
        return ProcessSplit(EVEN, dict.fromkeys(sorted(pids), 1.0))
    return ProcessSplit(NONE, {})


def match_holders(
    holders: Iterable[ContainerRef], live: Iterable[ContainerRef]
) -> dict[ContainerRef, float]:
    """Weights (1 per holder) on the live containers the holders name.

    PodResources-derived refs may differ from cgroup-derived ones in runtime or QoS, so a holder
    matches a live container by container id; a holder with only a pod UID stands for all the
    pod's live containers, which share its weight. Holders with nothing live are dropped: their
    energy could not reach a process.
    """
    by_id: dict[str, ContainerRef] = {}
    by_pod: dict[str, list[ContainerRef]] = {}
    for ref in live:
        if ref.container_id:
            by_id[ref.container_id] = ref
            if ref.pod_uid:
                by_pod.setdefault(ref.pod_uid, []).append(ref)
    weights: dict[ContainerRef, float] = {}
    for holder in holders:
        if holder.container_id:
            matched = [by_id[holder.container_id]] if holder.container_id in by_id else []
        else:
            matched = sorted(set(by_pod.get(holder.pod_uid, ())), key=lambda r: r.container_id)
        for ref in matched:
            weights[ref] = weights.get(ref, 0.0) + 1.0 / len(matched)
    return weights


def holder_weights(
    gpu: GpuReading, holders: GpuHolders, live: Iterable[ContainerRef]
) -> tuple[dict[ContainerRef, float], float]:
    """(container weights, fraction of the GPU's idle energy they take) for the requests policy.

    A whole GPU: its holders take all of its idle energy, evenly. A MIG GPU: each instance
    stands for its share of the GPU (by memory size); the idle energy of instances nobody holds
    stays on the node.
    """
    live = list(live)
    if gpu.mig_instances:
        sizes = [float(inst.memory_total_bytes or 1) for inst in gpu.mig_instances]
        total = math.fsum(sizes)
        weights: dict[ContainerRef, float] = {}
        held = 0.0
        for inst, size in zip(gpu.mig_instances, sizes, strict=True):
            matched = match_holders(holders(inst.uuid), live) if inst.uuid else {}
            if not matched:
                continue
            held += size
            count = math.fsum(matched.values())
            for ref, w in matched.items():
                weights[ref] = weights.get(ref, 0.0) + size * w / count
        if weights:
            return weights, min(1.0, held / total) if total > 0 else 1.0
    whole = match_holders(holders(gpu.uuid), live) if gpu.uuid else {}
    return whole, 1.0 if whole else 0.0


def idle_holders(
    gpu: GpuReading,
    holders: GpuHolders | None,
    live: Iterable[ContainerRef],
    context: Mapping[int, ContainerRef],
    active: Mapping[ContainerRef, float],
) -> tuple[dict[ContainerRef, float], float]:
    """(container weights, fraction of the GPU's idle energy they take) for the holders policy.

    Per whole GPU, or per MIG instance standing for its share of the GPU (by memory size), the
    holders are the containers PodResources names where it names any, else the pods' containers
    whose processes have a context on it (context: PID -> container). They split their unit's
    idle by their active share in the interval (active: container -> weight), evenly when none
    of them was active. Units nobody holds keep their idle on the node.
    """
    live = list(live)
    units = [
        (inst.uuid, float(inst.memory_total_bytes or 1), inst.processes)
        for inst in gpu.mig_instances
    ] or [(gpu.uuid, 1.0, _processes(gpu))]
    total = math.fsum(size for _, size, _ in units)
    weights: dict[ContainerRef, float] = {}
    held = 0.0
    for uuid, size, processes in units:
        holding = match_holders(holders(uuid), live) if holders is not None and uuid else {}
        if not holding:
            in_pods = (context.get(p.pid) for p in processes)
            holding = {ref: 1.0 for ref in in_pods if ref is not None and ref.pod_uid}
        if not holding:
            continue
        held += size
        by_activity = {ref: active.get(ref, 0.0) for ref in holding}
        split = by_activity if math.fsum(by_activity.values()) > 0 else holding
        count = math.fsum(split.values())
        for ref, w in split.items():
            weights[ref] = weights.get(ref, 0.0) + size * w / count
    return weights, min(1.0, held / total) if weights and total > 0 else 0.0


def ioctls_by_pid(
    ioctl_deltas: Mapping[tuple[int, int], Mapping[str, int]],
    driver: str = NVIDIA_DRIVER,
) -> dict[int, float]:
    """One driver's ioctls (NVIDIA's by default) per PID in the interval, from the monitor's
    per-task deltas."""
    out: dict[int, float] = {}
    for (pid, _start), counts in ioctl_deltas.items():
        n = counts.get(driver, 0)
        if pid > 0 and n > 0:
            out[pid] = out.get(pid, 0.0) + n
    return out
