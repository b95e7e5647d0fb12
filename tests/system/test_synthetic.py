"""The benchmarks' synthetic node (tests/benchmarks/synthetic.py) is what it says it is: the
exporter reads it like a real node, its pods and containers come out right, and advance() moves
what a busy node moves."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from exporter.app.wiring import build_monitor
from exporter.host.cgroupfs.classify import classify_task
from exporter.host.procstat import CLOCK_TICKS
from exporter.model.config import ActivitySource, Config, PodSource
from exporter.sources.activity.procfs.source import ProcfsSource
from exporter.sources.power.rapl import RaplSource
from tests.benchmarks.synthetic import HostShape, SyntheticHost
from tests.support.invariants import check_monotonic, check_snapshot

SHAPE = HostShape(processes=800, pods=20, containers=3, gpus=8)


@pytest.fixture
def node(tmp_path: Path) -> SyntheticHost:
    return SyntheticHost.create(tmp_path / "node", SHAPE)


def test_processes_pods_and_containers(node: SyntheticHost) -> None:
    tasks = ProcfsSource(node.procfs).tasks()
    assert len(tasks) == SHAPE.processes
    refs = [classify_task(t.cgroup, t.kernel_thread) for t in tasks]
    pods = {r.pod_uid for r in refs if r.pod_uid}
    containers = {r.container_id for r in refs if r.container_id}
    assert len(pods) == SHAPE.pods
    assert len(containers) == SHAPE.pods * (SHAPE.containers + 1)  # + the pause sandbox
    kinds = Counter(r.pseudo or "pod" for r in refs)
    assert kinds["kernel_processes"] == round(SHAPE.processes * SHAPE.kernel_share)
    assert kinds["system_processes"] > 0
    runtimes = {r.runtime for r in refs if r.pod_uid}
    # the cgroupfs driver's bare container ids do not name their runtime
    assert runtimes == {"containerd", "cri-o", "docker", ""}
    assert {r.qos for r in refs if r.pod_uid} == {"guaranteed", "burstable", "besteffort"}
    v1 = [t for t in tasks if t.cgroup.count("\n") == 14]  # 13 controllers + 0::/
    assert v1, "the cgroupfs driver's cgroup v1 layout is there"


def test_advance_moves_counters_and_churns(node: SyntheticHost) -> None:
    source = ProcfsSource(node.procfs)
    before = {t.key: t.cpu_seconds for t in source.tasks()}
    cpu0 = source.cpu_times()
    rapl0 = {r.device: r.energy_uj for r in RaplSource(node.sysfs).read()}
    node.advance(5.0)
    after = {t.key: t.cpu_seconds for t in source.tasks()}
    cpu1 = source.cpu_times()
    assert len(after) == SHAPE.processes
    churned = round(SHAPE.processes * SHAPE.churn_share)
    assert len(set(before) - set(after)) == churned == len(set(after) - set(before))
    ran = [k for k in before.keys() & after.keys() if after[k] > before[k]]
    assert abs(len(ran) - SHAPE.processes * SHAPE.busy_share) <= churned
    busy = cpu1.busy_s - cpu0.busy_s
    total = busy + (cpu1.idle_s - cpu0.idle_s)
    assert total == pytest.approx(5.0 * SHAPE.ncpu, abs=2 / CLOCK_TICKS)
    assert 0.2 < busy / total < 0.9
    ran_s = sum(after[k] - before[k] for k in ran)
    assert ran_s <= busy + 1e-6, "processes never use more CPU than the node had"
    rapl1 = {r.device: r.energy_uj for r in RaplSource(node.sysfs).read()}
    assert all(rapl1[d] != rapl0[d] for d in rapl0)
    assert node.scenario.gpu_count() == SHAPE.gpus


def test_the_monitor_attributes_it_with_the_invariants_holding(node: SyntheticHost) -> None:
    monitor = build_monitor(
        Config(
            procfs=node.procfs,
            sysfs=node.sysfs,
            activity_source=ActivitySource.PROCFS,
            pod_source=PodSource.NONE,
            collectors=frozenset({"rapl", "hwmon"}),
        )
    )
    try:
        last = time.monotonic()
        previous = monitor.step()
        for _ in range(3):
            time.sleep(0.05)
            now = time.monotonic()
            node.advance(now - last)  # by the time that passed: the counters stay plausible
            last = now
            snap = monitor.step()
            check_snapshot(snap)
            check_monotonic(previous, snap)
            previous = snap
        assert {p.pod_uid for p in snap.pods} == {
            classify_task(p.cgroup.text, False).pod_uid
            for p in node.processes.values()
            if classify_task(p.cgroup.text, p.kernel).pod_uid
        }
        assert all(s.up for s in snap.sources if s.source in ("procfs", "rapl", "hwmon"))
    finally:
        monitor.close()
