"""GPUs handed out by DRA, end to end: the gRPC PodResources fake serves dynamic_resources, the
node's CDI specs (the NVIDIA DRA driver's format, tests/fixtures/cdi) say which GPU each claim
device is, the kubelet's pods name the containers, and the fake NVML measures the GPUs. Energy
per claim and per pod, and conservation, as for device plugin GPUs: a GPU two claims share gives
its idle energy to exactly those two pods (by their activity), a whole-GPU claim's pod takes all
of its GPU's, a MIG claim's pod takes its instance's share; a claim naming a GPU the node does not
have, a malformed spec and a missing spec directory change nothing else."""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import StartExporter
from tests.sources.gpu.nvml.pods import (
    H100_PODS,
    MIG_PODS,
    POD_A,
    POD_B,
    POD_C,
    POD_D,
    POD_E,
    POD_MIG_1G,
    POD_MIG_2G,
    POD_MIG_3G,
    GpuPod,
    add_pods,
)
from tests.sources.gpu.nvml.scenario import Scenario
from tests.support.fixturehost import FixtureHost
from tests.support.kubeenv import kube_node, labels_of, wait_samples
from tests.support.kubefakes import Claimed, Ctr, pod_object
from tests.support.paths import FIXTURES
from tests.support.running import ExporterProcess, Samples, parse_samples, select

CDI = FIXTURES / "cdi"
H100_GPU0 = "GPU-5c8e1f3a-2b4d-4e6f-8a1b-3c5d7e9f0a01"
H100_GPU1 = "GPU-6d9f2a4b-3c5e-4f70-9b2c-4d6e8fa01b12"
H100_GPU2 = "GPU-7ea03b5c-4d6f-4081-8c3d-5e7f9ab12c23"
H100_BUSES = (
    "0000:1b:00.0",
    "0000:43:00.0",
    "0000:52:00.0",
    "0000:61:00.0",
    "0000:9d:00.0",
    "0000:c3:00.0",
    "0000:d1:00.0",
    "0000:df:00.0",
)
A100 = "GPU-d8d7e984-7a52-6ad0-676c-222f4be482b9"
MIG_3G = "MIG-8c4c5a27-e508-5556-b2ea-7e549465741e"  # GPU instance 1
VENDOR = "k8s.gpu.nvidia.com/claim"


def nvidia_procfs(host: FixtureHost, buses: tuple[str, ...], migs: bool = False) -> None:
    """The driver's /proc: each GPU's minor number (its index here), and for the A100 the
    capability minors of MIG instance 1 (21: the GPU instance, 22: its compute instance)."""
    for minor, bus in enumerate(buses):
        gpu = host.procfs / "driver" / "nvidia" / "gpus" / bus
        gpu.mkdir(parents=True, exist_ok=True)
        (gpu / "information").write_text(f"Bus Location: \t {bus}\nDevice Minor: \t {minor}\n")
    if migs:
        gi = host.procfs / "driver" / "nvidia" / "capabilities" / "gpu0" / "mig" / "gi1"
        (gi / "ci0").mkdir(parents=True)
        (gi / "access").write_text("DeviceFileMinor: 21\nDeviceFileMode: 292\n")
        (gi / "ci0" / "access").write_text("DeviceFileMinor: 22\nDeviceFileMode: 292\n")


def cdi_dirs(tmp_path: Path) -> str:
    """The fixture specs (with the malformed one) and a directory that does not exist."""
    shutil.copytree(CDI / "etc", tmp_path / "cdi-etc")
    shutil.copytree(CDI / "run", tmp_path / "cdi-run")
    return f"{tmp_path / 'cdi-etc'},{tmp_path / 'absent'},{tmp_path / 'cdi-run'}"


def gpu_pod(pod: GpuPod, name: str) -> dict[str, object]:
    return pod_object(
        name=name,
        namespace="ml",
        uid=pod.pod_uid,
        qos="Guaranteed",
        containers=[Ctr("main", f"containerd://{pod.container_id}")],
    )


def settle(proc: ExporterProcess) -> Samples:
    proc.wait_next_interval()
    return parse_samples(proc.wait_next_interval())


def gpu_joules(samples: Samples, name: str, gpu: str, **labels: str) -> float:
    zone = {} if name == "wattprobe_gpu_energy_joules_total" else {"zone": "gpu"}
    return math.fsum(select(samples, name, gpu=gpu, **zone, **labels).values())


def test_dra_claims_hold_gpus_and_take_their_energy(
    exporter: StartExporter,
    host: FixtureHost,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    exporter_env: Callable[[Scenario], dict[str, str]],
) -> None:
    host.remove_process(1001)  # the fixture's nginx has POD_A's container id ("a1" * 32)
    add_pods(host, H100_PODS)
    nvidia_procfs(host, H100_BUSES)
    h100 = Scenario.from_fixture("h100x8-timesliced", tmp_path_factory.mktemp("nvml") / "h.nvml")
    with kube_node(tmp_path) as node:
        node.kubelet.set_pods(
            [
                gpu_pod(POD_A, "svc-a"),
                gpu_pod(POD_B, "svc-b"),
                gpu_pod(POD_C, "train"),
                gpu_pod(POD_D, "ghost"),
                gpu_pod(POD_E, "idle"),
            ]
        )
        node.podresources.lister.assigned = []
        node.podresources.lister.claimed = [
            # GPU 0 shared by two claims: one spec names /dev/nvidia0, the other its UUID
            Claimed(
                "ml",
                "svc-a",
                "main",
                "shared-a",
                [f"{VENDOR}=7a41d2e3-3e4c-4d6e-9f70-8192a3b4c5d6-gpu-0"],
            ),
            Claimed(
                "ml",
                "svc-b",
                "main",
                "shared-b",
                [f"{VENDOR}=8b52e3f4-4f5d-4e7f-a081-92a3b4c5d6e7-gpu-0"],
            ),
            Claimed(
                "ml",
                "train",
                "main",
                "train-gpu",
                [f"{VENDOR}=5f0e9c1a-2d3b-4c5d-8e6f-708192a3b4c5-gpu-1"],
            ),
            # its spec names /dev/nvidia9: no GPU of this node, so no holder anywhere
            Claimed(
                "ml",
                "ghost",
                "main",
                "ghost-gpu",
                [f"{VENDOR}=9c63f405-5061-4f80-b192-a3b4c5d6e7f8-gpu-9"],
            ),
            # GPU 2, where pod E runs nothing: no spec for this claim device (the driver's
            # name tells the GPU), and without the claim GPU 2's idle energy would stay on the
            # node (its one process is in another PID namespace)
            Claimed(
                "ml",
                "idle",
                "main",
                "idle-gpu",
                [f"{VENDOR}=0d1e2f30-7283-4a9b-8c0d-1e2f3a4b5c6d-gpu-2"],
                device="gpu-2",
            ),
        ]
        proc = exporter(
            *host.args(),
            "--interval",
            "0.3s",
            "--power.idle",
            "gpu=60",
            *node.kubelet_args(),
            "--kube.cdi-spec-dirs",
            cdi_dirs(tmp_path),
            env=exporter_env(h100),
        )
        samples = wait_samples(
            proc,
            lambda s: len(labels_of(s, "wattprobe_gpu_allocation_info")) == 4,
            "four DRA allocations with NVML's indexes",
        )
        rows = sorted(
            (r["claim"], r["pod"], r["gpu"], r["uuid"])
            for r in labels_of(samples, "wattprobe_gpu_allocation_info")
        )
        assert rows == [
            ("idle-gpu", "idle", "2", H100_GPU2),
            ("shared-a", "svc-a", "0", H100_GPU0),
            ("shared-b", "svc-b", "0", H100_GPU0),
            ("train-gpu", "train", "1", H100_GPU1),
        ]
        before = settle(proc)
        for _ in range(3):
            h100.add_energy_j(0, 300.0)
            h100.add_energy_j(1, 300.0)
            h100.add_energy_j(2, 300.0)
            h100.write()
            settle(proc)
        after = settle(proc)
        log = proc.log()

    def grown(name: str, gpu: str, **labels: str) -> float:
        return gpu_joules(after, name, gpu, **labels) - gpu_joules(before, name, gpu, **labels)

    pod_energy = "wattprobe_pod_energy_joules_total"
    # energy per claim: the allocation series' claim joined to its pod's energy on that GPU
    per_claim = {claim: grown(pod_energy, gpu, pod=pod) for claim, pod, gpu, _uuid in rows}
    for gpu, claims in (("0", ("shared-a", "shared-b")), ("1", ("train-gpu",))):
        total = grown("wattprobe_gpu_energy_joules_total", gpu)
        assert total > 0
        # conservation: the claims' pods take all of it (active and idle), nothing is left over
        assert math.fsum(per_claim[c] for c in claims) == pytest.approx(total, rel=1e-6)
        assert grown(pod_energy, gpu) == pytest.approx(total, rel=1e-6)
    # the holders of GPU 0 split its idle energy by their activity (SM 60 % and 20 %)
    idle_a = grown(pod_energy, "0", pod="svc-a", mode="idle")
    idle_b = grown(pod_energy, "0", pod="svc-b", mode="idle")
    idle_0 = grown("wattprobe_gpu_energy_joules_total", "0", mode="idle")
    assert idle_a + idle_b == pytest.approx(idle_0, rel=1e-6)
    assert idle_a / idle_b == pytest.approx(3.0, rel=0.05)
    assert grown(pod_energy, "1", pod="train", mode="idle") == pytest.approx(
        grown("wattprobe_gpu_energy_joules_total", "1", mode="idle"), rel=1e-6
    )
    # the held idle GPU: its idle energy is its holder's, whatever allocated it
    idle_2 = grown("wattprobe_gpu_energy_joules_total", "2", mode="idle")
    assert idle_2 > 0
    assert grown(pod_energy, "2", pod="idle", mode="idle") == pytest.approx(idle_2, rel=1e-6)
    assert grown(pod_energy, "2", pod="ghost") == 0.0
    assert "claim_broken.yaml: not YAML" in log  # reported once, never raised


def test_a_mig_device_given_by_a_claim(
    exporter: StartExporter,
    host: FixtureHost,
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    exporter_env: Callable[[Scenario], dict[str, str]],
) -> None:
    add_pods(host, MIG_PODS)
    nvidia_procfs(host, ("0000:07:00.0",), migs=True)
    a100 = Scenario.from_fixture("a100-mig", tmp_path_factory.mktemp("nvml") / "a.nvml")
    with kube_node(tmp_path) as node:
        node.kubelet.set_pods([gpu_pod(POD_MIG_3G, "notebook"), gpu_pod(POD_MIG_2G, "other")])
        node.podresources.lister.assigned = []
        node.podresources.lister.claimed = [
            Claimed(
                "ml",
                "notebook",
                "main",
                "mig-3g",
                [f"{VENDOR}=a1b2c3d4-6172-4091-82a3-b4c5d6e7f809-gpu-0-mig-3g20gb-9-4"],
                device="gpu-0-mig-3g20gb-9-4",
            )
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
            "--kube.cdi-spec-dirs",
            cdi_dirs(tmp_path),
            env=exporter_env(a100),
        )
        samples = wait_samples(
            proc,
            lambda s: any(
                r.get("mig_device") == MIG_3G for r in labels_of(s, "wattprobe_gpu_allocation_info")
            ),
            "the MIG allocation with NVML's view",
        )
        (row,) = labels_of(samples, "wattprobe_gpu_allocation_info")
        assert row == {
            "gpu": "0",
            "uuid": A100,
            "gpu_instance": "1",
            "mig_device": MIG_3G,
            "claim": "mig-3g",
            "namespace": "ml",
            "pod": "notebook",
            "container": "main",
        }
        before = settle(proc)
        for _ in range(3):
            a100.add_energy_j(0, 150.0)
            a100.write()
            settle(proc)
        after = settle(proc)

    def idle(pod: GpuPod) -> float:
        def of(s: Samples) -> float:
            return gpu_joules(
                s, "wattprobe_pod_energy_joules_total", "0", pod_uid=pod.pod_uid, mode="idle"
            )

        return of(after) - of(before)

    gpu_idle = gpu_joules(
        after, "wattprobe_gpu_energy_joules_total", "0", mode="idle"
    ) - gpu_joules(before, "wattprobe_gpu_energy_joules_total", "0", mode="idle")
    # the 3g instance is 20 GB of the four instances' 41 GB: its holder takes that share of the
    # GPU's idle energy; nobody else holds anything, so the rest stays on the node
    sizes = [20937965568, 10468982784, 4966055936]
    share = idle(POD_MIG_3G) / gpu_idle
    assert share > 0
    assert idle(POD_MIG_2G) == 0.0 and idle(POD_MIG_1G) == 0.0
    assert share == pytest.approx(sizes[0] / (sum(sizes) + 4966055936), rel=0.02)
