"""DRA through the real gRPC PodResources fake: dynamic_resources for a whole GPU, a MIG device
and two claims sharing one GPU, resolved through CDI spec fixtures in the NVIDIA DRA driver's
format (tests/fixtures/cdi), with a spec naming a device the node does not have, a malformed
spec and a missing spec directory; then the holders and `check`'s account of it all."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.kube.cdi import CdiScanner
from exporter.kube.check import kube_checks
from exporter.kube.gpus import (
    ClaimDevice,
    mig_capability_minors,
)
from exporter.kube.kube import KubeWorkloads
from exporter.kube.podresources.client import PodResourcesClient
from exporter.kube.podresources.poller import PodResourcesPoller
from exporter.kube.pods import PodStore, parse_pod
from exporter.model.config import Config, PodSource
from exporter.model.gpu_directory import GpuDirectory
from exporter.model.identity import ContainerRef
from exporter.model.snapshot import GpuAllocation
from tests.support.kubefakes import Assigned, Claimed, Ctr, FakePodResources, pod_object
from tests.support.paths import FIXTURES

FIXTURES = FIXTURES / "cdi"
GPU0 = "GPU-5c8e1f3a-2b4d-4e6f-8a1b-3c5d7e9f0a01"  # minor 0, index 0
GPU1 = "GPU-6d9f2a4b-3c5e-4f70-9b2c-4d6e8fa01b12"  # minor 1, index 1
MIG_3G = "MIG-8c4c5a27-e508-5556-b2ea-7e549465741e"  # GI 1 on GPU 0
VENDOR = "k8s.gpu.nvidia.com"
WHOLE = f"{VENDOR}/claim=5f0e9c1a-2d3b-4c5d-8e6f-708192a3b4c5-gpu-1"
SHARED_A = f"{VENDOR}/claim=7a41d2e3-3e4c-4d6e-9f70-8192a3b4c5d6-gpu-0"
SHARED_B = f"{VENDOR}/claim=8b52e3f4-4f5d-4e7f-a081-92a3b4c5d6e7-gpu-0"
ABSENT = f"{VENDOR}/claim=9c63f405-5061-4f80-b192-a3b4c5d6e7f8-gpu-9"
MIG = f"{VENDOR}/claim=a1b2c3d4-6172-4091-82a3-b4c5d6e7f809-gpu-0-mig-3g20gb-9-4"

CLAIMED = [
    Claimed("ml", "train", "main", "train-gpu", [WHOLE], device="gpu-1"),
    Claimed("ml", "svc-a", "main", "shared-a", [SHARED_A], device="gpu-0"),
    Claimed("ml", "svc-b", "main", "shared-b", [SHARED_B], device="gpu-0"),
    Claimed("ml", "ghost", "main", "ghost-gpu", [ABSENT], device="gpu-9"),
    Claimed("ml", "notebook", "main", "mig-3g", [MIG], device="gpu-0-mig-3g20gb-9-4"),
]
UIDS = {
    name: f"{i:08x}-0000-4000-8000-00000000d{i:03d}"
    for i, name in enumerate(("train", "svc-a", "svc-b", "ghost", "notebook"), start=1)
}
CIDS = {name: f"{i:02x}" * 32 for i, name in enumerate(UIDS, start=0xD1)}


def nvidia_procfs(root: Path) -> Path:
    """The NVIDIA driver's procfs: GPUs with minors 0 and 1, and the MIG capabilities of
    GPU 0's instance 1 (minors 21 for the GPU instance, 22 for its compute instance)."""
    for bus, minor in (("0000:1b:00.0", 0), ("0000:43:00.0", 1)):
        gpu = root / "driver" / "nvidia" / "gpus" / bus
        gpu.mkdir(parents=True)
        (gpu / "information").write_text(f"Bus Location: \t {bus}\nDevice Minor: \t {minor}\n")
    gi = root / "driver" / "nvidia" / "capabilities" / "gpu0" / "mig" / "gi1"
    (gi / "ci0").mkdir(parents=True)
    (gi / "access").write_text("DeviceFileMinor: 21\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    (gi / "ci0" / "access").write_text("DeviceFileMinor: 22\nDeviceFileMode: 292\n")
    return root


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[FakePodResources, Path]]:
    sock_dir = Path(tempfile.mkdtemp(prefix="wp-", dir="/tmp"))
    fake = FakePodResources(sock_dir / "kubelet.sock")
    fake.lister.claimed = list(CLAIMED)
    fake.start()
    shutil.copytree(FIXTURES / "run", tmp_path / "run")
    shutil.copytree(FIXTURES / "etc", tmp_path / "etc")
    try:
        yield fake, tmp_path
    finally:
        fake.stop()
        shutil.rmtree(sock_dir, ignore_errors=True)


def directory(procfs: Path) -> GpuDirectory:
    """What NVML plus the driver's procfs say about the node (as BackendDirectory builds it)."""
    return GpuDirectory(
        index_by_uuid={GPU0: "0", GPU1: "1"},
        parent_by_mig_uuid={MIG_3G: GPU0},
        index_by_minor={0: "0", 1: "1"},
        instance_by_mig_uuid={MIG_3G: "1"},
        mig_by_cap_minor=mig_capability_minors(procfs),
    )


def test_the_client_reads_dynamic_resources(node: tuple[FakePodResources, Path]) -> None:
    fake, _ = node
    client = PodResourcesClient(fake.socket_path, timeout_s=2)
    try:
        devices, claims = client.list_all()
    finally:
        client.close()
    assert devices == []
    assert sorted(claims, key=lambda c: c.pod)[0] == ClaimDevice(
        "ml", "ghost", "main", "ml", "ghost-gpu", (ABSENT,), "gpu.nvidia.com", "node-1", "gpu-9"
    )
    assert {(c.pod, c.claim, c.cdi_devices) for c in claims} == {
        (c.pod, c.claim, tuple(c.cdi_devices)) for c in CLAIMED
    }


def test_mig_capabilities_name_the_instance(tmp_path: Path) -> None:
    assert mig_capability_minors(nvidia_procfs(tmp_path)) == {21: (0, "1"), 22: (0, "1")}
    assert mig_capability_minors(tmp_path / "absent") == {}


def test_claims_resolve_to_gpus_and_holders(node: tuple[FakePodResources, Path]) -> None:
    fake, root = node
    procfs = nvidia_procfs(root / "proc")
    store = PodStore(ttl_s=3600, deleted_retention_s=600)
    store.replace(
        p
        for p in (
            parse_pod(
                pod_object(
                    name=name,
                    namespace="ml",
                    uid=uid,
                    containers=[Ctr("main", f"containerd://{CIDS[name]}")],
                )
            )
            for name, uid in UIDS.items()
        )
        if p is not None
    )
    poller = PodResourcesPoller(
        PodResourcesClient(fake.socket_path, timeout_s=2),
        interval_s=10,
        ttl_s=3600,
        cdi=CdiScanner((root / "etc", root / "missing", root / "run")),
    )
    got = poller.poll_once()
    assert got.cdi.missing_dirs == (str(root / "missing"),)
    assert [p.path.rsplit("/", 1)[-1] for p in got.cdi.problems] == [
        "k8s.gpu.nvidia.com-claim_broken.yaml"
    ]
    kube = KubeWorkloads(
        store=store, pod_source=None, podresources=poller, gpu_directory=lambda: directory(procfs)
    )

    def ref(name: str) -> ContainerRef:
        return ContainerRef(container_id=CIDS[name], pod_uid=UIDS[name])

    try:
        assert kube.gpu_allocations() == (
            GpuAllocation("0", GPU0, "", "", "ml", "svc-a", "main", "shared-a"),
            GpuAllocation("0", GPU0, "", "", "ml", "svc-b", "main", "shared-b"),
            GpuAllocation("0", GPU0, "1", MIG_3G, "ml", "notebook", "main", "mig-3g"),
            GpuAllocation("1", GPU1, "", "", "ml", "train", "main", "train-gpu"),
        )
        # two claims share GPU 0; its MIG instance's holder counts for the parent too
        assert set(kube.gpu_holders(GPU0)) == {ref("svc-a"), ref("svc-b"), ref("notebook")}
        assert kube.gpu_holders(MIG_3G) == (ref("notebook"),)
        assert kube.gpu_holders(GPU1) == (ref("train"),)
        held = kube.holdings()
        assert (held.claims, held.by_spec, held.by_name) == (4, 4, 0)
        assert [(u.what, u.reason) for u in held.unresolved] == [
            ("claim ml/ghost-gpu", f"{ABSENT}: names /dev/nvidia9, which this node does not have")
        ]
    finally:
        poller.stop()


def test_without_spec_files_the_driver_names_still_tell(
    node: tuple[FakePodResources, Path],
) -> None:
    """The spec directories not mounted: the NVIDIA driver's device names (gpu-<minor>) are
    the fallback; a name that is no NVIDIA driver's stays unresolved, with the reason."""
    fake, root = node
    fake.lister.claimed = [
        Claimed("ml", "train", "main", "train-gpu", [WHOLE], device="gpu-1"),
        Claimed("ml", "other", "main", "nic", ["example.com/nic=eth1"], driver="example.com"),
    ]
    poller = PodResourcesPoller(
        PodResourcesClient(fake.socket_path, timeout_s=2),
        interval_s=10,
        ttl_s=3600,
        cdi=CdiScanner((root / "nowhere",)),
    )
    poller.poll_once()
    kube = KubeWorkloads(
        store=None, pod_source=None, podresources=poller, gpu_directory=lambda: directory(root)
    )
    try:
        assert kube.gpu_allocations() == (
            GpuAllocation("1", GPU1, "", "", "ml", "train", "main", "train-gpu"),
        )
        held = kube.holdings()
        assert (held.by_spec, held.by_name) == (0, 1)
        assert [u.reason for u in held.unresolved] == ["example.com/nic=eth1: in no CDI spec"]
    finally:
        poller.stop()


def test_check_says_what_it_found_and_what_not(node: tuple[FakePodResources, Path]) -> None:
    fake, root = node
    config = Config(
        procfs=nvidia_procfs(root / "proc"),
        pod_source=PodSource.NONE,
        podresources_socket=fake.socket_path,
        cdi_spec_dirs=(root / "etc", root / "missing", root / "run"),
    )
    (entry,) = [r for r in kube_checks(config, environ={}) if r.source == "podresources"]
    assert entry.ok
    assert entry.found.startswith("4 GPU allocations to 4 containers")
    assert "0 device plugin devices, 4 DRA claim devices" in entry.found
    items = "\n".join(entry.items)
    assert "DRA claims: 5 claim devices, 4 resolved (4 through CDI specs" in items
    assert f"CDI specs: 7 read, 10 devices in {root / 'etc'}, {root / 'run'}" in items
    assert f"missing: {root / 'missing'}" in items
    assert "bad CDI spec" in items and "claim_broken.yaml: not YAML" in items
    assert "unresolved claim of ml/ghost/main: claim ml/ghost-gpu" in items
    assert "/dev/nvidia9, which this node does not have" in items


def test_volcano_placeholders_follow_the_pods_annotation(
    node: tuple[FakePodResources, Path],
) -> None:
    """Volcano's vGPU plugin: the kubelet handed out placeholders of GPU 0 to both pods, but the
    scheduler gave svc-b GPU 1 (its pod's volcano.sh/vgpu-ids-new annotation, through the pod
    source); svc-a's pod has no annotation and the node has two GPUs: no holder, one report."""
    fake, root = node
    fake.lister.claimed = []
    fake.lister.assigned = [
        Assigned("ml", "svc-a", "main", "volcano.sh/vgpu-number", [f"{GPU0}-3"]),
        Assigned("ml", "svc-b", "main", "volcano.sh/vgpu-number", [f"{GPU0}-4", f"{GPU0}-5"]),
        Assigned(
            "ml",
            "svc-b",
            "main",
            "volcano.sh/vgpu-memory",
            [f"{GPU0}-memory-{i}" for i in range(3)],
        ),
    ]
    pods = []
    for name in ("svc-a", "svc-b"):
        obj = pod_object(
            name=name,
            namespace="ml",
            uid=UIDS[name],
            containers=[Ctr("main", f"containerd://{CIDS[name]}")],
        )
        if name == "svc-b":
            obj["metadata"].setdefault("annotations", {})["volcano.sh/vgpu-ids-new"] = (
                f"{GPU1},NVIDIA,8000,50:"
            )
        pods.append(obj)
    store = PodStore(ttl_s=3600, deleted_retention_s=600)
    store.replace(p for p in map(parse_pod, pods) if p is not None)
    poller = PodResourcesPoller(
        PodResourcesClient(fake.socket_path, timeout_s=2), interval_s=10, ttl_s=3600
    )
    poller.poll_once()
    kube = KubeWorkloads(
        store=store, pod_source=None, podresources=poller, gpu_directory=lambda: directory(root)
    )
    try:
        number = "volcano.sh/vgpu-number"  # vgpu-memory is no GPU resource by default
        assert kube.gpu_allocations() == (
            GpuAllocation("1", GPU1, "", "", "ml", "svc-b", "main", resource=number),
        )
        assert kube.gpu_holders(GPU1) == (
            ContainerRef(container_id=CIDS["svc-b"], pod_uid=UIDS["svc-b"]),
        )
        assert kube.gpu_holders(GPU0) == ()
        assert [(u.holder, u.what) for u in kube.holdings().unresolved] == [
            ("ml/svc-a/main", f"{GPU0}-3")
        ]
    finally:
        poller.stop()


def test_cdi_rejections_are_counted_and_logged_per_episode(
    node: tuple[FakePodResources, Path], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 41: a refused spec was logged once for the life of the process and counted
    nowhere. Now each time a spec becomes refused it counts, by reason, and is logged; while it
    stays refused, nothing more; once fixed, one line says so."""
    fake, root = node
    broken = next((root / "run").rglob("*claim_broken.yaml"))
    poller = PodResourcesPoller(
        PodResourcesClient(fake.socket_path, timeout_s=2),
        interval_s=10,
        ttl_s=3600,
        cdi=CdiScanner((root / "etc", root / "run")),
    )
    kube = KubeWorkloads(store=None, pod_source=None, podresources=poller)
    caplog.set_level(logging.INFO, logger="exporter.kube.podresources.poller")
    try:
        for _ in range(3):
            poller.poll_once()
        assert kube.cdi_rejections() == (("invalid", 1),)
        os.mkfifo(broken.with_name("k8s.gpu.nvidia.com-fifo.yaml"))
        poller.poll_once()
        poller.poll_once()
        assert kube.cdi_rejections() == (("invalid", 1), ("not_a_file", 1))
        good = broken.read_text()
        broken.write_text("kind: nvidia.com/gpu\ncdiVersion: 0.6.0\ndevices: []\n")
        poller.poll_once()
        broken.write_text(good)  # broken again: a new episode
        poller.poll_once()
        assert kube.cdi_rejections() == (("invalid", 2), ("not_a_file", 1))
    finally:
        poller.stop()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 3 and sum("claim_broken" in w for w in warnings) == 2
    assert sum("no longer refused" in r.getMessage() for r in caplog.records) == 1
