"""AMD's and Intel's device plugin IDs (exporter/sources/gpu/drm/podresources.py), registered by
the DRM backend's SPEC: PodResources allocations reach the GPU and the `gpu` label its series
carry, on a node where the DRM GPUs are numbered after NVIDIA's."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from exporter.accounting.gpu_merge import GpuMerge
from exporter.app.registry import REGISTRY
from exporter.kube.gpus import (
    DeviceAssignment,
    directory_from_gpus,
    gpu_resources_with,
    is_gpu_resource,
    resolve_holdings,
)
from exporter.model.config import DEFAULT_GPU_RESOURCES, Config
from exporter.model.gpu_directory import GpuDirectory, GpuRef
from exporter.model.gpu_readings import GpuReading, GpuReadings
from exporter.sources.gpu.drm.podresources import (
    AMD,
    INTEL,
    pci_address,
    resolve_amd,
    resolve_intel,
)

H100 = GpuReading(0, "GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763", "H100", "00000000:3B:00.0")
MI300 = GpuReading(
    0,
    "0000:c1:00.0",
    "MI300X",
    "0000:c1:00.0",
    vendor="amd",
    backend="drm",
    device_names=("card1",),
)
ARC = GpuReading(
    1, "0000:03:00.0", "Arc", "0000:03:00.0", vendor="intel", backend="drm", device_names=("card2",)
)


def merged_directory() -> tuple[GpuReadings, GpuDirectory]:
    nvml = GpuReadings("550.54", "12.550", "12.4", (H100,))
    drm = GpuReadings("6.8", "", "", (MI300, ARC))
    merged = GpuMerge().merge([nvml, drm])
    assert merged is not None
    return merged, directory_from_gpus(merged.gpus, {})


def test_the_drm_spec_registers_both_plugins() -> None:
    context = REGISTRY.build_context(Config())
    assert tuple(p for p in context.device_plugins if p in (AMD, INTEL)) == (AMD, INTEL)
    off = REGISTRY.build_context(Config(collectors=frozenset({"nvml"})))  # --no-collector.drm
    assert off.device_plugins == ()


def test_ids_resolve_to_the_merged_index() -> None:
    merged, directory = merged_directory()
    index = {g.uuid: str(g.index) for g in merged.gpus}
    assert index == {H100.uuid: "0", MI300.uuid: "1", ARC.uuid: "2"}  # DRM after NVIDIA
    assert resolve_amd("0000:c1:00.0", directory) == GpuRef("0000:c1:00.0", "1", "")
    assert resolve_amd("C1:00.0", directory) == GpuRef("0000:c1:00.0", "1", "")  # no domain
    assert resolve_intel("card2-0", directory) == GpuRef("0000:03:00.0", "2", "")
    assert resolve_intel("card2-7", directory) == GpuRef("0000:03:00.0", "2", "")  # a share
    assert resolve_intel("card9-0", directory) == GpuRef("", "", "")  # not read (yet)
    assert resolve_amd("GPU-8f2c1d90", directory) is None
    assert resolve_intel("0000:03:00.0", directory) is None


def test_allocations_through_resolve_holdings() -> None:
    _, directory = merged_directory()
    devices = [
        DeviceAssignment("ml", "rocm-0", "main", "amd.com/gpu", "0000:c1:00.0"),
        DeviceAssignment("media", "enc-0", "ffmpeg", "gpu.intel.com/i915", "card2-1"),
        DeviceAssignment("mon", "xpumanager", "x", "gpu.intel.com/i915_monitoring", "all"),
        DeviceAssignment("ml", "cuda-0", "main", "nvidia.com/gpu", H100.uuid),
        DeviceAssignment("ml", "bad-0", "main", "amd.com/gpu", "not-a-pci-address"),
    ]
    held = resolve_holdings(
        devices,
        directory=directory,
        plugins=(AMD, INTEL),
    )
    got = {(h.pod, h.ref.uuid, h.ref.gpu) for h in held.holdings}
    assert got == {
        ("rocm-0", "0000:c1:00.0", "1"),
        ("enc-0", "0000:03:00.0", "2"),
        ("cuda-0", H100.uuid, "0"),
    }
    (bad,) = held.unresolved
    assert (bad.what, bad.reason) == ("not-a-pci-address", "no AMD GPU of this node has this ID")
    # without the plugins AMD's and Intel's resources are not GPUs at all
    alone = resolve_holdings(devices, directory=directory)
    assert {h.pod for h in alone.holdings} == {"cuda-0"}


def test_their_resources_count_as_gpus_only_where_registered() -> None:
    patterns = gpu_resources_with(DEFAULT_GPU_RESOURCES, (AMD, INTEL))
    assert is_gpu_resource("amd.com/gpu", patterns)
    assert is_gpu_resource("amd.com/cpx_nps4", patterns)  # a partitioned Instinct GPU
    assert is_gpu_resource("gpu.intel.com/xe", patterns)
    assert not is_gpu_resource("gpu.intel.com/i915_monitoring", patterns)
    assert not is_gpu_resource("gpu.intel.com/millicores", patterns)
    assert not is_gpu_resource("amd.com/gpu", DEFAULT_GPU_RESOURCES)


@given(st.text(max_size=40))
def test_any_id_resolves_or_is_refused(device_id: str) -> None:
    _, directory = merged_directory()
    for resolve in (resolve_amd, resolve_intel):
        ref = resolve(device_id, directory)
        assert ref is None or isinstance(ref, GpuRef)


@given(st.integers(0, 0xFFFF), st.integers(0, 255), st.integers(0, 31), st.integers(0, 7))
def test_pci_addresses_normalise_as_sysfs_writes_them(
    domain: int, bus: int, dev: int, fn: int
) -> None:
    sysfs = f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"
    assert pci_address(sysfs) == sysfs
    assert pci_address(sysfs.upper()) == sysfs
    assert pci_address(f"{domain:08X}:{bus:02X}:{dev:02x}.{fn}") == sysfs  # NVML's form
