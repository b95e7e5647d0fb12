"""GPU device IDs as device plugins report them in PodResources -> the GPU they name.

Formats seen in the wild:
  GPU-<uuid>                 NVIDIA device plugin, uuid strategy (the default)
  GPU-<uuid>::<n>            ... time-sliced or MPS-shared: replica n of that GPU
  MIG-<uuid>                 ... a MIG device (driver R470+ UUIDs)
  MIG-GPU-<uuid>/<gi>/<ci>   ... a MIG device, older drivers (names its parent GPU)
  <i>, <i>::<n>, <i>:<m>     ... index strategy: GPU i, replica n, MIG device m on GPU i
  nvidia<N>                  GKE's plugin: the GPU behind /dev/nvidia<N> (minor number N)
  nvidia<N>/vgpu<k>          ... time-shared replica k
  nvidia<N>/gi<g>            ... MIG partition (GPU instance g)
The GPU index and, for index or minor based IDs, the UUID are known only from NVML; a
GpuDirectory carries what NVML knows (empty without it), and unknown parts stay "".
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from exporter.snapshot import GpuAllocation

GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")

_REPLICA = re.compile(r"^(?P<base>.+?)(?:::\d+|/vgpu\d+)$")
_LEGACY_MIG = re.compile(r"^MIG-(?P<gpu>GPU-[0-9A-Fa-f-]+)/\d+/\d+$")
_MINOR = re.compile(r"^nvidia(?P<minor>\d+)(?P<gi>/gi\d+)?$")
_INDEX = re.compile(r"^(?P<index>\d+)(?P<mig>:\d+)?$")


def is_gpu_resource(resource_name: str) -> bool:
    return resource_name.startswith(GPU_RESOURCE_PREFIXES)


@dataclass(frozen=True)
class GpuDirectory:
    """What NVML knows about this node's GPUs; every table may be empty."""

    index_by_uuid: Mapping[str, str] = field(default_factory=dict)  # GPU-... -> "0"
    parent_by_mig_uuid: Mapping[str, str] = field(default_factory=dict)  # MIG-... -> GPU-...
    index_by_minor: Mapping[int, str] = field(default_factory=dict)  # /dev/nvidiaN -> index

    def uuid_of_index(self, index: str) -> str:
        for uuid, i in self.index_by_uuid.items():
            if i == index:
                return uuid
        return ""


EMPTY_DIRECTORY = GpuDirectory()


@dataclass(frozen=True, slots=True)
class GpuRef:
    """The GPU a device ID names."""

    uuid: str  # physical GPU UUID, "" when unknown
    gpu: str  # NVML index, "" when unknown
    instance: str  # the MIG device (as the ID names it) for MIG allocations, else ""


def resolve_device(device_id: str, directory: GpuDirectory = EMPTY_DIRECTORY) -> GpuRef | None:
    """The GPU behind one PodResources device ID; None for a format that names no NVIDIA GPU."""
    base = device_id.strip()
    replica = _REPLICA.match(base)
    if replica is not None:
        base = replica.group("base")
    uuid = index = instance = ""
    if base.startswith("GPU-"):
        uuid = base
    elif (legacy := _LEGACY_MIG.match(base)) is not None:
        uuid, instance = legacy.group("gpu"), base
    elif base.startswith("MIG-"):
        instance = base
        uuid = directory.parent_by_mig_uuid.get(base, "")
    elif (minor := _MINOR.match(base)) is not None:
        # without NVML's minor numbers, assume minor == index (true unless GPUs were hidden)
        n = int(minor.group("minor"))
        index = directory.index_by_minor.get(n, str(n))
        instance = base if minor.group("gi") else ""
    elif (by_index := _INDEX.match(base)) is not None:
        index = by_index.group("index")
        instance = base if by_index.group("mig") else ""
    else:
        return None
    if uuid and not index:
        index = directory.index_by_uuid.get(uuid, "")
    if index and not uuid:
        uuid = directory.uuid_of_index(index)
    return GpuRef(uuid=uuid, gpu=index, instance=instance)


@dataclass(frozen=True, slots=True)
class DeviceAssignment:
    """One device a container holds, as PodResources reports it (names, no uids)."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str


def gpu_allocations(
    assignments: Iterable[DeviceAssignment], directory: GpuDirectory = EMPTY_DIRECTORY
) -> tuple[GpuAllocation, ...]:
    """wattprobe_gpu_allocation_info rows: one per (GPU or MIG device, container); two replicas
    of one time-sliced GPU held by the same container are one row."""
    rows: set[GpuAllocation] = set()
    for a in assignments:
        if not is_gpu_resource(a.resource):
            continue
        ref = resolve_device(a.device_id, directory)
        if ref is None:
            continue
        rows.add(GpuAllocation(ref.gpu, ref.uuid, ref.instance, a.namespace, a.pod, a.container))
    return tuple(sorted(rows, key=_row_key))


def _row_key(row: GpuAllocation) -> tuple[str, ...]:
    return (row.gpu, row.uuid, row.gpu_instance, row.namespace, row.pod, row.container)


def holders_of(
    uuid: str, assignments: Iterable[DeviceAssignment], directory: GpuDirectory = EMPTY_DIRECTORY
) -> list[tuple[str, str, str]]:
    """(namespace, pod, container) of every container holding the GPU or MIG device `uuid`:
    a physical GPU's UUID also matches the MIG devices carved from it (when their parent is
    known) and all its time-slices."""
    found: dict[tuple[str, str, str], None] = {}
    for a in assignments:
        if not is_gpu_resource(a.resource):
            continue
        ref = resolve_device(a.device_id, directory)
        if ref is not None and uuid in (ref.uuid, ref.instance):
            found[(a.namespace, a.pod, a.container)] = None
    return list(found)
