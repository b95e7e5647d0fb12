"""How AMD's and Intel's Kubernetes device plugins name the GPUs they allocate, as PodResources
lists them (the DRM backend's GPUs: their UUID is their PCI address).

- AMD (ROCm/k8s-device-plugin, `amd.com/gpu`, and `amd.com/<partition>` resources on
  partitioned Instinct GPUs): the device ID is the GPU's PCI bus ID, "0000:c1:00.0".
- Intel (intel-device-plugins-for-kubernetes, `gpu.intel.com/i915` and `gpu.intel.com/xe`): the
  ID is the DRM card and a share number, "card1-0" (one per --shared-dev-num slot). Its
  `gpu.intel.com/i915_monitoring` resource hands every GPU to a monitoring agent: not an
  allocation, so it is not listed.
"""

from __future__ import annotations

import re

from exporter.model.gpu_directory import GpuDirectory, GpuRef
from exporter.model.spec import DevicePlugin

_PCI = re.compile(
    r"^(?:(?P<domain>[0-9A-Fa-f]{1,8}):)?(?P<bus>[0-9A-Fa-f]{2}):(?P<dev>[0-9A-Fa-f]{2})\.(?P<fn>[0-7])$"
)
_INTEL = re.compile(r"^(?P<card>card\d{1,4})-\d{1,6}$")


def pci_address(text: str) -> str | None:
    """A PCI address as sysfs writes it (lower case, 4-digit domain), or None."""
    match = _PCI.match(text.strip())
    if match is None:
        return None
    domain = int(match.group("domain") or "0", 16)
    return f"{domain:04x}:{match.group('bus')}:{match.group('dev')}.{match.group('fn')}".lower()


def _ref(uuid: str, directory: GpuDirectory) -> GpuRef:
    return GpuRef(uuid, directory.index_by_uuid.get(uuid, ""), "")


def resolve_amd(device_id: str, directory: GpuDirectory) -> GpuRef | None:
    pci = pci_address(device_id)
    return _ref(pci, directory) if pci is not None else None


def resolve_intel(device_id: str, directory: GpuDirectory) -> GpuRef | None:
    match = _INTEL.match(device_id.strip())
    if match is None:
        return None
    return _ref(directory.uuid_by_device_name.get(match.group("card"), ""), directory)


AMD = DevicePlugin("AMD", ("amd.com/gpu", "amd.com/*_nps*"), resolve_amd)
INTEL = DevicePlugin("Intel", ("gpu.intel.com/i915", "gpu.intel.com/xe"), resolve_intel)
