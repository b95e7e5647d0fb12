"""The GPU part of a Snapshot: per-GPU gauges and cumulative energy, per-container GPU memory."""

from __future__ import annotations

from dataclasses import dataclass

from exporter.model.gpu_readings import GpuReading

# source label of wattprobe_gpu_energy_joules_total: how the joules were measured
ENERGY_COUNTER = "nvml_energy"  # nvmlDeviceGetTotalEnergyConsumption deltas
POWER_INTEGRAL = "nvml_power"  # power samples integrated over the interval (pre-Volta)


def energy_source(backend: str, *, counter: bool) -> str:
    """The source label for a backend's GPU: nvml_energy / nvml_power for NVML, drm_energy
    (hwmon energy1_input) / drm_power (hwmon power1_* integrated) for DRM GPUs."""
    return f"{backend}_energy" if counter else f"{backend}_power"


@dataclass(frozen=True, slots=True)
class GpuEnergy:
    source: str  # nvml_energy or nvml_power
    mode: str  # active or idle
    joules: float


@dataclass(frozen=True, slots=True)
class GpuCounters:
    """One GPU as of the end of the interval."""

    index: int
    uuid: str
    model: str
    pci_bus_id: str
    driver_version: str
    cuda_version: str
    mig_mode: str  # enabled, disabled, or "" when unknown
    lost: bool
    reading: GpuReading | None  # this interval's gauges; None when NVML could not be read
    energy: tuple[GpuEnergy, ...]  # cumulative since start
    attribution: tuple[tuple[str, int], ...] = ()  # (method, intervals) since start
    xid_errors: tuple[tuple[int, int], ...] = ()  # (xid, events) since start
    vendor: str = "nvidia"  # nvidia, amd or intel


@dataclass(frozen=True, slots=True)
class ContainerGpuMemory:
    """GPU memory held by one container's processes on one GPU, at the end of the interval."""

    gpu: str
    uuid: str
    container_id: str
    container: str
    pod: str
    namespace: str
    used_bytes: int
    pod_uid: str = ""
