"""Device plugin IDs -> GPUs, with and without NVML's directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.kube.gpus import (
    BackendDirectory,
    DeviceAssignment,
    gpu_allocations,
    holders_of,
    resolve_device,
)
from exporter.model.gpu_directory import GpuDirectory, GpuRef
from exporter.model.gpu_readings import GpuReading, MigInstanceReading
from exporter.model.snapshot import GpuAllocation

G0 = "GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763"
G1 = "GPU-1b0e77c4-9d31-4f55-8a06-2c1e4f7d9b20"
MIG = "MIG-4f1c9a55-0e2b-5b7a-9d1c-33aa7c2e1f08"
NVML = GpuDirectory(
    index_by_uuid={G0: "0", G1: "1"},
    parent_by_mig_uuid={MIG: G1},
    index_by_minor={0: "0", 3: "1"},
    instance_by_mig_uuid={MIG: "7"},
)


@pytest.mark.parametrize(
    ("device_id", "without_nvml", "with_nvml"),
    [
        (G0, GpuRef(G0, "", ""), GpuRef(G0, "0", "")),
        (f"{G0}::3", GpuRef(G0, "", ""), GpuRef(G0, "0", "")),  # time-sliced replica
        (MIG, GpuRef("", "", MIG), GpuRef(G1, "1", MIG, "7")),
        (f"{MIG}::1", GpuRef("", "", MIG), GpuRef(G1, "1", MIG, "7")),
        (
            f"MIG-{G1}/7/0",  # older drivers: the parent and the GPU instance in the name
            GpuRef(G1, "", f"MIG-{G1}/7/0", "7"),
            GpuRef(G1, "1", f"MIG-{G1}/7/0", "7"),
        ),
        ("1", GpuRef("", "1", ""), GpuRef(G1, "1", "")),  # index strategy
        ("0::2", GpuRef("", "0", ""), GpuRef(G0, "0", "")),
        ("1:0", GpuRef("", "1", "1:0"), GpuRef(G1, "1", "1:0")),  # index strategy MIG
        ("nvidia0", GpuRef("", "0", ""), GpuRef(G0, "0", "")),  # GKE, minor number
        ("nvidia3", GpuRef("", "3", ""), GpuRef(G1, "1", "")),  # minor 3 is index 1 here
        ("nvidia0/vgpu4", GpuRef("", "0", ""), GpuRef(G0, "0", "")),  # GKE time-sharing
        ("nvidia3/gi2", GpuRef("", "3", "nvidia3/gi2", "2"), GpuRef(G1, "1", "nvidia3/gi2", "2")),
    ],
)
def test_device_id_formats(device_id: str, without_nvml: GpuRef, with_nvml: GpuRef) -> None:
    assert resolve_device(device_id) == without_nvml
    assert resolve_device(device_id, NVML) == with_nvml


@pytest.mark.parametrize("device_id", ["", "0000:3b:00.0", "card0", "GPU", "renderD128", "nvidiaX"])
def test_foreign_ids_name_no_gpu(device_id: str) -> None:
    assert resolve_device(device_id) is None


def A(pod: str, container: str, resource: str, device_id: str) -> DeviceAssignment:
    return DeviceAssignment("ml", pod, container, resource, device_id)


ASSIGNED = [
    A("trainer-0", "trainer", "nvidia.com/gpu", f"{G0}::0"),
    A("trainer-0", "trainer", "nvidia.com/gpu", f"{G0}::5"),  # two replicas of the same GPU
    A("infer-a", "server", "nvidia.com/gpu", f"{G0}::1"),
    A("notebook", "jupyter", "nvidia.com/mig-1g.10gb", MIG),
    A("trainer-0", "trainer", "example.com/nic", "0000:3b:00.0"),  # not a GPU resource
    A("trainer-0", "trainer", "nvidia.com/gpu.shared", f"{G1}::2"),  # renamed time-slicing
]


def test_allocation_rows_without_nvml() -> None:
    rows = gpu_allocations(ASSIGNED)
    assert rows == (
        GpuAllocation(
            "", "", "", MIG, "ml", "notebook", "jupyter", resource="nvidia.com/mig-1g.10gb"
        ),
        GpuAllocation(
            "", G1, "", "", "ml", "trainer-0", "trainer", resource="nvidia.com/gpu.shared"
        ),
        GpuAllocation("", G0, "", "", "ml", "infer-a", "server", resource="nvidia.com/gpu"),
        # one row for both replicas
        GpuAllocation("", G0, "", "", "ml", "trainer-0", "trainer", resource="nvidia.com/gpu"),
    )


def test_allocation_rows_with_nvml_fill_index_and_mig_parent() -> None:
    rows = gpu_allocations(ASSIGNED, NVML)
    mig = "nvidia.com/mig-1g.10gb"
    assert GpuAllocation("1", G1, "7", MIG, "ml", "notebook", "jupyter", resource=mig) in rows
    whole = "nvidia.com/gpu"
    assert GpuAllocation("0", G0, "", "", "ml", "infer-a", "server", resource=whole) in rows
    assert len(rows) == 4


def test_a_device_held_through_two_resources_is_one_row_naming_both() -> None:
    # one series per device and holder (GPU hours counted once), whatever resources gave it
    rows = gpu_allocations(
        [
            A("infer-a", "server", "nvidia.com/gpu.shared", f"{G0}::1"),
            A("infer-a", "server", "nvidia.com/gpu", f"{G0}::3"),
        ]
    )
    both = "nvidia.com/gpu,nvidia.com/gpu.shared"
    assert rows == (GpuAllocation("", G0, "", "", "ml", "infer-a", "server", resource=both),)


def test_holders() -> None:
    time_sliced = [("ml", "trainer-0", "trainer"), ("ml", "infer-a", "server")]
    assert holders_of(G0, ASSIGNED) == time_sliced
    assert holders_of(MIG, ASSIGNED) == [("ml", "notebook", "jupyter")]
    # the MIG device's parent is known only through NVML
    assert holders_of(G1, ASSIGNED) == [("ml", "trainer-0", "trainer")]
    assert holders_of(G1, ASSIGNED, NVML) == [
        ("ml", "notebook", "jupyter"),
        ("ml", "trainer-0", "trainer"),
    ]
    assert holders_of("GPU-unknown", ASSIGNED) == []


def test_directory_from_nvml_and_the_driver(tmp_path: Path) -> None:
    gpus_dir = tmp_path / "driver" / "nvidia" / "gpus"
    for bus, minor in (("0000:3b:00.0", 0), ("0000:86:00.0", 3)):
        (gpus_dir / bus).mkdir(parents=True)
        (gpus_dir / bus / "information").write_text(
            f"Model: \t\t NVIDIA A100\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n"
        )
    mig = MigInstanceReading(MIG, "NVIDIA A100 MIG 1g.10gb", 7, 0, None, 10 << 30)
    gpus = [
        GpuReading(0, G0, "A100", "00000000:3B:00.0"),
        GpuReading(1, G1, "A100", "00000000:86:00.0", mig_instances=(mig,)),
    ]
    seen: list[list[GpuReading]] = [gpus]
    provider = BackendDirectory(tmp_path, lambda: seen[0])
    directory = provider()
    assert directory == GpuDirectory(
        index_by_uuid={G0: "0", G1: "1"},
        parent_by_mig_uuid={MIG: G1},
        index_by_minor={0: "0", 3: "1"},
        instance_by_mig_uuid={MIG: "7"},
    )
    assert provider() is directory  # the same GPUs: not rebuilt
    assert resolve_device("nvidia3", directory) == GpuRef(G1, "1", "")
    assert resolve_device(MIG, directory) == GpuRef(G1, "1", MIG, "7")
    assert BackendDirectory(tmp_path / "nothing", list)() == GpuDirectory()
