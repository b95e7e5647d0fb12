"""The whole chain on a time-sliced GPU: PodResources says which pods hold GPU 0, the kubelet's
pods turn those names into container IDs, NVML (the fake library) measures the GPU, and with
--attribution.idle=requests the GPU's idle energy goes to exactly those pods. NVML's view also
fills the GPU index on wattprobe_gpu_allocation_info."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import StartExporter
from tests.sources.gpu.nvml.pods import (
    H100_PODS,
    MIG_PODS,
    POD_A,
    POD_B,
    POD_MIG_1G,
    POD_MIG_2G,
    POD_MIG_3G,
    GpuPod,
    add_pods,
)
from tests.sources.gpu.nvml.scenario import Scenario
from tests.support.fixturehost import FixtureHost
from tests.support.kubeenv import add_nvidia_gpus, kube_node, labels_of, wait_samples
from tests.support.kubefakes import Assigned, Ctr, pod_object
from tests.support.running import ExporterProcess, Samples, parse_samples, select

pytestmark = pytest.mark.container_series  # its exporters serve them

GPU0 = "GPU-5c8e1f3a-2b4d-4e6f-8a1b-3c5d7e9f0a01"  # gpu.0 of h100x8-timesliced


def settle(proc: ExporterProcess) -> Samples:
    proc.wait_next_interval()
    return parse_samples(proc.wait_next_interval())


def gpu_pod(pod: GpuPod, name: str) -> dict[str, object]:
    return pod_object(
        name=name,
        namespace="ml",
        uid=pod.pod_uid,
        qos="Guaranteed",
        containers=[Ctr("trainer", f"containerd://{pod.container_id}")],
    )


def idle_on_gpu0(samples: Samples, name: str, **labels: str) -> float:
    return math.fsum(select(samples, name, zone="gpu", gpu="0", mode="idle", **labels).values())


def test_idle_gpu_energy_goes_to_the_pods_holding_it(
    exporter: StartExporter,
    host: FixtureHost,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    exporter_env: Callable[[Scenario], dict[str, str]],
) -> None:
    host.remove_process(1001)  # the fixture's nginx has POD_A's container id ("a1" * 32)
    add_pods(host, H100_PODS)
    add_nvidia_gpus(host)  # PodResources runs on GPU nodes only
    h100 = Scenario.from_fixture("h100x8-timesliced", tmp_path_factory.mktemp("nvml") / "h.nvml")
    with kube_node(tmp_path) as node:
        node.kubelet.set_pods([gpu_pod(POD_A, "trainer-a"), gpu_pod(POD_B, "trainer-b")])
        node.podresources.lister.assigned = [
            Assigned("ml", "trainer-a", "trainer", "nvidia.com/gpu", [f"{GPU0}::0"]),
            Assigned("ml", "trainer-b", "trainer", "nvidia.com/gpu", [f"{GPU0}::1"]),
        ]
        proc = exporter(
            *host.args(),
            "--interval",
            "0.3s",
            "--power.idle",
            "gpu=60",
            "--attribution.idle",
            "requests",
            *node.kubelet_args(),
            env=exporter_env(h100),
        )
        samples = wait_samples(
            proc,
            lambda s: any(
                r.get("gpu") == "0"
                for r in labels_of(s, "wattprobe_gpu_allocation_info", pod="trainer-b")
            ),
            "allocations with NVML's GPU index",
        )
        alloc = sorted(
            (r["pod"], r.get("gpu"), r.get("uuid"))
            for r in labels_of(samples, "wattprobe_gpu_allocation_info")
        )
        assert alloc == [("trainer-a", "0", GPU0), ("trainer-b", "0", GPU0)]

        before = settle(proc)
        for _ in range(3):
            h100.add_energy_j(0, 300.0)
            h100.write()
            settle(proc)
        after = settle(proc)

    def grown(name: str, **labels: str) -> float:
        return idle_on_gpu0(after, name, **labels) - idle_on_gpu0(before, name, **labels)

    gpu_idle = math.fsum(
        select(after, "wattprobe_gpu_energy_joules_total", gpu="0", mode="idle").values()
    ) - math.fsum(
        select(before, "wattprobe_gpu_energy_joules_total", gpu="0", mode="idle").values()
    )
    a = grown("wattprobe_pod_energy_joules_total", pod="trainer-a")
    b = grown("wattprobe_pod_energy_joules_total", pod="trainer-b")
    assert gpu_idle > 0
    assert a == pytest.approx(b, rel=1e-9)  # the holders share it evenly
    assert a + b == pytest.approx(gpu_idle, rel=1e-9)  # all of it: nothing stays on the node
    # no one else got idle GPU energy: the other pods hold no GPU in PodResources
    assert grown("wattprobe_container_energy_joules_total") == pytest.approx(gpu_idle, rel=1e-9)


A100 = "GPU-d8d7e984-7a52-6ad0-676c-222f4be482b9"  # a100-mig: gpu.0
MIG_3G = "MIG-8c4c5a27-e508-5556-b2ea-7e549465741e"  # GPU instance 1
MIG_2G = "MIG-1d89abd8-d10a-5361-bd06-77a807048472"  # GPU instance 5


def test_mig_devices_map_to_their_pods_with_nvml(
    exporter: StartExporter,
    host: FixtureHost,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    exporter_env: Callable[[Scenario], dict[str, str]],
) -> None:
    add_pods(host, MIG_PODS)
    add_nvidia_gpus(host)
    a100 = Scenario.from_fixture("a100-mig", tmp_path_factory.mktemp("nvml") / "a.nvml")
    with kube_node(tmp_path) as node:
        node.kubelet.set_pods([gpu_pod(POD_MIG_3G, "mig-3g"), gpu_pod(POD_MIG_2G, "mig-2g")])
        node.podresources.lister.assigned = [
            Assigned("ml", "mig-3g", "trainer", "nvidia.com/mig-3g.20gb", [MIG_3G]),
            Assigned("ml", "mig-2g", "trainer", "nvidia.com/mig-2g.10gb", [MIG_2G]),
        ]
        proc = exporter(
            *host.args(),
            "--interval",
            "0.3s",
            "--power.idle",
            "gpu=60",
            "--attribution.idle",
            "requests",
            *node.kubelet_args(),
            env=exporter_env(a100),
        )
        samples = wait_samples(
            proc,
            lambda s: len(labels_of(s, "wattprobe_gpu_allocation_info", gpu="0")) == 2,
            "MIG allocations with NVML's view",
        )
        rows = sorted(labels_of(samples, "wattprobe_gpu_allocation_info"), key=lambda r: r["pod"])
        assert rows == [
            {
                "gpu": "0",
                "uuid": A100,
                "gpu_instance": "5",
                "mig_device": MIG_2G,
                "namespace": "ml",
                "pod": "mig-2g",
                "container": "trainer",
                "resource": "nvidia.com/mig-2g.10gb",
            },
            {
                "gpu": "0",
                "uuid": A100,
                "gpu_instance": "1",
                "mig_device": MIG_3G,
                "namespace": "ml",
                "pod": "mig-3g",
                "container": "trainer",
                "resource": "nvidia.com/mig-3g.20gb",
            },
        ]
        before = settle(proc)
        for _ in range(3):
            a100.add_energy_j(0, 150.0)  # 500 W over 0.3 s: within the A100's 400 W limit x 2
            a100.write()
            settle(proc)
        after = settle(proc)

    def grown(pod: GpuPod) -> float:
        def idle(s: Samples) -> float:
            return idle_on_gpu0(s, "wattprobe_pod_energy_joules_total", pod_uid=pod.pod_uid)

        return idle(after) - idle(before)

    # each held instance's share of the idle energy goes to its holder (3g is 4 of 8 memory
    # slices, 2g 2 of 8); the unheld 1g instances' share stays on the node
    assert grown(POD_MIG_3G) > 0
    assert grown(POD_MIG_3G) / grown(POD_MIG_2G) == pytest.approx(2.0, rel=0.05)
    assert grown(POD_MIG_1G) == 0.0
