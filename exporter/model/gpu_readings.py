"""What a GPU device backend returns (exporter/sources/gpu/backend.py): plain frozen readings in
base
units, nothing about Prometheus and nothing tied to one vendor's library.

A field is None when the GPU does not support it or the call failed this interval; the backend
decides which (NVML's: exporter/sources/gpu/nvml/source.py). Energy stays an integer millijoule
counter so that deltas are exact. Vendor-specific parts are optional: MIG instances and
per-process SM samples (NVIDIA), error events keyed by the vendor's code (NVIDIA's XIDs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

COMPUTE = "compute"
# a MIG profile names its GPU instance's compute slices as "<Ng>g." ("3g.20gb", "1c.3g.20gb",
# "1g.10gb+me"); a GPU has 7 of them, an A30 4 (NVIDIA's MIG user guide, supported profiles)
_GI_SLICES = re.compile(r"(?:^|\.)(?P<n>[1-9])g\.")
_FOUR_SLICE_GPU = re.compile(r"\bA30")
GRAPHICS = "graphics"


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process with a context on a GPU (or on one MIG device of it)."""

    pid: int  # as NVML reports it: a PID in the exporter's PID namespace (the host's with hostPID)
    used_memory_bytes: int | None  # None: NVML does not tell (e.g. MIG without privileges)
    kind: str = COMPUTE  # compute or graphics
    gpu_instance: int | None = None  # MIG ids; None outside MIG
    compute_instance: int | None = None


@dataclass(frozen=True, slots=True)
class ProcessUtilization:
    """A process's SM and memory-controller use over the samples since the last read.

    sm_percent sums the per-sample percentages: proportional to the SM time the process got in
    the interval when samples are evenly spaced, which is all a share needs.
    """

    pid: int
    sm_percent: float
    memory_percent: float
    samples: int


@dataclass(frozen=True, slots=True)
class ProcessEngineTime:
    """A process's busy time on a GPU's engines over the interval, summed over its clients and
    engine classes (DRM fdinfo: drm-engine-* in ns, or drm-cycles-* in GPU cycles where the
    driver counts cycles). Only shares matter, so the unit is the same within one GPU."""

    pid: int
    busy: float


@dataclass(frozen=True, slots=True)
class MigInstanceReading:
    """One MIG device (a compute instance inside a GPU instance)."""

    uuid: str  # MIG-...; what the device plugin and PodResources name
    name: str  # e.g. "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
    gpu_instance: int
    compute_instance: int
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    processes: tuple[GpuProcess, ...] = ()

    @property
    def profile(self) -> str:
        """The MIG profile from the device name ("3g.20gb"), or "" when the name has none."""
        _, sep, tail = self.name.rpartition("MIG ")
        return tail.strip() if sep else ""

    @property
    def slice_ratio(self) -> float | None:
        """Its GPU instance's share of the GPU: the profile's compute slices over the GPU's
        (3g.20gb on an A100: 3/7); None when the name gives no profile. What a MIG device is
        priced at from a whole GPU's price (docs/showback.md)."""
        match = _GI_SLICES.search(self.profile)
        if match is None:
            return None
        total = 4 if _FOUR_SLICE_GPU.search(self.name) else 7
        return min(1.0, int(match.group("n")) / total)


@dataclass(frozen=True, slots=True)
class GpuReading:
    """One physical GPU at one instant."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    lost: bool = False  # NVML said GPU_IS_LOST (or reset required): nothing else was read
    mig_enabled: bool | None = None
    utilization_ratio: float | None = None
    memory_utilization_ratio: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    memory_reserved_bytes: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_mj: int | None = None  # total energy since the driver loaded (Volta and newer)
    sm_clock_hz: float | None = None
    memory_clock_hz: float | None = None
    clock_event_reasons: int | None = None  # nvmlClocksEventReason* bitmask
    pcie_replays: int | None = None
    ecc_corrected: int | None = None  # volatile: since the driver loaded
    ecc_uncorrected: int | None = None
    processes: tuple[GpuProcess, ...] = ()
    # None: per-process utilization is unavailable (unsupported, MIG); () means no samples
    process_utilization: tuple[ProcessUtilization, ...] | None = None
    mig_instances: tuple[MigInstanceReading, ...] = ()
    xid_errors: tuple[tuple[int, int], ...] = ()  # (xid, count) since start, cumulative
    # None: the backend has no per-process engine time (NVML: it has SM samples instead)
    process_engine_time: tuple[ProcessEngineTime, ...] | None = None
    vendor: str = "nvidia"  # nvidia, amd or intel: wattprobe_gpu_info's vendor label
    backend: str = "nvml"  # the backend that read it: the source of its energy and device_up
    # device nodes the backend knows it by (DRM: card1): how some device plugins name a GPU
    device_names: tuple[str, ...] = ()
    # why its power or energy could not be read although the GPU has the sensor ("" when it
    # could): a hostile or broken file shows on the GPU's device_up, not only in a log
    fault: str = ""
    # why its process list (running processes, per-process utilization or engine time) could
    # not be read this interval although the GPU gives one ("" when read, or not supported):
    # its active energy then waits for the list that covers it (exporter/accounting/gpu.py)
    processes_unread: str = ""


@dataclass(frozen=True, slots=True)
class EventWatch:
    """Whether the backend's error events (NVIDIA's XIDs) are being watched, and why not."""

    up: bool
    reason: str = ""
    detail: str = ""


@dataclass(frozen=True, slots=True)
class GpuReadings:
    """One read of all of a node's GPUs by one backend."""

    driver_version: str
    nvml_version: str  # the vendor library's version ("" where it has none)
    cuda_version: str  # the compute runtime's version: CUDA "12.4" for NVIDIA
    gpus: tuple[GpuReading, ...]
    event_watch: EventWatch | None = None
