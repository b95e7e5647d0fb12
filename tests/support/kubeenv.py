"""A loopback Kubernetes node for `wattprobe serve` end-to-end tests: fake kubelet (HTTPS),
fake apiserver, PodResources socket, and a ticker that keeps the fixture host's counters moving."""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.fixturehost import FixtureHost
from tests.support.kubefakes import (
    Assigned,
    FakeApiserver,
    FakeKubelet,
    FakePodResources,
    TlsFiles,
    make_tls,
)
from tests.support.paths import FIXTURES
from tests.support.running import ExporterProcess, Samples

TOKEN = "e2e-service-account-token"
GPU0 = "GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763"
MIG = "MIG-4f1c9a55-0e2b-5b7a-9d1c-33aa7c2e1f08"
# processes of the fixture /proc tree that run in pods
POD_PIDS = (1000, 1001, 1002, 1101, 1102, 1200, 1201, 1301, 1401, 2001, 2101, 2102, 2201)

# Device assignments the fake PodResources serves: a time-sliced GPU shared by two pods and a
# MIG device, plus a device that is no GPU.
ASSIGNED = [
    Assigned("ml", "trainer-0", "trainer", "nvidia.com/gpu", [f"{GPU0}::0"]),
    Assigned("ml", "infer-a", "server", "nvidia.com/gpu", [f"{GPU0}::1"]),
    Assigned("ml", "notebook", "jupyter", "nvidia.com/mig-1g.10gb", [MIG]),
    Assigned("ml", "trainer-0", "trainer", "example.com/nic", ["0000:3b:00.0"]),
]


def fixture_pods() -> list[dict[str, Any]]:
    """The checked-in kubelet payload: names for every pod of the fixture /proc tree."""
    items: list[dict[str, Any]] = json.loads((FIXTURES / "kube" / "kubelet-pods.json").read_text())[
        "items"
    ]
    return items


def as_apiserver_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The apiserver shows a static pod as a mirror pod: its own uid, the kubelet's in an
    annotation."""
    out = []
    for pod in json.loads(json.dumps(pods)):
        annotations = pod["metadata"]["annotations"]
        if annotations.get("kubernetes.io/config.source") == "file":
            annotations["kubernetes.io/config.mirror"] = pod["metadata"]["uid"]
            pod["metadata"]["uid"] = "6a1b7c2d-0000-4000-8000-00000000a001"
        out.append(pod)
    return out


@dataclass
class KubeNode:
    tls: TlsFiles
    token_file: Path
    socket_path: Path
    kubelet: FakeKubelet
    podresources: FakePodResources

    def kubelet_args(self) -> list[str]:
        return [
            "--kube.pod-source",
            "kubelet",
            "--kube.kubelet-url",
            self.kubelet.url,
            "--kube.token-file",
            str(self.token_file),
            "--kube.ca-file",
            str(self.tls.ca),
            "--kube.podresources-socket",
            str(self.socket_path),
        ]


def apiserver_args(url: str, *, podresources_socket: str = "none") -> list[str]:
    """Flags for names from an apiserver (or MetaServer) at url, for the fixture's node-1."""
    return [
        "--kube.pod-source",
        "apiserver",
        "--kube.apiserver-url",
        url,
        "--kube.node-name",
        "node-1",
        "--kube.podresources-socket",
        podresources_socket,
    ]


def add_nvidia_gpus(host: FixtureHost, bus_ids: tuple[str, ...] = ("0000:3b:00.0",)) -> None:
    """What the NVIDIA driver shows under /proc on a GPU node (PodResources runs only there)."""
    for bus in bus_ids:
        gpu = host.procfs / "driver" / "nvidia" / "gpus" / bus
        gpu.mkdir(parents=True, exist_ok=True)
        (gpu / "information").write_text(
            "Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 151\n"
            f"Bus Location: \t {bus}\nDevice Minor: \t 0\n"
        )


@contextlib.contextmanager
def kube_node(tmp_path: Path) -> Iterator[KubeNode]:
    tls = make_tls(tmp_path / "tls")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    sock_dir = Path(tempfile.mkdtemp(prefix="wp-", dir="/tmp"))  # unix paths: 107 bytes max
    kubelet = FakeKubelet(tls, TOKEN)
    kubelet.set_pods(fixture_pods())
    kubelet.start()
    podresources = FakePodResources(sock_dir / "kubelet.sock")
    podresources.lister.assigned = list(ASSIGNED)
    podresources.lister.allocatable = [("nvidia.com/gpu", [f"{GPU0}::{i}" for i in range(4)])]
    podresources.start()
    try:
        yield KubeNode(tls, token, sock_dir / "kubelet.sock", kubelet, podresources)
    finally:
        podresources.stop()
        kubelet.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)


@contextlib.contextmanager
def apiserver_for(pods: list[dict[str, Any]], *, metaserver: bool) -> Iterator[FakeApiserver]:
    fake = FakeApiserver(tls=None, token=None, metaserver=metaserver)
    for pod in pods:
        fake.add(pod)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


@contextlib.contextmanager
def ticking(host: FixtureHost, pids: tuple[int, ...] = POD_PIDS) -> Iterator[None]:
    """Keep RAPL energy, /proc/stat and the pods' CPU time moving, so every interval attributes
    energy to the pods."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(0.05):
            host.add_energy_j("intel-rapl:0", 2.0)
            host.add_energy_j("intel-rapl:1", 1.0)
            host.add_cpu_ticks(busy=10, idle=10)
            for pid in pids:
                if (host.procfs / str(pid)).exists():
                    with contextlib.suppress(FileNotFoundError):
                        host.add_process_ticks(pid, 1)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)


def wait_samples(
    exporter: ExporterProcess, check: Callable[[Samples], bool], what: str, timeout: float = 30.0
) -> Samples:
    deadline = time.monotonic() + timeout
    samples: Samples = {}
    while time.monotonic() < deadline:
        samples = exporter.samples()
        if check(samples):
            return samples
        time.sleep(0.1)
    up = {k: v for k, v in samples.items() if k[0] == "wattprobe_source_up"}
    raise AssertionError(f"timed out waiting for {what}; source_up: {up}\n{exporter.log()}")


def labels_of(samples: Samples, name: str, **match: str) -> list[dict[str, str]]:
    want = set(match.items())
    return [dict(lbl) for (n, lbl), _v in samples.items() if n == name and want <= lbl]


def source_up(samples: Samples, source: str) -> tuple[float, str] | None:
    for (n, lbl), v in samples.items():
        labels = dict(lbl)
        if n == "wattprobe_source_up" and labels.get("source") == source:
            return v, labels.get("reason", "")
    return None
