"""The immutable result of one interval: cumulative counters for every series at one instant.

Scrapes read only the latest Snapshot, so every series in one scrape comes from the same
instant and the energy sums balance exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter.model.gpu_snapshot import ContainerGpuMemory, GpuCounters
from exporter.model.health import MeterHealth
from exporter.model.readings import MapStats, SourceStatus, TaskKey


@dataclass(frozen=True, slots=True)
class Energy:
    """Cumulative joules of one series."""

    zone: str
    gpu: str  # "" except for zone="gpu"
    mode: str  # active or idle
    joules: float


# Why energy could not be attributed (exporter/accounting/pending.py): the activity read gave
# nothing in time (still running, or timed out), or it failed. A bounded set: a label value.
UNATTRIBUTED_LATE = "late"
UNATTRIBUTED_FAILED = "failed"
UNATTRIBUTED_REASONS = (UNATTRIBUTED_LATE, UNATTRIBUTED_FAILED)
# A GPU's active energy whose process list could not be read (exporter/accounting/gpu.py).
UNATTRIBUTED_NO_PROCESS_LIST = "no_process_list"


@dataclass(frozen=True, slots=True)
class UnattributedEnergy:
    """Cumulative joules of a zone kind given up for want of an activity reading
    (exporter/accounting/pending.py), per reason."""

    zone: str
    gpu: str
    mode: str
    reason: str
    joules: float


@dataclass(frozen=True, slots=True)
class NodeZoneEnergy:
    zone: str
    device: str
    source: str  # rapl, hwmon, estimated
    active_j: float
    idle_j: float


@dataclass(frozen=True, slots=True)
class ContainerCounters:
    container_id: str
    pod_uid: str
    container: str  # name, or the pseudo-container name
    pod: str
    namespace: str
    energy: tuple[Energy, ...]
    cpu_seconds: float
    gpu_ioctls: tuple[tuple[str, int], ...]  # (driver, count)
    retired_processes: tuple[Energy, ...] = ()  # energy of this container's dropped processes


@dataclass(frozen=True, slots=True)
class PodCounters:
    pod_uid: str
    pod: str
    namespace: str
    energy: tuple[Energy, ...]
    cpu_seconds: float = 0.0  # CPU time of all its containers' tasks, dropped containers included
    retired_containers: tuple[Energy, ...] = ()  # energy of this pod's dropped containers


@dataclass(frozen=True, slots=True)
class DeviceHealth:
    """One measured device (a RAPL zone, an hwmon sensor, a GPU): its meter's read health,
    rejected readings and idle baseline."""

    source: str
    zone: str
    device: str
    meter: MeterHealth


@dataclass(frozen=True, slots=True)
class EstimateInfo:
    """Where the estimated power comes from (wattprobe_estimate_info), while it is in use."""

    cpu_model: str
    instance_type: str
    basis: str


@dataclass(frozen=True, slots=True)
class ProcessCounters:
    task: TaskKey  # identity (pid, start time); not exported
    pid: int
    comm: str
    container_id: str
    pod_uid: str
    container: str
    energy: tuple[Energy, ...]


@dataclass(frozen=True, slots=True)
class PodInfo:
    """One wattprobe_pod_info series: a pod's identity and its allow-listed Kubernetes labels."""

    pod_uid: str
    pod: str
    namespace: str
    labels: tuple[tuple[str, str], ...]  # (Kubernetes label key, value), allow-listed only


@dataclass(frozen=True, slots=True)
class GpuAllocation:
    """One wattprobe_gpu_allocation_info series: a container holds (a share of) a GPU."""

    gpu: str  # NVML index; "" while unknown
    uuid: str  # physical GPU UUID; "" while unknown (a MIG device whose parent is not known yet)
    gpu_instance: str  # MIG GPU instance id (as on NVML's MIG series), else ""
    mig_device: str  # the MIG device as the device plugin names it, else ""
    namespace: str
    pod: str
    container: str
    claim: str = ""  # the DRA ResourceClaim that gave it, "" for device plugin allocations
    # the device plugin resource it was allocated as (nvidia.com/gpu, nvidia.com/mig-1g.10gb):
    # what a GPU-hour price per resource applies to; "" for DRA claims (no resource name)
    resource: str = ""


@dataclass(frozen=True)
class Snapshot:
    sequence: int
    timestamp: float  # unix seconds at the end of the interval
    interval_s: float  # length of the interval that produced the last increments
    ready: bool  # at least one full interval has been measured
    cpu_usage_ratio: float | None
    node_energy: tuple[NodeZoneEnergy, ...]
    containers: tuple[ContainerCounters, ...]
    pods: tuple[PodCounters, ...]
    processes: tuple[ProcessCounters, ...]
    retired_containers: tuple[Energy, ...]  # all energy of containers already dropped
    sources: tuple[SourceStatus, ...]
    attributed_zones: tuple[str, ...]  # node zones whose energy is split among workloads
    gpus: tuple[GpuCounters, ...] = ()
    gpu_container_memory: tuple[ContainerGpuMemory, ...] = ()
    ebpf_maps: tuple[MapStats, ...] = ()  # fill and evictions of the eBPF maps, when in use
    pod_info: tuple[PodInfo, ...] = ()  # only with --kube.pod-labels
    gpu_allocations: tuple[GpuAllocation, ...] = ()  # from the kubelet's PodResources API
    cdi_rejections: tuple[tuple[str, int], ...] = ()  # CDI spec files refused, per reason
    devices: tuple[DeviceHealth, ...] = ()  # every device a meter has seen, GPUs included
    estimate: EstimateInfo | None = None  # while the estimate is in use
    # Attributed zones' energy not (yet) on any workload: given up, and held now
    # (node active == workloads' active + unattributed + pending, per zone kind).
    unattributed: tuple[UnattributedEnergy, ...] = ()
    pending: tuple[Energy, ...] = ()


EMPTY_SNAPSHOT = Snapshot(
    sequence=0,
    timestamp=0.0,
    interval_s=0.0,
    ready=False,
    cpu_usage_ratio=None,
    node_energy=(),
    containers=(),
    pods=(),
    processes=(),
    retired_containers=(),
    sources=(),
    attributed_zones=(),
)
