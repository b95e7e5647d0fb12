"""How the Config and the environment pick the Kubernetes sources; the monitor and collector
hooks they plug into; the --kube.* flags and `wattprobe check` entries."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.exposition.collector import SnapshotCollector, pod_label_name
from exporter.kube.apiserver import ApiserverPodSource
from exporter.kube.kube import KubeWorkloads
from exporter.kube.kubelet import KubeletPodSource
from exporter.kube.podresources.poller import PodResourcesPoller
from exporter.kube.podsources import apiserver_url, kubelet_url, resolve_pod_source
from exporter.model.config import Config, PodSource
from exporter.model.identity import NoNames
from exporter.model.readings import SourceStatus
from exporter.model.snapshot import GpuAllocation, PodInfo
from exporter.sources.activity.procfs.source import ProcfsSource
from tests.support.fixturehost import FixtureHost
from tests.support.identity import StaticIdentity
from tests.support.kubeenv import add_nvidia_gpus
from tests.support.monitor import monitor_settings
from tests.support.running import REPO, parse_samples

IN_CLUSTER = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}


def test_auto_picks_the_kubelet_inside_a_cluster_only() -> None:
    assert resolve_pod_source(PodSource.AUTO, IN_CLUSTER) == PodSource.KUBELET
    assert resolve_pod_source(PodSource.AUTO, {}) == PodSource.NONE
    assert resolve_pod_source(PodSource.APISERVER, {}) == PodSource.APISERVER
    assert resolve_pod_source(PodSource.NONE, IN_CLUSTER) == PodSource.NONE


def test_endpoint_defaults() -> None:
    assert kubelet_url(Config(node_name=""), {"NODE_IP": "10.0.0.11"}) == "https://10.0.0.11:10250"
    assert kubelet_url(Config(node_name=""), {"NODE_IP": "fd00::11"}) == "https://[fd00::11]:10250"
    # the DaemonSet's HOST_IP (status.hostIP) before the node name, which pods rarely resolve
    assert (
        kubelet_url(Config(node_name="n1"), {"HOST_IP": "10.0.0.12"}) == "https://10.0.0.12:10250"
    )
    assert kubelet_url(Config(node_name="node-1"), {}) == "https://node-1:10250"
    assert kubelet_url(Config(node_name=""), {}) == "https://127.0.0.1:10250"
    given = Config(kubelet_url="https://kubelet.example:10250")
    assert kubelet_url(given, {"NODE_IP": "10.0.0.11"}) == "https://kubelet.example:10250"
    assert apiserver_url(Config(), IN_CLUSTER) == "https://10.96.0.1:443"
    assert (
        apiserver_url(Config(), {"KUBERNETES_SERVICE_HOST": "fd00::1"}) == "https://[fd00::1]:443"
    )
    assert apiserver_url(Config(), {}) == ""
    metaserver = Config(apiserver_url="http://127.0.0.1:10550")
    assert apiserver_url(metaserver, {}) == "http://127.0.0.1:10550"


def test_what_runs_where(host: FixtureHost, tmp_path: Path) -> None:
    sock = tmp_path / "kubelet.sock"  # does not exist
    base = Config(procfs=host.procfs, sysfs=host.sysfs, podresources_socket=sock)

    outside = KubeWorkloads.from_config(base, {})
    assert isinstance(outside.names, NoNames)
    assert (outside.pod_source, outside.podresources, outside.statuses()) == (None, None, [])

    inside = KubeWorkloads.from_config(base, IN_CLUSTER)
    assert isinstance(inside.pod_source, KubeletPodSource)
    assert inside.podresources is None  # no GPUs on this node

    add_nvidia_gpus(host)
    gpu_node = KubeWorkloads.from_config(base, IN_CLUSTER)
    assert isinstance(gpu_node.podresources, PodResourcesPoller)  # reports "socket missing"
    off = Config(procfs=host.procfs, sysfs=host.sysfs, podresources_socket=None)
    assert KubeWorkloads.from_config(off, IN_CLUSTER).podresources is None

    api = Config(procfs=host.procfs, pod_source=PodSource.APISERVER, node_name="node-1")
    assert isinstance(KubeWorkloads.from_config(api, IN_CLUSTER).pod_source, ApiserverPodSource)
    lost = KubeWorkloads.from_config(api, {})  # apiserver mode outside a cluster, no URL given
    assert [(s.source, s.up, s.reason) for s in lost.statuses()] == [("apiserver", False, "no url")]


def test_monitor_hooks_reach_the_snapshot_and_the_exposition(host: FixtureHost) -> None:
    def broken() -> list[SourceStatus]:
        raise RuntimeError("a bug in a background source")

    procfs = ProcfsSource(host.procfs)
    failing = Monitor(
        MonitorParts(
            cpu=procfs, activity=procfs, identity=StaticIdentity(status_providers=[broken])
        ),
        monitor_settings(),
    )
    # a broken identity accessor costs its statuses, not the interval
    assert [s.source for s in failing.step().sources] == ["procfs"]
    monitor = Monitor(
        MonitorParts(
            cpu=procfs,
            activity=procfs,
            identity=StaticIdentity(
                status_providers=[
                    lambda: [SourceStatus("kubelet", False, "unreachable", "refused")],
                ],
                pods=lambda: [
                    PodInfo("u1", "web-0", "shop", (("team", "payments"), ("a.b/c", "x")))
                ],
                allocations=lambda: [
                    GpuAllocation("0", "GPU-1", "", "", "ml", "trainer-0", "trainer")
                ],
            ),
        ),
        monitor_settings(),
    )
    snap = monitor.step()
    assert ("kubelet", False, "unreachable") in [(s.source, s.up, s.reason) for s in snap.sources]
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snap))
    samples = parse_samples(generate_latest(registry).decode())
    assert (
        samples[
            (
                "wattprobe_pod_info",
                frozenset(
                    {
                        ("namespace", "shop"),
                        ("pod", "web-0"),
                        ("pod_uid", "u1"),
                        ("label_team", "payments"),
                        ("label_a_b_c", "x"),
                    }
                ),
            )
        ]
        == 1
    )
    alloc = {
        ("gpu", "0"),
        ("uuid", "GPU-1"),
        ("namespace", "ml"),
        ("pod", "trainer-0"),
        ("container", "trainer"),
    }
    assert samples[("wattprobe_gpu_allocation_info", frozenset(alloc))] == 1
    assert (
        samples[
            ("wattprobe_source_up", frozenset({("source", "kubelet"), ("reason", "unreachable")}))
        ]
        == 0
    )


def test_label_names_like_kube_state_metrics() -> None:
    assert pod_label_name("app.kubernetes.io/name") == "label_app_kubernetes_io_name"
    assert pod_label_name("team") == "label_team"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args],
        check=False,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "WATTPROBE_KUBE_POD_SOURCE": "kubelet"},
    )


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--kube.poll-interval", "soon"),
        ("--kube.metadata-ttl", "-1s"),
        ("--kube.pod-labels", "team,app*"),
        ("--kube.pod-source", "etcd"),
        ("--kube.gpu-resources", "gpu"),  # no vendor domain: not a resource name
        ("--kube.gpu-resources", " , "),
    ],
)
def test_bad_flags_give_one_line(flag: str, value: str) -> None:
    result = run_cli("serve", flag, value)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("wattprobe: error:"), result.stderr
    assert flag in lines[0]


def test_check_reports_the_pod_source_with_a_fix(host: FixtureHost) -> None:
    result = run_cli(
        "check",
        "--json",
        *host.args(),
        "--kube.kubelet-url",
        "https://127.0.0.1:9",  # discard port: nothing listens
        "--kube.timeout",
        "2s",
    )
    report = json.loads(result.stdout)
    kubelet = next(s for s in report["sources"] if s["source"] == "kubelet")
    assert kubelet["ok"] is False
    assert kubelet["reason"] == "unreachable" and kubelet["detail"]  # docs/check.md
    assert "--kube.kubelet-url" in kubelet["fix"]
    assert result.returncode == 0  # names are not needed to measure: the exit status ignores them


def test_metaserver_detection() -> None:
    from exporter.kube.apiserver import is_metaserver  # noqa: PLC0415
    from exporter.kube.kubeapi import Endpoint, KubeClient  # noqa: PLC0415

    def client(url: str) -> KubeClient:
        return KubeClient(Endpoint(url=url))

    assert is_metaserver(client("http://127.0.0.1:10550"))
    assert is_metaserver(client("https://127.0.0.1:10550"))  # requireAuthorization: https
    assert not is_metaserver(client("https://10.96.0.1:443"))
    assert not is_metaserver(client("https://127.0.0.1:6443"))  # a control plane's apiserver
