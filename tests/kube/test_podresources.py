"""PodResources against a real gRPC server on a unix socket; GPU holders through pod metadata."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter.kube.gpus import (
    DeviceAssignment,
)
from exporter.kube.kube import KubeWorkloads
from exporter.kube.podresources.client import PodResourcesClient
from exporter.kube.podresources.poller import PodResourcesPoller
from exporter.kube.pods import PodStore, parse_pod
from exporter.model.gpu_directory import EMPTY_DIRECTORY, GpuDirectory
from exporter.model.identity import ContainerRef
from exporter.model.readings import SourceError, SourceStatus
from exporter.model.snapshot import GpuAllocation
from tests.support.kubefakes import Assigned, Ctr, FakePodResources, pod_object
from tests.support.wait import eventually

GPU0 = "GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763"
MIG = "MIG-4f1c9a55-0e2b-5b7a-9d1c-33aa7c2e1f08"
MIG_RESOURCE = "nvidia.com/mig-1g.10gb"
WHOLE = "nvidia.com/gpu"
TRAINER = "b1" * 32
SERVER = "b2" * 32
JUPYTER = "b3" * 32


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    # unix socket paths are limited to 107 bytes: pytest's tmp_path can be longer
    path = Path(tempfile.mkdtemp(prefix="wp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def kubelet(sock_dir: Path) -> Iterator[FakePodResources]:
    fake = FakePodResources(sock_dir / "kubelet.sock")
    fake.lister.assigned = [
        Assigned("ml", "trainer-0", "trainer", "nvidia.com/gpu", [f"{GPU0}::0"]),
        Assigned("ml", "infer-a", "server", "nvidia.com/gpu", [f"{GPU0}::1"]),
        Assigned("ml", "notebook", "jupyter", "nvidia.com/mig-1g.10gb", [MIG]),
        Assigned("ml", "trainer-0", "trainer", "example.com/nic", ["0000:3b:00.0"]),
    ]
    fake.lister.allocatable = [
        ("nvidia.com/gpu", [f"{GPU0}::{i}" for i in range(4)]),
        ("nvidia.com/mig-1g.10gb", [MIG]),
        ("example.com/nic", ["0000:3b:00.0"]),
    ]
    fake.start()
    yield fake
    fake.stop()


def test_list_and_allocatable(kubelet: FakePodResources) -> None:
    client = PodResourcesClient(kubelet.socket_path, timeout_s=2)
    try:
        assert sorted(client.list_assignments(), key=lambda d: d.device_id) == [
            DeviceAssignment("ml", "trainer-0", "trainer", "example.com/nic", "0000:3b:00.0"),
            DeviceAssignment("ml", "trainer-0", "trainer", "nvidia.com/gpu", f"{GPU0}::0"),
            DeviceAssignment("ml", "infer-a", "server", "nvidia.com/gpu", f"{GPU0}::1"),
            DeviceAssignment("ml", "notebook", "jupyter", "nvidia.com/mig-1g.10gb", MIG),
        ]
        assert len(client.allocatable_devices()) == 6
    finally:
        client.close()


def reason(fn: Callable[[], object]) -> str:
    with pytest.raises(SourceError) as err:
        fn()
    return err.value.reason


def test_socket_problems(sock_dir: Path) -> None:
    client = PodResourcesClient(sock_dir / "kubelet.sock", timeout_s=1)
    assert reason(client.list_assignments) == "socket missing"
    (sock_dir / "kubelet.sock").write_text("not a socket")
    assert reason(client.list_assignments) == "unreachable"
    (sock_dir / "kubelet.sock").unlink()
    stale = socket.socket(socket.AF_UNIX)  # a socket file nobody listens on (kubelet died)
    stale.bind(str(sock_dir / "kubelet.sock"))
    stale.close()
    assert reason(client.list_assignments) == "unreachable"
    client.close()


def status_of(poller: PodResourcesPoller) -> SourceStatus:
    got = poller.statuses()
    return got[0] if got else SourceStatus("podresources", False, "pending")


def test_poller_reports_and_recovers_from_a_kubelet_restart(kubelet: FakePodResources) -> None:
    poller = PodResourcesPoller(
        PodResourcesClient(kubelet.socket_path, timeout_s=1), interval_s=0.2, ttl_s=3600
    )
    poller.start()
    try:
        eventually(lambda: status_of(poller).up, "up")
        assert status_of(poller).detail == ("3 GPU device assignments, 5 allocatable GPU devices")
        assert len(poller.assignments()) == 4
        kubelet.stop()  # the kubelet restarts: its socket goes away
        eventually(lambda: not status_of(poller).up, "down")
        assert status_of(poller).reason in ("socket missing", "unreachable")
        assert len(poller.assignments()) == 4  # kept for the TTL
        kubelet.lister.allocatable_unimplemented = True  # an older kubelet comes back
        kubelet.start()
        eventually(lambda: status_of(poller).up, "recovered")
        assert status_of(poller).detail == "3 GPU device assignments"
    finally:
        poller.stop()


def test_assignments_expire_after_the_ttl(kubelet: FakePodResources) -> None:
    now = [0.0]
    poller = PodResourcesPoller(
        PodResourcesClient(kubelet.socket_path, timeout_s=1),
        interval_s=10,
        ttl_s=60,
        clock=lambda: now[0],
    )
    poller.poll_once()
    now[0] = 59
    assert len(poller.assignments()) == 4
    now[0] = 61
    assert poller.assignments() == ()
    poller.stop()


def test_gpu_holders_and_allocation_rows(kubelet: FakePodResources) -> None:
    store = PodStore(ttl_s=3600, deleted_retention_s=600)
    pods = [
        pod_object(
            name="trainer-0",
            namespace="ml",
            uid="7a8b9c0d-1e2f-4a5b-8c6d-7e8f9a0b1c2d",
            containers=[Ctr("trainer", f"containerd://{TRAINER}")],
        ),
        pod_object(
            name="infer-a",
            namespace="ml",
            uid="11111111-1e2f-4a5b-8c6d-7e8f9a0b1c2d",
            containers=[Ctr("server", f"cri-o://{SERVER}")],
        ),
        pod_object(
            name="notebook",
            namespace="ml",
            uid="22222222-1e2f-4a5b-8c6d-7e8f9a0b1c2d",
            containers=[Ctr("jupyter", f"containerd://{JUPYTER}")],
        ),
    ]
    store.replace(p for p in map(parse_pod, pods) if p is not None)
    poller = PodResourcesPoller(
        PodResourcesClient(kubelet.socket_path, timeout_s=1), interval_s=10, ttl_s=3600
    )
    poller.poll_once()
    # what NVML plugs in later in the test: indexes and MIG parents
    directory = [EMPTY_DIRECTORY]
    kube = KubeWorkloads(
        store=store, pod_source=None, podresources=poller, gpu_directory=lambda: directory[0]
    )
    try:
        # a time-sliced GPU: both pods hold it
        assert kube.gpu_holders(GPU0) == (
            ContainerRef(container_id=TRAINER, pod_uid="7a8b9c0d-1e2f-4a5b-8c6d-7e8f9a0b1c2d"),
            ContainerRef(container_id=SERVER, pod_uid="11111111-1e2f-4a5b-8c6d-7e8f9a0b1c2d"),
        )
        jupyter = ContainerRef(container_id=JUPYTER, pod_uid="22222222-1e2f-4a5b-8c6d-7e8f9a0b1c2d")
        assert kube.gpu_holders(MIG) == (jupyter,)
        parent = "GPU-1b0e77c4-9d31-4f55-8a06-2c1e4f7d9b20"
        assert kube.gpu_holders(parent) == ()  # the MIG parent is unknown without NVML
        assert kube.gpu_allocations() == (
            GpuAllocation("", "", "", MIG, "ml", "notebook", "jupyter", resource=MIG_RESOURCE),
            GpuAllocation("", GPU0, "", "", "ml", "infer-a", "server", resource=WHOLE),
            GpuAllocation("", GPU0, "", "", "ml", "trainer-0", "trainer", resource=WHOLE),
        )
        directory[0] = GpuDirectory(
            index_by_uuid={GPU0: "0", parent: "1"},
            parent_by_mig_uuid={MIG: parent},
            instance_by_mig_uuid={MIG: "2"},
        )
        assert kube.gpu_holders(parent) == (jupyter,)
        held = GpuAllocation("1", parent, "2", MIG, "ml", "notebook", "jupyter", "", MIG_RESOURCE)
        assert held in kube.gpu_allocations()
        store.replace([])  # the pods were deleted: their names stay for the retention window
        assert len(kube.gpu_holders(GPU0)) == 2
    finally:
        poller.stop()
