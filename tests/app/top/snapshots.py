"""Snapshots built by hand for the `top` unit tests: known counters, so known watts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from exporter.model.gpu_readings import GpuReading
from exporter.model.gpu_snapshot import GpuCounters, GpuEnergy
from exporter.model.readings import SourceStatus
from exporter.model.snapshot import (
    EMPTY_SNAPSHOT,
    ContainerCounters,
    Energy,
    NodeZoneEnergy,
    PodCounters,
    Snapshot,
)

# (zone, gpu) -> active joules
EnergyMap = Mapping[tuple[str, str], float]


def energy(amounts: EnergyMap) -> tuple[Energy, ...]:
    return tuple(Energy(z, g, "active", j) for (z, g), j in sorted(amounts.items()))


def container(
    n: int,
    amounts: EnergyMap,
    cpu_seconds: float,
    *,
    pod_uid: str = "",
    name: str = "",
    pod: str = "",
    namespace: str = "",
) -> ContainerCounters:
    return ContainerCounters(
        container_id=f"{n:02x}" * 32,
        pod_uid=pod_uid,
        container=name,
        pod=pod,
        namespace=namespace,
        energy=energy(amounts),
        cpu_seconds=cpu_seconds,
        gpu_ioctls=(),
    )


def pods_of(containers: Sequence[ContainerCounters]) -> tuple[PodCounters, ...]:
    totals: dict[str, dict[tuple[str, str], float]] = {}
    names: dict[str, tuple[str, str]] = {}
    cpu: dict[str, float] = {}
    for c in containers:
        if not c.pod_uid:
            continue
        acc = totals.setdefault(c.pod_uid, {})
        cpu[c.pod_uid] = cpu.get(c.pod_uid, 0.0) + c.cpu_seconds
        names[c.pod_uid] = (c.pod, c.namespace)
        for e in c.energy:
            acc[(e.zone, e.gpu)] = acc.get((e.zone, e.gpu), 0.0) + e.joules
    return tuple(
        PodCounters(uid, names[uid][0], names[uid][1], energy(acc), cpu_seconds=cpu[uid])
        for uid, acc in totals.items()
    )


def gpu(index: int, joules: float, *, power_w: float = 300.0, lost: bool = False) -> GpuCounters:
    reading = GpuReading(
        index=index,
        uuid=f"GPU-{index:04d}",
        name="NVIDIA H100 80GB HBM3",
        pci_bus_id=f"00000000:{index:02X}:00.0",
        lost=lost,
        utilization_ratio=0.5,
        memory_used_bytes=40 * 2**30,
        memory_total_bytes=80 * 2**30,
        temperature_c=55.0,
        power_w=power_w,
        power_limit_w=700.0,
    )
    return GpuCounters(
        index=index,
        uuid=reading.uuid,
        model=reading.name,
        pci_bus_id=reading.pci_bus_id,
        driver_version="550.54.15",
        cuda_version="12.4",
        mig_mode="disabled",
        lost=lost,
        reading=reading,
        energy=(GpuEnergy("nvml_energy", "active", joules),),
    )


def snapshot(
    sequence: int,
    timestamp: float,
    *,
    node: Sequence[NodeZoneEnergy] = (),
    containers: Sequence[ContainerCounters] = (),
    gpus: Sequence[GpuCounters] = (),
    sources: Sequence[SourceStatus] = (SourceStatus("procfs", True),),
    cpu_usage: float | None = 0.25,
) -> Snapshot:
    return Snapshot(
        **{
            **EMPTY_SNAPSHOT.__dict__,
            "sequence": sequence,
            "timestamp": timestamp,
            "ready": sequence > 1,
            "cpu_usage_ratio": cpu_usage,
            "node_energy": tuple(node),
            "containers": tuple(containers),
            "pods": pods_of(containers),
            "sources": tuple(sources),
            "gpus": tuple(gpus),
        }
    )
