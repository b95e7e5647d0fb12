"""Energy a team can bill by, through `wattprobe serve` with the fake NVML and default flags.

No --power.idle and no --attribution.idle: what a new user gets. Every GPU's counter advances by
its scenario power times the real time elapsed (tests/support/livegpus.py), so the GPUs draw
steadily:
- GPU 1: one pod (torchrun, POD_C), 97 % busy at 640 of 700 W. Its pod must be billed all of
  the GPU's energy (active, and the idle of a GPU it holds), at least 90 % of it as active.
- GPU 0: two time-sliced pods with SM shares 60:20; idle and active split 3:1.
- GPU 6: 0 % busy at 70.5 W, nobody holds it: no pod is billed, and its idle is learned.
With PodResources, an allocated GPU nobody runs on is its holder's waste: billed to the holder.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.accounting.idle import PRIOR_SHARE
from tests.conftest import StartExporter
from tests.sources.gpu.nvml.pods import H100_PODS, POD_A, POD_B, POD_C, POD_D, add_pods
from tests.sources.gpu.nvml.scenario import Scenario
from tests.sources.gpu.nvml.test_kube_requests import gpu_pod
from tests.support.fixturehost import FixtureHost
from tests.support.kubeenv import add_nvidia_gpus, kube_node
from tests.support.kubefakes import Assigned
from tests.support.livegpus import FakeGpus
from tests.support.running import ExporterProcess, Samples, parse_samples, select

INTERVAL = "0.4s"
INTERVALS = 12
BUSY, SLICED, UNHELD = 1, 0, 6


@pytest.fixture
def gpus(
    host: FixtureHost, tmp_path_factory: pytest.TempPathFactory, fake_nvml_dir: Path
) -> FakeGpus:
    add_pods(host, H100_PODS)
    scenario = Scenario.from_fixture(
        "h100x8-timesliced", tmp_path_factory.mktemp("nvml") / "h.nvml"
    )
    scenario.write()
    return FakeGpus(scenario, fake_nvml_dir, H100_PODS)


def run_steadily(proc: ExporterProcess, gpus: FakeGpus, intervals: int) -> tuple[Samples, Samples]:
    """Samples before and after `intervals` intervals of the GPUs drawing their power."""

    def advance_until_next() -> Samples:
        before = proc.metrics()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            gpus.advance()
            body = proc.metrics()
            if _count(body) != _count(before):
                return parse_samples(body)
            time.sleep(0.05)
        raise AssertionError(f"no new interval:\n{proc.log()}")

    for _ in range(3):  # the first reading is the baseline; idle evidence needs 3 intervals
        advance_until_next()
    first = advance_until_next()
    last = first
    for _ in range(intervals):
        last = advance_until_next()
    return first, last


def _count(body: str) -> float:
    return math.fsum(select(parse_samples(body), "wattprobe_intervals_total").values())


def grown(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return math.fsum(select(after, name, **labels).values()) - math.fsum(
        select(before, name, **labels).values()
    )


def pod_gpu(before: Samples, after: Samples, pod_uid: str, gpu: int, mode: str = "") -> float:
    labels = {"pod_uid": pod_uid, "zone": "gpu", "gpu": str(gpu)}
    if mode:
        labels["mode"] = mode
    return grown(before, after, "wattprobe_pod_energy_joules_total", **labels)


def gpu_energy(before: Samples, after: Samples, gpu: int, mode: str = "") -> float:
    labels = {"gpu": str(gpu), **({"mode": mode} if mode else {})}
    return grown(before, after, "wattprobe_gpu_energy_joules_total", **labels)


def idle_baseline(samples: Samples, gpu: int) -> dict[str, float]:
    found = select(samples, "wattprobe_idle_power_watts", zone="gpu", device=str(gpu))
    return {dict(k)["origin"]: v for k, v in found.items()}


def cgroup_tree(host: FixtureHost) -> None:
    """A cgroup v2 tree holding the GPU pods' containers: the /proc source then reads CPU time
    per cgroup (the default without --collector.process) and no process is a task, so the GPU
    processes reach their pods through /proc/<pid>/cgroup
    (exporter/sources/activity/procfs/pidowner.py)."""
    root = host.sysfs / "fs" / "cgroup"
    root.mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu io memory pids\n")
    for pod in H100_PODS:
        path = pod.cgroup.removeprefix("0::").strip().lstrip("/")
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            d = root.joinpath(*parts[:i])
            d.mkdir(exist_ok=True)
            (d / "cpu.stat").write_text("usage_usec 0\nuser_usec 0\nsystem_usec 0\n")


@pytest.fixture(params=["per process", "per cgroup"])
def serving(
    request: pytest.FixtureRequest, exporter: StartExporter, host: FixtureHost, gpus: FakeGpus
) -> Iterator[ExporterProcess]:
    if request.param == "per cgroup":
        cgroup_tree(host)
    yield exporter(*host.args(), "--interval", INTERVAL, env=gpus.env())


def test_busy_gpu_bills_its_holder_and_an_unheld_gpu_bills_nobody(
    serving: ExporterProcess, gpus: FakeGpus
) -> None:
    before, after = run_steadily(serving, gpus, INTERVALS)
    measured = gpu_energy(before, after, BUSY)
    assert measured > 640 * 0.4 * INTERVALS * 0.5  # it really drew for the whole window
    billed = pod_gpu(before, after, POD_C.pod_uid, BUSY)
    active = pod_gpu(before, after, POD_C.pod_uid, BUSY, "active")
    # all of it goes to the pod holding the GPU (idle too), at least 90 % as active
    assert billed == pytest.approx(measured, rel=1e-6)
    assert active >= 0.9 * measured
    # never seen idle: the prior, 5 % of the 700 W limit (not the low percentile of its load)
    assert idle_baseline(after, BUSY) == {"prior": pytest.approx(PRIOR_SHARE * 700.0)}

    # GPU 6 idles at 70.5 W and nobody holds it: all idle, on the node, learned from idleness
    assert gpu_energy(before, after, UNHELD) > 0
    assert gpu_energy(before, after, UNHELD, "active") == pytest.approx(0.0, abs=1e-6)
    assert not select(after, "wattprobe_container_energy_joules_total", gpu=str(UNHELD))
    # learned from its idle intervals; each interval's power carries the fake's timing jitter
    assert idle_baseline(after, UNHELD) == {"learned": pytest.approx(70.5, rel=0.1)}


def test_time_sliced_pods_split_idle_and_active_by_their_share(
    serving: ExporterProcess, gpus: FakeGpus
) -> None:
    before, after = run_steadily(serving, gpus, INTERVALS)
    a_active = pod_gpu(before, after, POD_A.pod_uid, SLICED, "active")
    b_active = pod_gpu(before, after, POD_B.pod_uid, SLICED, "active")
    a_idle = pod_gpu(before, after, POD_A.pod_uid, SLICED, "idle")
    b_idle = pod_gpu(before, after, POD_B.pod_uid, SLICED, "idle")
    assert a_active / b_active == pytest.approx(3.0, rel=0.01)  # SM 60:20
    assert a_idle > 0 and a_idle / b_idle == pytest.approx(3.0, rel=0.01)
    assert a_active + b_active + a_idle + b_idle == pytest.approx(
        gpu_energy(before, after, SLICED), rel=1e-6
    )


def test_with_podresources_the_allocation_decides_who_holds_a_gpu(
    exporter: StartExporter, host: FixtureHost, gpus: FakeGpus, tmp_path: Path
) -> None:
    """GPU 1 allocated to POD_C (busy on it), GPU 6 to POD_D (which runs nothing on it)."""
    host.remove_process(1001)  # the fixture's nginx has POD_A's container id
    add_nvidia_gpus(host)
    with kube_node(tmp_path) as node:
        node.kubelet.set_pods([gpu_pod(POD_C, "trainer"), gpu_pod(POD_D, "notebook")])
        node.podresources.lister.assigned = [
            Assigned("ml", "trainer", "trainer", "nvidia.com/gpu", [gpus.uuid(BUSY)]),
            Assigned("ml", "notebook", "trainer", "nvidia.com/gpu", [gpus.uuid(UNHELD)]),
        ]
        proc = exporter(*host.args(), "--interval", INTERVAL, *node.kubelet_args(), env=gpus.env())
        before, after = run_steadily(proc, gpus, INTERVALS)
    measured = gpu_energy(before, after, BUSY)
    assert pod_gpu(before, after, POD_C.pod_uid, BUSY) == pytest.approx(measured, rel=1e-6)
    assert pod_gpu(before, after, POD_C.pod_uid, BUSY, "active") >= 0.9 * measured
    # the idle allocated GPU is the notebook's waste, all of it
    waste = gpu_energy(before, after, UNHELD)
    assert waste > 0
    assert pod_gpu(before, after, POD_D.pod_uid, UNHELD, "idle") == pytest.approx(waste, rel=1e-6)
