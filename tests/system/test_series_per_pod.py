"""What a pod costs in series (issue 22: <= 10 by default), counted on what `wattprobe serve`
serves with its default flags on a synthetic node of N pods (3 app containers and the pause
sandbox each, RAPL package and dram, 8 fake H100s with GPU pods), and the billing sum that must
still hold on the served series: pods + the pseudo-containers = the node's active energy per
zone kind, and the pods' GPU energy = each GPU's active energy."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.benchmarks.servers import Advancer
from tests.benchmarks.synthetic import HostShape, SyntheticHost
from tests.sources.gpu.nvml.build import EVENT_POLL_ENV, SCENARIO_ENV, build_fake_nvml
from tests.support.invariants import check_exposition
from tests.support.realparts import require_binary
from tests.support.running import ExporterProcess, Samples, parse_samples, start_exporter

PODS = 24
SHAPE = HostShape(processes=900, pods=PODS, containers=3, gpus=8)
BUDGET = 10  # series per pod by default (docs/metrics.md, "Series per pod")


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SyntheticHost, Path]]:
    root = tmp_path_factory.mktemp("series-per-pod")
    nvml = build_fake_nvml(root / "fake-nvml", require_binary("gcc"))
    host = SyntheticHost.create(root / "node", SHAPE)
    with Advancer(host, 0.5):  # counters move and 1 % of the processes churn
        yield host, nvml


@contextmanager
def serve(
    node: tuple[SyntheticHost, Path], tmp_path: Path, *flags: str
) -> Iterator[ExporterProcess]:
    """`wattprobe serve` with its defaults (not the tests' TEST_ARGS) plus flags."""
    host, nvml = node
    env = {
        "LD_LIBRARY_PATH": str(nvml),
        SCENARIO_ENV: str(host.scenario_path),
        EVENT_POLL_ENV: "3600000",
    }
    args = [*host.args(), "--activity-source", "procfs", "--kube.pod-source", "none"]
    proc = start_exporter(
        [*args, "--interval", "1s", *flags], tmp_path, env=env, wait="/readyz", test_args=()
    )
    try:
        yield proc
    finally:
        proc.stop()


def scrape(node: tuple[SyntheticHost, Path], tmp_path: Path, *flags: str) -> Samples:
    """One exposition after two full intervals."""
    with serve(node, tmp_path, *flags) as proc:
        proc.wait_next_interval(timeout=60)
        return parse_samples(proc.wait_next_interval(timeout=60))


def per_pod(samples: Samples) -> dict[str, dict[str, int]]:
    """Series per pod, by metric: those with its pod_uid, and those without a pod_uid label
    that name it by namespace and pod (pod_info's kin, GPU allocations)."""
    uids = {
        (lbl["namespace"], lbl["pod"]): lbl["pod_uid"]
        for lbl in (dict(labels) for _n, labels in samples)
        if lbl.get("pod_uid") and lbl.get("pod")
    }
    out: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for name, labels in samples:
        lbl = dict(labels)
        if "pod_uid" in lbl:
            uid = lbl["pod_uid"]
        else:
            uid = uids.get((lbl.get("namespace", ""), lbl.get("pod", "")), "")
        if uid:
            out[uid][name] += 1
    return out


def select_by_uid(samples: Samples, metric: str) -> dict[str, float]:
    return {
        dict(labels)["pod_uid"]: value
        for (name, labels), value in samples.items()
        if name == metric
    }


def test_a_pod_gets_at_most_ten_series_by_default(
    node: tuple[SyntheticHost, Path], tmp_path: Path
) -> None:
    samples = scrape(node, tmp_path)
    pods = per_pod(samples)
    assert len(pods) == PODS
    counts = {uid: sum(by.values()) for uid, by in pods.items()}
    assert max(counts.values()) <= BUDGET, {u: dict(pods[u]) for u in pods if counts[u] > BUDGET}
    names = {n for by in pods.values() for n in by}
    assert names == {"wattprobe_pod_energy_joules_total", "wattprobe_pod_cpu_seconds_total"}
    # a CPU pod: package and dram energy and its CPU time; a GPU pod: and its GPU, active and
    # idle (the docs' count)
    assert min(counts.values()) == 3, {u: dict(pods[u]) for u in pods if counts[u] < 3}
    assert set(counts.values()) == {3, 5}, counts  # GPU pods hold one GPU (or a time-slice)


def test_pods_and_pseudo_containers_add_up_to_the_node_without_container_series(
    node: tuple[SyntheticHost, Path], tmp_path: Path
) -> None:
    samples = scrape(node, tmp_path)
    node_active: dict[str, float] = defaultdict(float)
    billed: dict[tuple[str, str], float] = defaultdict(float)  # (zone, gpu) active
    gpu_active: dict[str, float] = {}
    pseudo: set[str] = set()
    for (name, labels), value in samples.items():
        lbl = dict(labels)
        if name == "wattprobe_node_energy_joules_total" and lbl["mode"] == "active":
            node_active[lbl["zone"]] += value
        elif name == "wattprobe_gpu_energy_joules_total" and lbl["mode"] == "active":
            gpu_active[lbl["gpu"]] = value
        elif name == "wattprobe_pod_energy_joules_total" and lbl["mode"] == "active":
            billed[(lbl["zone"], lbl.get("gpu", ""))] += value
        elif name == "wattprobe_container_energy_joules_total":
            assert not lbl["pod_uid"], f"a pod's container series by default: {lbl}"
            pseudo.add(lbl["container"])
            if lbl["mode"] == "active":
                billed[(lbl["zone"], lbl.get("gpu", ""))] += value
    assert pseudo == {"system_processes", "kernel_processes"}
    zones = {z for z, gpu in billed if not gpu}
    assert zones == {"package", "dram"}
    for zone in zones:
        assert math.isclose(billed[(zone, "")], node_active[zone], rel_tol=1e-9), zone
    held = {gpu for z, gpu in billed if gpu}
    assert held, "GPU pods billed"
    for gpu in held:
        assert math.isclose(billed[("gpu", gpu)], gpu_active[gpu], rel_tol=1e-6), gpu


def test_the_container_flag_brings_back_the_container_series(
    node: tuple[SyntheticHost, Path], tmp_path: Path
) -> None:
    samples = scrape(node, tmp_path, "--collector.container")
    pods = per_pod(samples)
    containers: dict[str, int] = defaultdict(int)
    for (name, labels), value in samples.items():
        lbl = dict(labels)
        if name != "wattprobe_container_cpu_seconds_total" or not lbl["pod_uid"]:
            continue
        if lbl["container_id"]:
            containers[lbl["pod_uid"]] += 1
        else:
            assert value > 0, f"a pod's own cgroup that ran nothing has a series: {lbl}"
    assert containers.keys() == pods.keys()
    # every container of the pod (the sandbox included) has its CPU time (and the pod's own
    # cgroup a series, container_id "", only once it ran something outside its containers)
    assert set(containers.values()) == {SHAPE.containers + 1}, containers
    # a pod's CPU time is its containers' (none of them ended in two intervals)
    pod_cpu: dict[str, float] = defaultdict(float)
    for (name, labels), value in samples.items():
        lbl = dict(labels)
        if name == "wattprobe_container_cpu_seconds_total" and lbl["pod_uid"]:
            pod_cpu[lbl["pod_uid"]] += value
    served = select_by_uid(samples, "wattprobe_pod_cpu_seconds_total")
    assert served.keys() == pod_cpu.keys()
    assert any(v > 0 for v in served.values()), "the synthetic pods' processes run"
    for uid, seconds in served.items():
        assert math.isclose(seconds, pod_cpu[uid], rel_tol=1e-9, abs_tol=1e-9), uid
    check_exposition(samples)  # pods == their containers, containers == the node
