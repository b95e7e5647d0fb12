"""Sharing device plugins and schedulers: which resources are GPUs, how each plugin's device IDs
name a physical GPU (the formats docs/kubernetes.md documents, with their sources), placeholder
IDs resolved through Volcano's annotation, and the shares of one GPU as its holders."""

from __future__ import annotations

import pytest

from exporter.kube.gpus import (
    ClaimDevice,
    DeviceAssignment,
    allocations_of,
    holders_in,
    is_gpu_resource,
    resolve_device,
    resolve_dra_name,
    resolve_holdings,
)
from exporter.kube.pods import parse_pod, volcano_vgpus
from exporter.model.config import DEFAULT_GPU_RESOURCES
from exporter.model.gpu_directory import GpuDirectory, GpuRef
from tests.support.kubefakes import Ctr, pod_object

G0 = "GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763"
G1 = "GPU-1b0e77c4-9d31-4f55-8a06-2c1e4f7d9b20"
TWO = GpuDirectory(index_by_uuid={G0: "0", G1: "1"}, index_by_minor={0: "0", 1: "1"})
ONE = GpuDirectory(index_by_uuid={G0: "0"}, index_by_minor={0: "0"})


@pytest.mark.parametrize(
    ("resource", "gpu"),
    [
        ("nvidia.com/gpu", True),  # NVIDIA's device plugin, GKE's
        ("nvidia.com/gpu.shared", True),  # time-slicing / MPS with renameByDefault
        ("nvidia.com/mig-1g.10gb", True),  # MIG, mixed strategy
        ("nvidia.com/mig-1g.10gb.shared", True),  # MIG time-sliced and renamed
        ("volcano.sh/vgpu-number", True),  # Volcano's vGPU
        ("volcano.sh/vgpu-memory", False),  # fractions of the same vGPUs: nothing more
        ("volcano.sh/vgpu-cores", False),
        ("example.com/nic", False),
        ("nvidia.com/gpux", True),  # the NVIDIA plugin may rename to anything nvidia.com/gpu*
    ],
)
def test_default_gpu_resources(resource: str, gpu: bool) -> None:
    assert is_gpu_resource(resource) is gpu
    assert is_gpu_resource(resource, DEFAULT_GPU_RESOURCES) is gpu


def test_gpu_resources_are_configurable() -> None:
    patterns = ("aliyun.com/gpu-mem", "example.com/vgpu-*")
    assert is_gpu_resource("aliyun.com/gpu-mem", patterns)
    assert is_gpu_resource("example.com/vgpu-small", patterns)
    assert not is_gpu_resource("nvidia.com/gpu", patterns)


@pytest.mark.parametrize(
    ("device_id", "ref"),
    [
        # NVIDIA k8s-device-plugin: time-slicing and MPS replicas are "<id>::<replica>"
        # (internal/rm/devices.go NewAnnotatedID), under nvidia.com/gpu or its .shared rename
        (f"{G1}::0", GpuRef(G1, "1", "")),
        (f"{G1}::17", GpuRef(G1, "1", "")),
        ("1::3", GpuRef(G1, "1", "")),  # index strategy, replica 3
        # Volcano vGPU (HAMi's plugin): "<uuid>-<i>", "<uuid>-memory-<i>", "<uuid>-core-<i>"
        # placeholders (pkg/plugin/server.go apiDevices)
        (f"{G1}-0", GpuRef(G1, "1", "", placeholder=True)),
        (f"{G1}-9", GpuRef(G1, "1", "", placeholder=True)),
        (f"{G1}-memory-4095", GpuRef(G1, "1", "", placeholder=True)),
        (f"{G1}-core-99", GpuRef(G1, "1", "", placeholder=True)),
        # Alibaba's gpushare: "<uuid>-_-<i>" (pkg/gpu/nvidia/nvidia.go generateFakeDeviceID)
        (f"{G0}-_-12", GpuRef(G0, "0", "", placeholder=True)),
        # volcano-sh/devices GPU share: "<index>-<i>" (pkg/plugin/nvidia GenerateVirtualDeviceID)
        ("1-511", GpuRef(G1, "1", "", placeholder=True)),
    ],
)
def test_sharing_plugins_ids(device_id: str, ref: GpuRef) -> None:
    assert resolve_device(device_id, TWO) == ref


def test_a_uuid_suffix_is_not_a_placeholder() -> None:
    # the UUID's last group is 12 hex digits: a plain UUID must not lose it
    assert resolve_device(G0, TWO) == GpuRef(G0, "0", "")


@pytest.mark.parametrize(
    ("name", "ref"),
    [
        # the NVIDIA DRA driver's device names (cmd/gpu-kubelet-plugin deviceinfo.go, mig.go):
        # gpu-<minor>; gpu-<minor>-mig-<profile>-<profile id>-<placement start>; prefixed with
        # the claim's uid in CDI names
        ("gpu-1", GpuRef(G1, "1", "")),
        ("5f0e9c1a-2d3b-4c5d-8e6f-708192a3b4c5-gpu-0", GpuRef(G0, "0", "")),
        ("gpu-0-mig-1g5gb-19-6", GpuRef(G0, "0", "gpu-0-mig-1g5gb-19-6")),
        ("gpu-0-mig-3-0-4", GpuRef(G0, "0", "gpu-0-mig-3-0-4")),  # v25.3: <profile>-<start>-<size>
        ("gpu-vfio-0", None),  # passed through to a VM: no NVML GPU of this node
        ("nic-0", None),
    ],
)
def test_dra_driver_names(name: str, ref: GpuRef | None) -> None:
    assert resolve_dra_name(name, TWO) == ref


def placeholders(pod: str, n: int, uuid: str = G0) -> list[DeviceAssignment]:
    return [
        DeviceAssignment("ml", pod, "main", "volcano.sh/vgpu-number", f"{uuid}-{i}")
        for i in range(n)
    ]


def test_placeholders_follow_the_annotation() -> None:
    # the kubelet picked placeholders of G0 for both pods; Volcano gave a G1 and b G0
    given = {("ml", "a", "main"): (G1,), ("ml", "b", "main"): (G0,)}

    def assigned(ns: str, pod: str, ctr: str, resource: str) -> tuple[str, ...] | None:
        return given.get((ns, pod, ctr)) if resource == "volcano.sh/vgpu-number" else None

    held = resolve_holdings(
        [*placeholders("a", 2), *placeholders("b", 1)], directory=TWO, assigned=assigned
    )
    assert {(h.pod, h.ref) for h in held.holdings} == {
        ("a", GpuRef(G1, "1", "")),
        ("b", GpuRef(G0, "0", "")),
    }
    assert (held.devices, held.unresolved) == (2, ())


def test_placeholders_without_the_annotation() -> None:
    # one GPU: the pick cannot be wrong
    one = resolve_holdings(placeholders("a", 3), directory=ONE)
    assert [h.ref for h in one.holdings] == [GpuRef(G0, "0", "")]
    # several: the pick is anyone's, so no holder (one verdict per container, not per ID)
    two = resolve_holdings(placeholders("a", 3), directory=TWO)
    assert two.holdings == ()
    assert [(u.holder, u.reason) for u in two.unresolved] == [
        ("ml/a/main", "volcano.sh/vgpu-number placeholder: the pod's annotation names the GPU")
    ]


def test_shares_of_one_gpu_are_all_its_holders() -> None:
    """Time-sliced replicas under a renamed resource and two DRA claims' shares of the same GPU:
    every holder counts, each once, and the allocation rows name each claim."""
    devices = [
        DeviceAssignment("ml", "a", "main", "nvidia.com/gpu.shared", f"{G0}::0"),
        DeviceAssignment("ml", "a", "main", "nvidia.com/gpu.shared", f"{G0}::1"),
        DeviceAssignment("ml", "b", "main", "nvidia.com/gpu.shared", f"{G0}::2"),
    ]
    claims = [
        ClaimDevice("ml", "c", "main", "ml", "share-c", (), "gpu.nvidia.com", "node", "gpu-0"),
        ClaimDevice("ml", "d", "main", "ml", "share-d", (), "gpu.nvidia.com", "node", "gpu-0"),
    ]
    held = resolve_holdings(devices, claims, directory=TWO)
    assert holders_in(G0, held.holdings) == [
        ("ml", "a", "main"),
        ("ml", "b", "main"),
        ("ml", "c", "main"),
        ("ml", "d", "main"),
    ]
    assert [(r.pod, r.claim) for r in allocations_of(held.holdings)] == [
        ("a", ""),
        ("b", ""),
        ("c", "share-c"),
        ("d", "share-d"),
    ]


def test_a_claim_in_another_namespace_says_so() -> None:
    claim = ClaimDevice("ml", "a", "main", "shared", "pool-gpu", (), "gpu.nvidia.com", "n", "gpu-1")
    (row,) = allocations_of(resolve_holdings([], [claim], directory=TWO).holdings)
    assert row.claim == "shared/pool-gpu"


@pytest.mark.parametrize(
    ("text", "containers", "want"),
    [
        (f"{G0},NVIDIA,3000,50:", ["main"], (("main", (G0,)),)),
        # containers in spec order; the second holds none, the third two GPUs
        (
            f"{G0},NVIDIA,1000,0:;;{G0},NVIDIA,1000,0:{G1},NVIDIA,2000,30:",
            ["a", "sidecar", "c"],
            (("a", (G0,)), ("c", (G0, G1))),
        ),
        ("", ["main"], ()),
        ("garbage", ["main"], ()),
        (f"{G0},NVIDIA", [], ()),  # no container to give it to
        ("x" * 70000, ["main"], ()),  # larger than any real annotation: ignored
    ],
)
def test_volcano_annotation(text: str, containers: list[str], want: object) -> None:
    assert volcano_vgpus(text, containers) == want


def test_parse_pod_keeps_the_volcano_annotation() -> None:
    obj = pod_object(
        name="a",
        namespace="ml",
        uid="0a0a0a0a-0000-4000-8000-000000000001",
        containers=[Ctr("main", "containerd://" + "aa" * 32)],
    )
    obj["metadata"].setdefault("annotations", {})["volcano.sh/vgpu-ids-new"] = f"{G1},NVIDIA,100,0:"
    pod = parse_pod(obj)
    assert pod is not None
    assert pod.vgpu_uuids("main") == (G1,)
    assert pod.vgpu_uuids("other") is None
