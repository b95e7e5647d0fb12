"""The Kubernetes side of the live fleet (tests/support/livestack.py): who names the pods on each
node,
and which pod holds which GPU.

- Every node gets its pod names from a loopback endpoint speaking the real protocol
  (tests/support/kubefakes.py): an HTTPS kubelet checking a bearer token (measured, gpu, sensorless,
  ebpf) or, on "broken", an HTTPS apiserver (list + watch, the static pod as a mirror pod), so
  both pod sources are proven. The pods are the fixture /proc's kubepods containers
  (tests/fixtures/kube/kubelet-pods.json) plus the GPU pods each node runs.
- The GPU nodes get a real gRPC PodResources server on a unix socket. The H100 node's device
  plugin time-slices every GPU into two replicas (`GPU-<uuid>::<n>`): GPU 0 is shared by pods A
  and B, GPU 1 runs C, GPU 3 is shared by D and E (as NVML's process list says), and GPU 4 is
  held by a notebook pod that never touches it: the GPU idle while allocated. GPUs 2, 5, 6, 7
  are not allocated (6 and 7 idle too: no alert for them). The A100 node's MIG devices go to
  one pod each, the second 1g.5gb instance to nobody.
"""

from __future__ import annotations

import copy
import shutil
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.sources.gpu.nvml.pods import (
    POD_A,
    POD_B,
    POD_C,
    POD_D,
    POD_E,
    POD_MIG_1G,
    POD_MIG_2G,
    POD_MIG_3G,
    GpuPod,
)
from tests.sources.gpu.nvml.scenario import Scenario
from tests.support.fixturehost import FixtureHost
from tests.support.kubeenv import as_apiserver_pods, fixture_pods
from tests.support.kubefakes import (
    Assigned,
    Claimed,
    Ctr,
    FakeApiserver,
    FakeKubelet,
    FakePodResources,
    TlsFiles,
    make_tls,
    pod_object,
)

TOKEN = "live-fleet-service-account-token"
GPU_NAMESPACE = "ml"  # the namespace of every GPU pod of the fleet
POLL = ("--kube.poll-interval", "1s")  # names and allocations within a second of starting

# A pod of the H100 node that holds GPU 4 and never uses it: no NVML process, no utilization.
POD_IDLE = GpuPod(5107, "jupyter", "000000f7-9a00-4b00-8c00-000000005107", "f7" * 32)
IDLE_GPU = 4

# (pod, pod name, container name) of the GPU pods, as the kubelet names them
H100_PODS = (
    (POD_A, "llm-finetune-0", "trainer"),
    (POD_B, "llm-eval-0", "eval"),
    (POD_C, "torchrun-worker-0", "worker"),
    (POD_D, "triton-a-0", "triton"),
    (POD_E, "triton-b-0", "triton"),
    (POD_IDLE, "notebook-0", "jupyter"),
)
MIG_PODS = (
    (POD_MIG_3G, "mig-3g-0", "trainer"),
    (POD_MIG_2G, "mig-2g-0", "trainer"),
    (POD_MIG_1G, "mig-1g-0", "trainer"),
)
# GPU index -> the H100 pods holding a time-slice of it, in replica order
H100_HOLDERS = {0: (POD_A, POD_B), 1: (POD_C,), 3: (POD_D, POD_E), IDLE_GPU: (POD_IDLE,)}
REPLICAS = 2  # time-slicing replicas per H100
MIG_HOLDERS = {0: POD_MIG_3G, 1: POD_MIG_2G, 2: POD_MIG_1G}  # MIG device -> pod; 3 is free


def pod_name(pod: GpuPod) -> str:
    return next(name for p, name, _c in (*H100_PODS, *MIG_PODS) if p == pod)


def _names(pods: tuple[tuple[GpuPod, str, str], ...]) -> dict[GpuPod, tuple[str, str]]:
    return {p: (name, container) for p, name, container in pods}


def gpu_pod_object(pod: GpuPod, name: str, container: str, node: str) -> dict[str, Any]:
    """The pod as the kubelet lists it; GpuPod cgroups are Guaranteed (kubepods-pod<uid>)."""
    return pod_object(
        name=name,
        namespace=GPU_NAMESPACE,
        uid=pod.pod_uid,
        node=node,
        qos="Guaranteed",
        labels={"app": name.rsplit("-", 1)[0]},
        containers=[Ctr(container, f"containerd://{pod.container_id}")],
    )


def on_node(pods: list[dict[str, Any]], node: str) -> list[dict[str, Any]]:
    out = copy.deepcopy(pods)
    for pod in out:
        pod["spec"]["nodeName"] = node
    return out


# The fixture's web pod (containers a1*32, a2*32) does not run on the H100 node: POD_A's
# container id is "a1" * 32 too (tests/sources/gpu/nvml/pods.py), and one id must name one
# container.
WEB_POD_UID = "5f1c3e2a-8b4d-4c6e-9f0a-1b2c3d4e5f60"
WEB_PIDS = (1000, 1001, 1002)


def fleet_pods(node: str) -> list[dict[str, Any]]:
    """The pods of the fixture /proc tree, on node."""
    return on_node(fixture_pods(), node)


def h100_pods(host: FixtureHost, node: str) -> list[dict[str, Any]]:
    """The H100 node's pods: the fixture's without the web pod, plus the GPU pods (whose
    processes tests/support/livegpus.py put in its /proc; the idle notebook's is added here)."""
    for pid in WEB_PIDS:
        host.remove_process(pid)
    host.add_process(POD_IDLE.pid, POD_IDLE.comm, POD_IDLE.cgroup, start=900100, utime=100)
    fixture = [p for p in fixture_pods() if p["metadata"]["uid"] != WEB_POD_UID]
    gpu = [gpu_pod_object(p, n, c, node) for p, n, c in H100_PODS]
    return on_node(fixture, node) + gpu


def mig_pods(node: str) -> list[dict[str, Any]]:
    return fleet_pods(node) + [gpu_pod_object(p, n, c, node) for p, n, c in MIG_PODS]


# The idle GPU is held through a DRA ResourceClaim (the NVIDIA DRA driver's per-claim CDI
# spec names it by UUID), the others through the device plugin's time-slices.
IDLE_GPU_CLAIM = "notebook-gpu"
_IDLE_CLAIM_UID = "4d5e6f70-8192-4a3b-9c4d-5e6f708192a3"


def h100_assignments(scenario: Scenario) -> tuple[list[Assigned], list[tuple[str, Sequence[str]]]]:
    """What PodResources says on the H100 node: (assigned devices, allocatable devices)."""
    names = _names(H100_PODS)
    assigned = [
        Assigned(
            GPU_NAMESPACE,
            names[pod][0],
            names[pod][1],
            "nvidia.com/gpu",
            [f"{scenario[f'gpu.{gpu}.uuid']}::{replica}"],
        )
        for gpu, holders in H100_HOLDERS.items()
        if gpu != IDLE_GPU
        for replica, pod in enumerate(holders)
    ]
    allocatable = [
        f"{scenario[f'gpu.{gpu}.uuid']}::{replica}"
        for gpu in range(scenario.gpu_count())
        for replica in range(REPLICAS)
    ]
    return assigned, [("nvidia.com/gpu", allocatable)]


def h100_claims(scenario: Scenario, cdi_dir: Path) -> list[Claimed]:
    """The H100 node's DRA claims, and the CDI spec the driver would have written for them."""
    name, container = _names(H100_PODS)[POD_IDLE]
    device = f"{_IDLE_CLAIM_UID}-gpu-{IDLE_GPU}"
    cdi_dir.mkdir(parents=True, exist_ok=True)
    (cdi_dir / f"k8s.gpu.nvidia.com-claim_{_IDLE_CLAIM_UID}.yaml").write_text(
        "cdiVersion: 0.5.0\nkind: k8s.gpu.nvidia.com/claim\ndevices:\n"
        f"- name: {device}\n  containerEdits:\n    env:\n"
        f"    - NVIDIA_VISIBLE_DEVICES={scenario[f'gpu.{IDLE_GPU}.uuid']}\n"
        "containerEdits:\n  env:\n  - NVIDIA_VISIBLE_DEVICES=void\n"
    )
    return [
        Claimed(
            GPU_NAMESPACE,
            name,
            container,
            IDLE_GPU_CLAIM,
            [f"k8s.gpu.nvidia.com/claim={device}"],
            device=f"gpu-{IDLE_GPU}",
        )
    ]


def mig_profile(scenario: Scenario, device: int) -> str:
    """'NVIDIA A100-SXM4-40GB MIG 3g.20gb' -> '3g.20gb'."""
    return scenario[f"gpu.0.mig.{device}.name"].split()[-1]


def mig_assignments(scenario: Scenario) -> tuple[list[Assigned], list[tuple[str, Sequence[str]]]]:
    names = _names(MIG_PODS)
    assigned = [
        Assigned(
            GPU_NAMESPACE,
            names[pod][0],
            names[pod][1],
            f"nvidia.com/mig-{mig_profile(scenario, device)}",
            [scenario[f"gpu.0.mig.{device}.uuid"]],
        )
        for device, pod in MIG_HOLDERS.items()
    ]
    allocatable: dict[str, list[str]] = {}
    device = 0
    while f"gpu.0.mig.{device}.uuid" in scenario.values:
        resource = f"nvidia.com/mig-{mig_profile(scenario, device)}"
        allocatable.setdefault(resource, []).append(scenario[f"gpu.0.mig.{device}.uuid"])
        device += 1
    return assigned, sorted(allocatable.items())


def add_nvidia_driver(host: FixtureHost, scenario: Scenario) -> None:
    """What the NVIDIA driver shows in /proc for the scenario's GPUs: PodResources runs only on
    nodes with NVIDIA GPUs, and the minor numbers name the GPUs."""
    for gpu in range(scenario.gpu_count()):
        domain, bus, rest = scenario[f"gpu.{gpu}.pci_bus_id"].lower().split(":")
        location = f"{domain[-4:]}:{bus}:{rest}"
        d = host.procfs / "driver" / "nvidia" / "gpus" / location
        d.mkdir(parents=True)
        (d / "information").write_text(
            f"Model: \t\t {scenario[f'gpu.{gpu}.name']}\nIRQ:   \t\t {150 + gpu}\n"
            f"Bus Location: \t {location}\nDevice Minor: \t {gpu}\n"
        )


@dataclass
class LiveKube:
    """The fleet's kubelets, apiserver and PodResources servers; one CA, one token."""

    workdir: Path
    tls: TlsFiles
    token_file: Path
    socket_dir: Path  # unix socket paths are limited to 107 bytes: a short directory in /tmp
    servers: list[FakeKubelet | FakeApiserver | FakePodResources] = field(default_factory=list)

    @classmethod
    def create(cls, workdir: Path) -> LiveKube:
        token = workdir / "token"
        token.write_text(TOKEN)
        tls = make_tls(workdir / "tls")
        return cls(workdir, tls, token, Path(tempfile.mkdtemp(prefix="wp-live-", dir="/tmp")))

    def _auth(self) -> list[str]:
        return ["--kube.token-file", str(self.token_file), "--kube.ca-file", str(self.tls.ca)]

    def kubelet(self, node: str, pods: list[dict[str, Any]]) -> list[str]:
        """A kubelet serving pods; the exporter flags for it (PodResources off)."""
        kubelet = FakeKubelet(self.tls, TOKEN)
        kubelet.set_pods(pods)
        kubelet.start()
        self.servers.append(kubelet)
        return [
            "--kube.pod-source",
            "kubelet",
            "--kube.kubelet-url",
            kubelet.url,
            "--kube.node-name",
            node,
            *self._auth(),
            *POLL,
            "--kube.podresources-socket",
            "none",
        ]

    def apiserver(self, node: str, pods: list[dict[str, Any]]) -> list[str]:
        api = FakeApiserver(tls=self.tls, token=TOKEN)
        for pod in as_apiserver_pods(pods):
            api.add(pod)
        api.start()
        self.servers.append(api)
        return [
            "--kube.pod-source",
            "apiserver",
            "--kube.apiserver-url",
            api.url,
            "--kube.node-name",
            node,
            *self._auth(),
            *POLL,
            "--kube.podresources-socket",
            "none",
        ]

    def podresources(
        self,
        node: str,
        assigned: list[Assigned],
        allocatable: list[tuple[str, Sequence[str]]],
        claimed: Sequence[Claimed] = (),
        cdi_dir: Path | None = None,
    ) -> list[str]:
        """A PodResources server for node; flags that replace the kubelet()'s "none"."""
        server = FakePodResources(self.socket_dir / f"{node}.sock")
        server.lister.assigned = assigned
        server.lister.allocatable = allocatable
        server.lister.claimed = list(claimed)
        server.start()
        self.servers.append(server)
        cdi = ["--kube.cdi-spec-dirs", str(cdi_dir)] if cdi_dir is not None else []
        return ["--kube.podresources-socket", str(server.socket_path), *cdi]

    def stop(self) -> None:
        # in parallel: each HTTP server takes up to its poll interval (0.5 s) to shut down
        with ThreadPoolExecutor(max(1, len(self.servers))) as pool:
            for done in [pool.submit(server.stop) for server in self.servers]:
                done.result()
        shutil.rmtree(self.socket_dir, ignore_errors=True)
