"""GPU processes the task list lacks (per-cgroup tasks): their container from /proc/<pid>/cgroup
(exporter/sources/activity/procfs/pidowner.py), through the monitor's GPU split and the holders
rule."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from exporter.accounting.gpu import UNKNOWN_PROCESSES
from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.host.cgroupfs.classify import classify_cgroup
from exporter.model.config import IdleAttribution
from exporter.model.readings import TaskSample
from exporter.model.snapshot import Snapshot
from exporter.sources.activity.procfs.source import gpu_pid_owners
from tests.sources.gpu.nvml.pods import POD_A, POD_B, GpuPod
from tests.sources.gpu.nvml.scripted import (
    Clock,
    GiB,
    ScriptedGpus,
    StaticActivity,
    StaticCpu,
    gpu_reading,
)
from tests.sources.gpu.nvml.test_monitor_gpu import IDLE_20W, by_container, gpu_mode, step
from tests.support.fixturehost import stat_line, write_atomic
from tests.support.monitor import monitor_settings


def add(procfs: Path, pod: GpuPod, start: int) -> None:
    d = procfs / str(pod.pid)
    d.mkdir(exist_ok=True)
    write_atomic(d / "cgroup", pod.cgroup)
    write_atomic(d / "stat", stat_line(pod.pid, pod.comm, 100, 0, start=start))


def bucket(pod: GpuPod, seq: int) -> TaskSample:
    """A per-cgroup task of the pod's container (cgrouptree.py): no process, pid 0."""
    return TaskSample((-2, seq), 0, "[cgroup]", pod.cgroup.removeprefix("0::").strip(), False, 1.0)


def assert_split_exactly(snap: Snapshot, policy: IdleAttribution) -> None:
    """Σ containers == the GPU's active energy (and idle, where holders take it all)."""
    for mode in ("active", "idle") if policy is IdleAttribution.HOLDERS else ("active",):
        got = math.fsum(by_container(snap, 0, mode).values())
        assert got == pytest.approx(gpu_mode(snap, 0, mode), rel=1e-9)


def test_resolves_by_pid_and_start_time_and_caches(tmp_path: Path) -> None:
    add(tmp_path, POD_A, start=500)
    owners = gpu_pid_owners(tmp_path)
    found = owners.resolve({POD_A.pid, 4242})  # 4242: no /proc entry (exited, or hidden)
    assert found == {POD_A.pid: ((POD_A.pid, 500), classify_cgroup(POD_A.cgroup))}
    assert owners.cgroup_reads == 1
    assert owners.resolve({POD_A.pid}) == found
    assert owners.cgroup_reads == 1  # cached by (pid, start time)
    # the PID is reused by pod B's process: another start time, read again
    add(tmp_path, GpuPod(POD_A.pid, "x", POD_B.pod_uid, POD_B.container_id), start=900)
    again = owners.resolve({POD_A.pid})
    assert again[POD_A.pid] == ((POD_A.pid, 900), classify_cgroup(POD_B.cgroup))
    assert owners.cgroup_reads == 2


def test_a_cached_process_is_rechecked_every_few_calls(tmp_path: Path) -> None:
    add(tmp_path, POD_A, start=500)
    owners = gpu_pid_owners(tmp_path)
    owners.resolve({POD_A.pid})
    write_atomic(tmp_path / str(POD_A.pid) / "cgroup", POD_B.cgroup)  # moved, no exec
    seen = [owners.resolve({POD_A.pid})[POD_A.pid][1] for _ in range(12)]
    assert seen[0] == classify_cgroup(POD_A.cgroup)
    assert seen[-1] == classify_cgroup(POD_B.cgroup)


def test_a_garbage_stat_is_not_resolved(tmp_path: Path) -> None:
    add(tmp_path, POD_A, start=500)
    write_atomic(tmp_path / str(POD_A.pid) / "stat", "5101 (x) S 1 2\n")
    assert gpu_pid_owners(tmp_path).resolve({POD_A.pid}) == {}


def monitor(tmp_path: Path, gpus: ScriptedGpus, clock: Clock, policy: IdleAttribution) -> Monitor:
    return Monitor(
        MonitorParts(
            cpu=StaticCpu(),
            activity=StaticActivity([bucket(POD_A, 1), bucket(POD_B, 2)]),
            gpus=[gpus] if gpus is not None else [],
            gpu_pids=gpu_pid_owners(tmp_path).resolve,
        ),
        monitor_settings(idle_power=IDLE_20W, idle_policy=policy),
        clock=clock,
        wall_clock=clock,
    )


def test_gpu_energy_reaches_containers_with_per_cgroup_tasks(tmp_path: Path) -> None:
    add(tmp_path, POD_A, start=500)
    add(tmp_path, POD_B, start=501)
    gpus, clock = ScriptedGpus(), Clock()
    procs = [(POD_A.pid, 4 * GiB), (POD_B.pid, 4 * GiB), (5104, GiB)]
    sm = [(POD_A.pid, 30.0), (POD_B.pid, 10.0), (5104, 10.0)]
    gpus.push(gpu_reading(0, 0, processes=procs, sm=sm))
    gpus.push(gpu_reading(0, 100_000, processes=procs, sm=sm))
    m = monitor(tmp_path, gpus, clock, IdleAttribution.NONE)
    step(m, clock)
    snap = step(m, clock)
    active = by_container(snap, 0, "active")
    # 100 J - 20 W x 1 s idle = 80 J active, by SM share 30:10:10; 5104 has no /proc entry
    assert active == {
        POD_A.container_id: pytest.approx(48.0),
        POD_B.container_id: pytest.approx(16.0),
        UNKNOWN_PROCESSES: pytest.approx(16.0),
    }
    memory = {(m.container_id or m.container): m.used_bytes for m in snap.gpu_container_memory}
    assert memory == {
        POD_A.container_id: 4 * GiB,
        POD_B.container_id: 4 * GiB,
        UNKNOWN_PROCESSES: GiB,
    }
    assert_split_exactly(snap, IdleAttribution.NONE)


def test_holders_rule_finds_the_pods_of_gpu_processes_with_per_cgroup_tasks(
    tmp_path: Path,
) -> None:
    """No PodResources: the holders are the pods whose processes have a context on the GPU;
    they split its idle by their active share."""
    add(tmp_path, POD_A, start=500)
    add(tmp_path, POD_B, start=501)
    gpus, clock = ScriptedGpus(), Clock()
    procs = [(POD_A.pid, 4 * GiB), (POD_B.pid, 4 * GiB)]
    sm = [(POD_A.pid, 30.0), (POD_B.pid, 10.0)]
    gpus.push(gpu_reading(0, 0, processes=procs, sm=sm))
    gpus.push(gpu_reading(0, 100_000, processes=procs, sm=sm))
    m = monitor(tmp_path, gpus, clock, IdleAttribution.HOLDERS)
    step(m, clock)
    snap = step(m, clock)
    idle = by_container(snap, 0, "idle")
    assert idle == {
        POD_A.container_id: pytest.approx(15.0),
        POD_B.container_id: pytest.approx(5.0),
    }
    assert_split_exactly(snap, IdleAttribution.HOLDERS)
