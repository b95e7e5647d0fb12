"""The checked-in PodResources stubs are what the pinned grpcio-tools makes of api.proto, and the
proto keeps the upstream v1 wire contract (package, service, field numbers)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from exporter.kube.podresources import api_pb2

REPO = Path(__file__).resolve().parents[2]
PROTO_DIR = Path("exporter/kube/podresources")
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def test_generated_stubs_match_the_proto(tmp_path: Path) -> None:
    pinned = next(
        line.split("==")[1].split('"')[0]
        for line in (REPO / "pyproject.toml").read_text().splitlines()
        if '"grpcio-tools==' in line
    )
    assert metadata.version("grpcio-tools") == pinned, "install the pinned grpcio-tools"
    (tmp_path / PROTO_DIR).mkdir(parents=True)
    shutil.copy(REPO / PROTO_DIR / "api.proto", tmp_path / PROTO_DIR / "api.proto")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I.",
            "--python_out=.",
            "--pyi_out=.",
            "--grpc_python_out=.",
            str(PROTO_DIR / "api.proto"),
        ],
        cwd=tmp_path,
        check=True,
    )
    for name in GENERATED:
        fresh = (tmp_path / PROTO_DIR / name).read_bytes()
        checked_in = (REPO / PROTO_DIR / name).read_bytes()
        assert fresh == checked_in, (
            f"{PROTO_DIR / name} drifted from api.proto: regenerate it (see api.proto's header)"
        )


# (message, field, number, label) as in k8s.io/kubelet/pkg/apis/podresources/v1/api.proto
UPSTREAM_FIELDS = [
    ("ListPodResourcesResponse", "pod_resources", 1),
    ("PodResources", "name", 1),
    ("PodResources", "namespace", 2),
    ("PodResources", "containers", 3),
    ("ContainerResources", "name", 1),
    ("ContainerResources", "devices", 2),
    ("ContainerResources", "cpu_ids", 3),
    ("ContainerResources", "memory", 4),
    ("ContainerResources", "dynamic_resources", 5),
    ("ContainerDevices", "resource_name", 1),
    ("ContainerDevices", "device_ids", 2),
    ("ContainerDevices", "topology", 3),
    ("AllocatableResourcesResponse", "devices", 1),
    ("AllocatableResourcesResponse", "cpu_ids", 2),
    ("AllocatableResourcesResponse", "memory", 3),
    ("ContainerMemory", "memory_type", 1),
    ("ContainerMemory", "size", 2),
    ("ContainerMemory", "topology", 3),
    ("TopologyInfo", "nodes", 1),
    ("NUMANode", "ID", 1),
    ("DynamicResource", "claim_name", 2),
    ("DynamicResource", "claim_namespace", 3),
    ("DynamicResource", "claim_resources", 4),
    ("ClaimResource", "cdi_devices", 1),
    ("ClaimResource", "driver_name", 2),
    ("ClaimResource", "pool_name", 3),
    ("ClaimResource", "device_name", 4),
    ("ClaimResource", "share_id", 5),
    ("CDIDevice", "name", 1),
    ("GetPodResourcesRequest", "pod_name", 1),
    ("GetPodResourcesRequest", "pod_namespace", 2),
    ("GetPodResourcesResponse", "pod_resources", 1),
]


@pytest.mark.parametrize(("message", "field", "number"), UPSTREAM_FIELDS)
def test_upstream_field_numbers(message: str, field: str, number: int) -> None:
    assert api_pb2.DESCRIPTOR.message_types_by_name[message].fields_by_name[field].number == number


def test_upstream_service() -> None:
    assert api_pb2.DESCRIPTOR.package == "v1"
    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert {m.name for m in service.methods} == {"List", "GetAllocatableResources", "Get"}


def test_a_kubelet_before_1_31_still_decodes() -> None:
    """Older kubelets send DynamicResource.class_name as field 1 (a tombstone now): it is
    skipped as an unknown field and the claim's name and namespace still decode."""

    def field(number: int, text: str) -> bytes:  # a length-delimited field, short values only
        data = text.encode()
        return bytes([number << 3 | 2, len(data)]) + data

    cdi = field(1, "k8s.gpu.nvidia.com/claim=abc-gpu-0")
    old = field(1, "gpu.nvidia.com") + field(2, "train") + field(3, "ml")
    old += bytes([4 << 3 | 2, len(cdi) + 2, 1 << 3 | 2, len(cdi)]) + cdi
    decoded = api_pb2.DynamicResource.FromString(old)
    assert (decoded.claim_name, decoded.claim_namespace) == ("train", "ml")
    assert [d.name for r in decoded.claim_resources for d in r.cdi_devices] == [
        "k8s.gpu.nvidia.com/claim=abc-gpu-0"
    ]
    assert 1 not in {f.number for f in api_pb2.DynamicResource.DESCRIPTOR.fields}
