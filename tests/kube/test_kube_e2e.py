"""`wattprobe serve` on the fixture host with a loopback kubelet / apiserver / PodResources:
the right names on /metrics, pod info, GPU allocations."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import StartExporter
from tests.support.fixturehost import FixtureHost
from tests.support.kubeenv import (
    GPU0,
    MIG,
    add_nvidia_gpus,
    apiserver_args,
    apiserver_for,
    as_apiserver_pods,
    fixture_pods,
    kube_node,
    labels_of,
    source_up,
    ticking,
    wait_samples,
)
from tests.support.running import Samples

pytestmark = pytest.mark.container_series  # its exporters serve them

FAST = ["--interval", "0.2s", "--kube.poll-interval", "0.5s"]

# container id -> (namespace, pod, container) as the fixture /proc tree and pod payload say
EXPECTED = {
    "a1" * 32: ("shop", "web-7d9c8b6f5-x2k4p", "nginx"),  # containerd, systemd driver
    "a2" * 32: ("shop", "web-7d9c8b6f5-x2k4p", "envoy"),
    "a" * 64: ("shop", "web-7d9c8b6f5-x2k4p", ""),  # the sandbox: not in containerStatuses
    "b1" * 32: ("ml", "trainer-0", "trainer"),
    "c1" * 32: ("batch", "indexer-28391-kq7zt", "indexer"),  # cri-o (conmon and the app)
    "d1" * 32: ("cache", "redis-0", "redis"),  # docker
    "e1" * 32: ("kube-system", "kube-apiserver-node-1", "kube-apiserver"),  # static pod
    "f1" * 32: ("frontend", "ui-5f7b9c6d4-qwert", "ui"),  # cgroup v1, cgroupfs driver
    "f2" * 32: ("db", "postgres-0", "postgres"),  # cri-o, cgroupfs driver
    "f3" * 32: ("default", "sleeper", "wait-for-db"),  # an init container
}
POD_UIDS = {
    "5f1c3e2a-8b4d-4c6e-9f0a-1b2c3d4e5f60": ("shop", "web-7d9c8b6f5-x2k4p"),
    "0f1e2d3c4b5a69788796a5b4c3d2e1f0": ("kube-system", "kube-apiserver-node-1"),
    "4d5e6f7a-8b9c-4d0e-8f1a-2b3c4d5e6f7a": ("default", "sleeper"),
}


def all_named(samples: Samples) -> bool:
    rows = labels_of(samples, "wattprobe_container_cpu_seconds_total")
    named = {r["container_id"]: (r["namespace"], r["pod"], r["container"]) for r in rows}
    with_energy = {
        r["container_id"] for r in labels_of(samples, "wattprobe_container_energy_joules_total")
    }
    return all(named.get(cid) == want and cid in with_energy for cid, want in EXPECTED.items())


def check_names(samples: Samples) -> None:
    for cid, (namespace, pod, container) in EXPECTED.items():
        rows = labels_of(samples, "wattprobe_container_cpu_seconds_total", container_id=cid)
        assert [(r["namespace"], r["pod"], r["container"]) for r in rows] == [
            (namespace, pod, container)
        ], cid
        energy = labels_of(samples, "wattprobe_container_energy_joules_total", container_id=cid)
        assert energy, f"no energy series for {cid}"
        assert all((r["namespace"], r["pod"]) == (namespace, pod) for r in energy)
    for uid, (namespace, pod) in POD_UIDS.items():
        rows = labels_of(samples, "wattprobe_pod_energy_joules_total", pod_uid=uid)
        assert rows, uid
        assert all((r["namespace"], r["pod"]) == (namespace, pod) for r in rows)
    system = labels_of(samples, "wattprobe_container_cpu_seconds_total", container_id="")
    assert {r["container"] for r in system} == {"system_processes", "kernel_processes"}
    assert all(r["pod"] == "" and r["namespace"] == "" for r in system)


def test_kubelet_names_pod_info_and_gpu_allocations(
    host: FixtureHost, exporter: StartExporter, tmp_path: Path
) -> None:
    add_nvidia_gpus(host)
    with kube_node(tmp_path) as node, ticking(host):
        exp = exporter(*host.args(), *FAST, *node.kubelet_args(), "--kube.pod-labels", "team,app")
        samples = wait_samples(exp, all_named, "every container named")
        check_names(samples)
        assert source_up(samples, "kubelet") == (1.0, "")
        assert source_up(samples, "podresources") == (1.0, "")

        info = {r["pod"]: r for r in labels_of(samples, "wattprobe_pod_info", namespace="shop")}
        assert info["web-7d9c8b6f5-x2k4p"] == {
            "namespace": "shop",
            "pod": "web-7d9c8b6f5-x2k4p",
            "pod_uid": "5f1c3e2a-8b4d-4c6e-9f0a-1b2c3d4e5f60",
            "label_team": "payments",
            "label_app": "web",
        }
        redis = labels_of(samples, "wattprobe_pod_info", pod="redis-0")
        assert redis == [
            {
                "namespace": "cache",
                "pod": "redis-0",
                "pod_uid": "9e8d7c6b-5a49-4837-8261-504f3e2d1c0b",
                "label_app": "redis",
            }
        ]
        assert len(labels_of(samples, "wattprobe_pod_info")) == 8  # once per pod
        # labels are never copied onto energy series
        assert not any(
            k.startswith("label_")
            for r in labels_of(samples, "wattprobe_container_energy_joules_total")
            for k in r
        )

        alloc = labels_of(samples, "wattprobe_gpu_allocation_info")
        shared = sorted((r["pod"], r["container"]) for r in alloc if r.get("uuid") == GPU0)
        assert shared == [("infer-a", "server"), ("trainer-0", "trainer")]  # a time-sliced GPU
        mig = [r for r in alloc if r.get("mig_device") == MIG]
        assert mig == [  # no NVML on this host: the MIG device's parent GPU is not known
            {
                "mig_device": MIG,
                "namespace": "ml",
                "pod": "notebook",
                "container": "jupyter",
                "resource": "nvidia.com/mig-1g.10gb",  # what a price per resource applies to
            }
        ]
        assert len(alloc) == 3  # the NIC is not a GPU
        assert all(v == 1 for (n, _l), v in samples.items() if n.endswith("_info"))


@pytest.mark.parametrize("metaserver", [False, True], ids=["apiserver", "kubeedge-metaserver"])
def test_apiserver_mode_names(host: FixtureHost, exporter: StartExporter, metaserver: bool) -> None:
    pods = as_apiserver_pods(fixture_pods())
    with apiserver_for(pods, metaserver=metaserver) as api, ticking(host):
        exp = exporter(
            *host.args(),
            *FAST,
            *apiserver_args(api.url, podresources_socket=""),
        )
        samples = wait_samples(exp, all_named, "every container named")
        check_names(samples)  # the static pod too, through its mirror's annotation
        assert source_up(samples, "apiserver") == (1.0, "")
        assert source_up(samples, "podresources") is None  # turned off
        assert api.lists == 1
        if metaserver:
            assert all("fieldSelector" not in q for q in api.queries)

        # a pod that shows up later is named through the watch, without a re-list
        new_pod = dict(pods[0])
        new_pod["metadata"] = {**pods[0]["metadata"], "name": "web-renamed"}
        api.add(new_pod)
        wait_samples(
            exp,
            lambda s: bool(
                labels_of(s, "wattprobe_container_cpu_seconds_total", pod="web-renamed")
            ),
            "a watched rename",
        )
        assert api.lists == 1


def test_outside_a_cluster_series_carry_ids(host: FixtureHost, exporter: StartExporter) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "", "NODE_NAME": ""}
    with ticking(host):
        exp = exporter(
            *host.args(),
            *FAST,
            "--kube.podresources-socket",
            "/nonexistent/kubelet.sock",
            env=env,
        )
        samples = wait_samples(
            exp,
            lambda s: bool(
                labels_of(s, "wattprobe_container_cpu_seconds_total", container_id="a1" * 32)
            ),
            "container series",
        )
    row = labels_of(samples, "wattprobe_container_cpu_seconds_total", container_id="a1" * 32)
    assert [(r["namespace"], r["pod"], r["container"]) for r in row] == [("", "", "")]
    assert row[0]["pod_uid"] == "5f1c3e2a-8b4d-4c6e-9f0a-1b2c3d4e5f60"  # IDs are always there
    assert source_up(samples, "kubelet") is None
    assert source_up(samples, "podresources") is None  # auto: no cluster, no socket
