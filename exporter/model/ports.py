"""The interfaces the monitor depends on: what a power source, an activity source, a GPU backend
and a pod-identity source must offer. Sources implement them structurally (they need not import
this module); exporter/app/wiring.py builds the parts and exporter/accounting/monitor.py steps
them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from exporter.model.gpu_readings import GpuReadings
from exporter.model.identity import ContainerRef, WorkloadNames
from exporter.model.readings import CpuTimes, EnergyReading, MapStats, SourceStatus, TaskSample
from exporter.model.snapshot import EstimateInfo, GpuAllocation, PodInfo


class PowerSource(Protocol):
    """Node energy by zone, read every interval (RAPL, hwmon, the estimate)."""

    name: str

    def read(self) -> Sequence[EnergyReading]: ...


@runtime_checkable
class DescribesEstimate(Protocol):
    """A modelled power source (the estimate) says where its model comes from."""

    name: str

    def estimate_info(self) -> EstimateInfo | None: ...


class CpuTimesSource(Protocol):
    """The node's busy and idle CPU time (/proc/stat)."""

    def cpu_times(self) -> CpuTimes: ...


class ActivitySource(Protocol):
    """CPU time and GPU ioctls per task: a process, or a cgroup's bucket (procfs, eBPF)."""

    name: str

    def tasks(self) -> Sequence[TaskSample]: ...


@runtime_checkable
class ReportsMapStats(Protocol):
    """An activity source with bounded kernel maps (eBPF) reports their fill and evictions."""

    def map_stats(self) -> Sequence[MapStats]: ...


class GpuBackend(Protocol):
    """One vendor interface's GPUs (NVML, DRM), read all at once into vendor-neutral readings."""

    name: str  # the source name on wattprobe_source_up

    def read(self) -> GpuReadings:
        """All GPUs now; raises SourceError when the backend cannot read at all."""
        ...

    def close(self) -> None:
        """Release the library and stop any event thread."""
        ...


class PodIdentity(Protocol):
    """Who runs where, from a source on its own threads (the kubelet or the apiserver, and
    PodResources): names for containers and pods, the containers holding each GPU, pod info
    and GPU allocations, and its own health. Every accessor returns its latest state at once."""

    names: WorkloadNames

    def statuses(self) -> Sequence[SourceStatus]: ...

    def gpu_holders(self, uuid: str) -> Sequence[ContainerRef]: ...

    def pod_info(self) -> Sequence[PodInfo]: ...

    def gpu_allocations(self) -> Sequence[GpuAllocation]: ...

    def cdi_rejections(self) -> Sequence[tuple[str, int]]:
        """CDI spec files refused so far, per reason (a counter)."""
        ...
