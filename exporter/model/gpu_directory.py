"""How PodResources device IDs find the node's GPUs: what the GPU backends know about them (a
GpuDirectory) and the GPU one device ID names (a GpuRef). Each vendor's device plugin grammar
(exporter/model/spec.py DevicePlugin) turns an ID into a GpuRef with a directory."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuDirectory:
    """What the GPU backends know about this node's GPUs; every table may be empty."""

    index_by_uuid: Mapping[str, str] = field(default_factory=dict)  # GPU-... -> "0"
    parent_by_mig_uuid: Mapping[str, str] = field(default_factory=dict)  # MIG-... -> GPU-...
    index_by_minor: Mapping[int, str] = field(default_factory=dict)  # /dev/nvidiaN -> index
    instance_by_mig_uuid: Mapping[str, str] = field(default_factory=dict)  # MIG-... -> GI id
    # /dev/nvidia-caps/nvidia-capM -> (GPU minor, GI id), from the driver's procfs capabilities
    mig_by_cap_minor: Mapping[int, tuple[int, str]] = field(default_factory=dict)
    # a device node the backend knows a GPU by (a DRM card) -> the GPU's UUID
    uuid_by_device_name: Mapping[str, str] = field(default_factory=dict)

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
    gpu_instance: str = ""  # the MIG device's GPU instance id, "" when unknown or not MIG
    placeholder: bool = False  # a sharing plugin's placeholder: the kubelet's pick of a GPU
