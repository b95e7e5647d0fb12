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
The GPU index and, for index or minor based IDs, the UUID are known only from the GPU backend
(NVML); a GpuDirectory carries what it read (empty without it), and unknown parts stay "". MIG
devices also get their GPU instance id, as NVML's MIG series label it (gpu_instance).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from exporter.gpu.readings import GpuReading
from exporter.kernelnum import parse_uint
from exporter.snapshot import GpuAllocation

GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")

_REPLICA = re.compile(r"^(?P<base>.+?)(?:::\d+|/vgpu\d+)$")
_LEGACY_MIG = re.compile(r"^MIG-(?P<gpu>GPU-[0-9A-Fa-f-]+)/(?P<gi>\d+)/\d+$")
_MINOR = re.compile(r"^nvidia(?P<minor>\d+)(?:/gi(?P<gi>\d+))?$")
_INDEX = re.compile(r"^(?P<index>\d+)(?P<mig>:\d+)?$")


def is_gpu_resource(resource_name: str) -> bool:
    return resource_name.startswith(GPU_RESOURCE_PREFIXES)


@dataclass(frozen=True)
class GpuDirectory:
    """What NVML knows about this node's GPUs; every table may be empty."""

    index_by_uuid: Mapping[str, str] = field(default_factory=dict)  # GPU-... -> "0"
    parent_by_mig_uuid: Mapping[str, str] = field(default_factory=dict)  # MIG-... -> GPU-...
    index_by_minor: Mapping[int, str] = field(default_factory=dict)  # /dev/nvidiaN -> index
    instance_by_mig_uuid: Mapping[str, str] = field(default_factory=dict)  # MIG-... -> GI id

    def uuid_of_index(self, index: str) -> str:
        for uuid, i in self.index_by_uuid.items():
            if i == index:
                return uuid
        return ""


EMPTY_DIRECTORY = GpuDirectory()


def device_minors(procfs: Path) -> dict[str, int]:
    """PCI bus id (lower case, 4-digit domain) -> /dev/nvidiaN minor, from the driver's
    <procfs>/driver/nvidia/gpus/<bus>/information ("Device Minor: N")."""
    out: dict[str, int] = {}
    try:
        entries = list((procfs / "driver" / "nvidia" / "gpus").iterdir())
    except OSError:
        return out
    for entry in entries:
        try:
            text = (entry / "information").read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Device Minor":
                try:
                    out[_bus_id(entry.name)] = parse_uint(value.strip())
                except ValueError:
                    continue  # garbage or a number longer than the driver writes
    return out


def _bus_id(text: str) -> str:
    """'00000000:3B:00.0' (NVML) and '0000:3b:00.0' (procfs) -> '0000:3b:00.0'."""
    head, sep, tail = text.strip().lower().partition(":")
    try:
        return f"{int(head, 16):04x}:{tail}" if sep else text
    except ValueError:
        return text


def directory_from_gpus(gpus: Sequence[GpuReading], minors: Mapping[str, int]) -> GpuDirectory:
    """What the GPU backend's latest read tells about indexes, MIG parents and instances, and
    which minor number each GPU has."""
    index_by_uuid: dict[str, str] = {}
    parent: dict[str, str] = {}
    instance: dict[str, str] = {}
    by_minor: dict[int, str] = {}
    for g in gpus:
        index_by_uuid[g.uuid] = str(g.index)
        minor = minors.get(_bus_id(g.pci_bus_id)) if g.pci_bus_id else None
        if minor is not None:
            by_minor[minor] = str(g.index)
        for mig in g.mig_instances:
            parent[mig.uuid] = g.uuid
            instance[mig.uuid] = str(mig.gpu_instance)
    return GpuDirectory(index_by_uuid, parent, by_minor, instance)


class NvmlDirectory:
    """A GpuDirectory provider over the GPU backend's latest read (exporter/gpu/backend.py
    LatestReadings), rebuilt only when it changes; the driver's minor numbers are re-read only
    when the set of GPUs changes."""

    def __init__(self, procfs: Path, gpus: Callable[[], Sequence[GpuReading]]) -> None:
        self._procfs = procfs
        self._gpus = gpus
        self._seen: Sequence[GpuReading] | None = None
        self._buses: tuple[str, ...] = ()
        self._minors: dict[str, int] = {}
        self._directory = EMPTY_DIRECTORY

    def __call__(self) -> GpuDirectory:
        gpus = self._gpus()
        if gpus is not self._seen:
            buses = tuple(sorted(g.pci_bus_id for g in gpus))
            if buses != self._buses:
                self._minors = device_minors(self._procfs)
                self._buses = buses
            self._directory = directory_from_gpus(gpus, self._minors)
            self._seen = gpus
        return self._directory


@dataclass(frozen=True, slots=True)
class GpuRef:
    """The GPU a device ID names."""

    uuid: str  # physical GPU UUID, "" when unknown
    gpu: str  # NVML index, "" when unknown
    instance: str  # the MIG device (as the ID names it) for MIG allocations, else ""
    gpu_instance: str = ""  # the MIG device's GPU instance id, "" when unknown or not MIG


def resolve_device(device_id: str, directory: GpuDirectory = EMPTY_DIRECTORY) -> GpuRef | None:
    """The GPU behind one PodResources device ID; None for a format that names no NVIDIA GPU."""
    base = device_id.strip()
    replica = _REPLICA.match(base)
    if replica is not None:
        base = replica.group("base")
    uuid = index = instance = gpu_instance = ""
    if base.startswith("GPU-"):
        uuid = base
    elif (legacy := _LEGACY_MIG.match(base)) is not None:
        uuid, instance, gpu_instance = legacy.group("gpu"), base, legacy.group("gi")
    elif base.startswith("MIG-"):
        instance = base
        uuid = directory.parent_by_mig_uuid.get(base, "")
        gpu_instance = directory.instance_by_mig_uuid.get(base, "")
    elif (minor := _MINOR.match(base)) is not None:
        # without NVML's minor numbers, assume minor == index (true unless GPUs were hidden)
        n = int(minor.group("minor"))
        index = directory.index_by_minor.get(n, str(n))
        if minor.group("gi") is not None:
            instance, gpu_instance = base, minor.group("gi")
    elif (by_index := _INDEX.match(base)) is not None:
        index = by_index.group("index")
        instance = base if by_index.group("mig") else ""
    else:
        return None
    if uuid and not index:
        index = directory.index_by_uuid.get(uuid, "")
    if index and not uuid:
        uuid = directory.uuid_of_index(index)
    return GpuRef(uuid=uuid, gpu=index, instance=instance, gpu_instance=gpu_instance)


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
        rows.add(
            GpuAllocation(
                ref.gpu, ref.uuid, ref.gpu_instance, ref.instance, a.namespace, a.pod, a.container
            )
        )
    return tuple(sorted(rows, key=_row_key))


def _row_key(row: GpuAllocation) -> tuple[str, ...]:
    return (row.gpu, row.uuid, row.mig_device, row.namespace, row.pod, row.container)


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
