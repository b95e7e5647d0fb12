"""DRM GPUs (AMD, Intel) in the monitor: engine time splits active energy, and beside NVIDIA GPUs
(scripted NVML readings) both are attributed with their sums exact."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.model.ports import GpuBackend
from exporter.model.readings import SourceAbsent
from exporter.model.snapshot import Snapshot
from exporter.sources.gpu.drm.source import DrmSource
from tests.sources.gpu.nvml.pods import POD_A, POD_B, POD_C, GpuPod
from tests.sources.gpu.nvml.scripted import (
    Clock,
    GiB,
    ScriptedGpus,
    StaticActivity,
    StaticCpu,
    gpu_reading,
)
from tests.sources.gpu.nvml.scripted import task as nvml_task
from tests.sources.gpu.nvml.test_monitor_gpu import (
    IDLE_20W,
    assert_gpu_invariants,
    by_pod,
    gpu_energy,
)
from tests.support.drmhost import (
    ARC,
    PID_A,
    PID_ARC,
    PID_B,
    RDNA3,
    amdgpu_fdinfo,
    write_fd,
    xe_fdinfo,
)
from tests.support.monitor import monitor_settings
from tests.support.paths import FIXTURES

FIXTURE = FIXTURES / "drm"
# the fixture tree's GPU processes, as pods (tests/support/drmhost.py's PIDs)
AMD_POD_A = GpuPod(PID_A, "python3", POD_A.pod_uid, POD_A.container_id)
AMD_POD_B = GpuPod(PID_B, "python3", POD_B.pod_uid, POD_B.container_id)
ARC_POD = GpuPod(PID_ARC, "ollama", POD_C.pod_uid, POD_C.container_id)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    dest = tmp_path / "drm"
    shutil.copytree(FIXTURE, dest, symlinks=True)
    return dest


def monitor(
    clock: Clock, primary: GpuBackend, *more: GpuBackend, pods: tuple[GpuPod, ...]
) -> Monitor:
    return Monitor(
        MonitorParts(
            cpu=StaticCpu(),
            activity=StaticActivity([nvml_task(p) for p in pods]),
            gpus=[primary, *more],
        ),
        monitor_settings(idle_power=IDLE_20W, with_processes=True),
        clock=clock,
        wall_clock=clock,
    )


def step(m: Monitor, clock: Clock) -> Snapshot:
    snap = m.step()
    clock.now += 1.0
    return snap


def use_gpus(
    proc: Path, a_ns: int, b_ns: int, *, a_cycles: int, arc_cycles: int, total: int
) -> None:
    a = amdgpu_fdinfo(RDNA3.pci, 18, gfx_ns=a_ns)
    for pid, fd in ((PID_A, 5), (PID_A, 6), (4103, 9)):
        write_fd(proc, pid, fd, RDNA3.dev_node, a)
    write_fd(proc, PID_B, 5, RDNA3.dev_node, amdgpu_fdinfo(RDNA3.pci, 19, gfx_ns=b_ns))
    write_fd(proc, PID_A, 7, ARC.dev_node, xe_fdinfo(ARC.pci, 4, rcs_cycles=a_cycles, total=total))
    write_fd(
        proc, PID_ARC, 5, ARC.dev_node, xe_fdinfo(ARC.pci, 5, rcs_cycles=arc_cycles, total=total)
    )


def energy_uj(tree: Path) -> Path:
    return tree / "sys" / "class" / "hwmon" / "hwmon9" / "energy1_input"


def test_two_pods_3_to_1_engine_time_split_active_energy_3_to_1(tree: Path) -> None:
    clock = Clock()
    drm = DrmSource(tree / "sys", tree / "proc", clock=clock)
    m = monitor(clock, drm, pods=(AMD_POD_A, AMD_POD_B, ARC_POD))
    step(m, clock)
    # 1 s: pod A 0.6 s of gfx, pod B 0.2 s; on the Arc, pod A 3000 cycles, the other 1000
    use_gpus(
        tree / "proc", 3_600_000_000, 1_200_000_000, a_cycles=6000, arc_cycles=2000, total=20_000
    )
    counter = energy_uj(tree)
    counter.write_text(f"{int(counter.read_text()) + 50_000_000}\n")  # +50 J
    snap = step(m, clock)
    rdna = next(g for g in snap.gpus if g.uuid == RDNA3.pci)
    arc = next(g for g in snap.gpus if g.uuid == ARC.pci)
    # RDNA3: 85 W power1_input integrated over 1 s, 20 W idle
    assert gpu_energy(snap, rdna.index) == {
        ("drm_power", "active"): pytest.approx(65.0),
        ("drm_power", "idle"): pytest.approx(20.0),
    }
    pods = by_pod(snap, rdna.index, "active")
    assert pods[POD_A.pod_uid] == pytest.approx(48.75)
    assert pods[POD_B.pod_uid] == pytest.approx(16.25)
    assert dict(rdna.attribution) == {"engine": 1}
    # the Intel dGPU's energy counter: +50 J, split by cycles 3:1 (pod A is on both GPUs)
    assert gpu_energy(snap, arc.index) == {
        ("drm_energy", "active"): pytest.approx(30.0),
        ("drm_energy", "idle"): pytest.approx(20.0),
    }
    arc_pods = by_pod(snap, arc.index, "active")
    assert arc_pods[POD_A.pod_uid] == pytest.approx(22.5)
    assert arc_pods[POD_C.pod_uid] == pytest.approx(7.5)
    assert (rdna.vendor, arc.vendor) == ("amd", "intel")
    health = {(d.source, d.device) for d in snap.devices if d.zone == "gpu"}
    assert ("drm", str(rdna.index)) in health
    assert_gpu_invariants(snap)


def test_nvidia_and_amd_gpus_on_one_node_both_attributed(tree: Path) -> None:
    clock = Clock()
    nvml = ScriptedGpus()
    procs = [(POD_C.pid, 4 * GiB)]
    nvml.push(gpu_reading(0, 1_000_000, processes=procs, sm=[(POD_C.pid, 50.0)]))
    nvml.push(gpu_reading(0, 1_100_000, processes=procs, sm=[(POD_C.pid, 50.0)]))  # +100 J
    drm = DrmSource(tree / "sys", tree / "proc", clock=clock)
    m = monitor(clock, nvml, drm, pods=(AMD_POD_A, AMD_POD_B, POD_C))
    first = step(m, clock)
    use_gpus(
        tree / "proc", 3_600_000_000, 1_200_000_000, a_cycles=6000, arc_cycles=2000, total=20_000
    )
    snap = step(m, clock)
    indexes = {g.uuid: g.index for g in snap.gpus}
    # NVML keeps index 0; the DRM GPUs follow, in card order, unchanged between intervals
    assert indexes == {
        "GPU-0": 0,
        RDNA3.pci: 1,
        "0000:0f:00.0": 2,
        ARC.pci: 3,
    }  # the integrated GPU (0000:00:02.0) has no power sensor: not metered
    assert {g.uuid: g.index for g in first.gpus} == indexes
    assert gpu_energy(snap, 0) == {
        ("nvml_energy", "active"): pytest.approx(80.0),
        ("nvml_energy", "idle"): pytest.approx(20.0),
    }
    assert by_pod(snap, 0, "active") == {POD_C.pod_uid: pytest.approx(80.0)}
    amd = by_pod(snap, 1, "active")
    assert amd == {POD_A.pod_uid: pytest.approx(48.75), POD_B.pod_uid: pytest.approx(16.25)}
    assert {s.source: s.up for s in snap.sources if s.source in ("nvml", "drm")} == {
        "nvml": True,
        "drm": True,
    }
    assert_gpu_invariants(snap)
    # node-wide conservation over every GPU: the pods' active GPU energy is the GPUs' active
    gpus_active = sum(
        j
        for g in snap.gpus
        for (_, mode), j in gpu_energy(snap, g.index).items()
        if mode == "active"
    )
    pods_active = sum(
        e.joules for p in snap.pods for e in p.energy if e.zone == "gpu" and e.mode == "active"
    )
    unattributed = sum(
        e.joules
        for c in snap.containers
        if not c.pod_uid
        for e in c.energy
        if e.zone == "gpu" and e.mode == "active"
    )
    assert pods_active + unattributed == pytest.approx(gpus_active)


def test_nvml_absent_and_a_drm_gpu_vanishing(tree: Path) -> None:
    clock = Clock()
    nvml = ScriptedGpus([SourceAbsent("no NVIDIA driver")] * 3)
    drm = DrmSource(tree / "sys", tree / "proc", clock=clock)
    m = monitor(clock, nvml, drm, pods=(AMD_POD_A, AMD_POD_B, ARC_POD))
    step(m, clock)
    (tree / "sys" / "class" / "drm" / "card0").unlink()  # the RDNA3 card is gone
    snap = step(m, clock)
    statuses = {s.source: (s.up, s.reason) for s in snap.sources if s.source in ("nvml", "drm")}
    assert statuses == {"nvml": (False, "absent"), "drm": (True, "")}
    rdna = next(g for g in snap.gpus if g.uuid == RDNA3.pci)
    assert rdna.index == 0 and rdna.reading is None  # kept, its gauges gone
    step(m, clock)
