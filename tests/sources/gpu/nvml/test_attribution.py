"""The GPU split rules (SM -> memory -> ioctl -> even), PodResources holders, container idle."""

from __future__ import annotations

import math

import pytest

from exporter.accounting.attribution import IDLE, ZoneEnergy, attribute
from exporter.accounting.gpu_attribution import (
    EVEN,
    IOCTL,
    MEMORY,
    MIG_MEMORY,
    NONE,
    SM,
    holder_weights,
    ioctls_by_pid,
    match_holders,
    process_weights,
)
from exporter.host.cgroupfs.classify import classify_cgroup
from exporter.model.identity import ContainerRef
from tests.sources.gpu.nvml.pods import POD_A, POD_B, POD_C
from tests.sources.gpu.nvml.scripted import GiB, gpu_reading, mig_instance

REF_A = classify_cgroup(POD_A.cgroup)
REF_B = classify_cgroup(POD_B.cgroup)
REF_C = classify_cgroup(POD_C.cgroup)


def test_sm_share_comes_first() -> None:
    gpu = gpu_reading(0, 1, processes=[(1, 10 * GiB), (2, 10 * GiB)], sm=[(1, 60), (2, 20)])
    split = process_weights(gpu, {1: 5, 2: 500})
    assert split.method == SM
    assert dict(split.weights) == {1: 60, 2: 20}


def test_memory_share_without_sm_samples() -> None:
    for sm in (None, [], [(1, 0), (2, 0)]):
        gpu = gpu_reading(0, 1, processes=[(1, 30 * GiB), (2, 10 * GiB)], sm=sm)
        split = process_weights(gpu, {})
        assert split.method == MEMORY
        assert dict(split.weights) == {1: 30 * GiB, 2: 10 * GiB}


def test_ioctl_share_among_the_gpus_processes_without_memory() -> None:
    gpu = gpu_reading(0, 1, processes=[(1, None), (2, None)], sm=None)
    split = process_weights(gpu, {1: 30, 2: 10, 99: 1000})  # 99 uses another GPU
    assert split.method == IOCTL
    assert dict(split.weights) == {1: 30, 2: 10}


def test_ioctl_share_among_everyone_when_nvml_lists_no_process() -> None:
    split = process_weights(gpu_reading(0, 1, sm=None), {7: 3, 8: 1})
    assert split.method == IOCTL
    assert dict(split.weights) == {7: 3, 8: 1}


def test_even_split_then_none() -> None:
    even = process_weights(gpu_reading(0, 1, processes=[(1, None), (2, None)], sm=None), {})
    assert (even.method, dict(even.weights)) == (EVEN, {1: 1.0, 2: 1.0})
    none = process_weights(gpu_reading(0, 1, sm=None), {})
    assert (none.method, dict(none.weights)) == (NONE, {})


def test_mig_splits_by_the_processes_memory() -> None:
    mig = [
        mig_instance("MIG-a", 1, 20 * GiB, [(1, 12 * GiB)]),
        mig_instance("MIG-b", 5, 10 * GiB, [(2, 6 * GiB), (3, 2 * GiB)]),
    ]
    split = process_weights(gpu_reading(0, 1, mig=mig), {1: 1000})
    assert split.method == MIG_MEMORY
    assert dict(split.weights) == {1: 12 * GiB, 2: 6 * GiB, 3: 2 * GiB}


def test_mig_without_per_process_memory_uses_each_instances_memory() -> None:
    mig = [
        mig_instance("MIG-a", 1, 20 * GiB, [(1, None)], used=12 * GiB),
        mig_instance("MIG-b", 5, 10 * GiB, [(2, None), (3, None)], used=6 * GiB),
    ]
    split = process_weights(gpu_reading(0, 1, mig=mig), {})
    assert split.method == MIG_MEMORY
    assert dict(split.weights) == {1: 12 * GiB, 2: 3 * GiB, 3: 3 * GiB}


def test_ioctls_by_pid_counts_only_nvidia() -> None:
    deltas = {(5, 1): {"nvidia": 4, "drm": 9}, (6, 1): {"drm": 3}, (0, 77): {"nvidia": 5}}
    assert ioctls_by_pid(deltas) == {5: 4.0}


def test_holders_match_live_containers_by_id() -> None:
    # PodResources-derived refs may lack runtime and QoS: they still match by container id
    holder = ContainerRef(container_id=POD_A.container_id, pod_uid=POD_A.pod_uid)
    assert holder != REF_A
    assert match_holders([holder], [REF_A, REF_B]) == {REF_A: 1.0}
    # a pod-level holder stands for all its live containers
    other = ContainerRef(container_id="f" * 64, pod_uid=POD_A.pod_uid, runtime="containerd")
    weights = match_holders([ContainerRef(pod_uid=POD_A.pod_uid)], [REF_A, other, REF_C])
    assert weights == {REF_A: 0.5, other: 0.5}
    # holders with nothing live are dropped
    assert match_holders([ContainerRef(container_id="0" * 64)], [REF_A]) == {}


def test_holder_weights_whole_gpu_and_mig() -> None:
    whole = gpu_reading(0, 1)
    holders = {"GPU-0": [REF_A, REF_B]}
    weights, fraction = holder_weights(whole, lambda u: holders.get(u, []), [REF_A, REF_B])
    assert (weights, fraction) == ({REF_A: 1.0, REF_B: 1.0}, 1.0)
    mig = gpu_reading(
        0,
        1,
        mig=[
            mig_instance("MIG-a", 1, 30 * GiB, [(1, GiB)]),
            mig_instance("MIG-b", 5, 10 * GiB, [(2, GiB)]),
            mig_instance("MIG-c", 13, 10 * GiB, []),
        ],
    )
    by_mig = {"MIG-a": [REF_A], "MIG-b": [REF_B, REF_C]}
    weights, fraction = holder_weights(mig, lambda u: by_mig.get(u, []), [REF_A, REF_B, REF_C])
    assert weights == {REF_A: 30 * GiB, REF_B: 5 * GiB, REF_C: 5 * GiB}
    assert fraction == pytest.approx(40 / 50)  # MIG-c is held by nobody: its idle stays
    assert holder_weights(whole, lambda u: [], [REF_A]) == ({}, 0.0)


def test_attribute_splits_idle_by_container_and_then_among_its_tasks() -> None:
    owner = {(1, 1): REF_A, (2, 1): REF_A, (3, 1): REF_B}
    zone = ZoneEnergy(
        "gpu",
        "0",
        active_j=10.0,
        idle_j=9.0,
        weights={(3, 1): 1.0},
        idle_weights={(3, 1): 1.0},  # ignored: idle_containers wins
        idle_containers={REF_A: 2.0, REF_B: 1.0},
    )
    split = attribute([zone], owner, with_tasks=True)
    key = ("gpu", "0", IDLE)
    assert split.containers[REF_A][key] == pytest.approx(6.0)
    assert split.containers[REF_B][key] == pytest.approx(3.0)
    assert split.tasks[(1, 1)][key] == pytest.approx(3.0)
    assert split.tasks[(2, 1)][key] == pytest.approx(3.0)
    assert math.fsum(c.get(key, 0.0) for c in split.containers.values()) == 9.0
