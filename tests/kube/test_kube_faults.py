"""Faults of the Kubernetes sources, end to end: `wattprobe serve` never falls over, says what is
wrong on wattprobe_source_up, keeps the last known names for the TTL, and recovers by itself."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import StartExporter
from tests.support.fixturehost import FixtureHost
from tests.support.kubeenv import (
    GPU0,
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
from tests.support.running import ExporterProcess, Samples

FAST = ["--interval", "0.2s", "--kube.poll-interval", "0.3s", "--kube.timeout", "1s"]
NGINX = "a1" * 32


def nginx(samples: Samples) -> tuple[str, str, str] | None:
    rows = labels_of(samples, "wattprobe_container_cpu_seconds_total", container_id=NGINX)
    return (rows[0]["namespace"], rows[0]["pod"], rows[0]["container"]) if rows else None


def wait_up(exp: ExporterProcess, source: str, up: float, reason: str = "") -> Samples:
    return wait_samples(
        exp, lambda s: source_up(s, source) == (up, reason), f"{source} up={up} {reason!r}"
    )


def test_kubelet_faults_keep_names_and_recover(
    host: FixtureHost, exporter: StartExporter, tmp_path: Path
) -> None:
    with kube_node(tmp_path) as node, ticking(host):
        exp = exporter(*host.args(), *FAST, *node.kubelet_args())
        samples = wait_samples(
            exp, lambda s: nginx(s) == ("shop", "web-7d9c8b6f5-x2k4p", "nginx"), "names"
        )
        assert source_up(samples, "podresources") is None  # no GPUs on this node: not needed
        for mode, reason in [
            ("5xx", "server error"),
            ("garbage", "bad response"),
            ("slow", "timeout"),
            ("forbidden", "forbidden"),
            ("down", "unreachable"),
        ]:
            if mode == "down":
                node.kubelet.stop()
            else:
                node.kubelet.mode = mode
            samples = wait_up(exp, "kubelet", 0.0, reason)
            assert nginx(samples) == ("shop", "web-7d9c8b6f5-x2k4p", "nginx"), mode
            assert exp.get("/healthz")[0] == 200
            if mode == "down":
                node.kubelet.start()
            node.kubelet.mode = "ok"
            node.kubelet.closing.set()  # release a request still held by "slow"
            wait_up(exp, "kubelet", 1.0)
        assert exp.proc.poll() is None


def test_after_the_ttl_series_fall_back_to_ids(
    host: FixtureHost, exporter: StartExporter, tmp_path: Path
) -> None:
    with kube_node(tmp_path) as node, ticking(host):
        exp = exporter(*host.args(), *FAST, *node.kubelet_args(), "--kube.metadata-ttl", "1s")
        wait_samples(exp, lambda s: nginx(s) == ("shop", "web-7d9c8b6f5-x2k4p", "nginx"), "names")
        node.kubelet.stop()
        samples = wait_samples(exp, lambda s: nginx(s) == ("", "", ""), "names dropped")
        assert source_up(samples, "kubelet") == (0.0, "unreachable")
        node.kubelet.start()
        wait_samples(exp, lambda s: nginx(s) == ("shop", "web-7d9c8b6f5-x2k4p", "nginx"), "back")


def gpu_rows(samples: Samples) -> int:
    return len(labels_of(samples, "wattprobe_gpu_allocation_info", uuid=GPU0))


def test_podresources_socket_missing_then_restarted(
    host: FixtureHost, exporter: StartExporter, tmp_path: Path
) -> None:
    add_nvidia_gpus(host)
    with kube_node(tmp_path) as node, ticking(host):
        node.podresources.stop()  # not there when the exporter starts
        exp = exporter(*host.args(), *FAST, *node.kubelet_args())
        samples = wait_samples(
            exp,
            lambda s: (
                source_up(s, "podresources") == (0.0, "socket missing")
                and source_up(s, "kubelet") == (1.0, "")
            ),
            "podresources down, kubelet up",
        )
        assert gpu_rows(samples) == 0
        node.podresources.start()
        samples = wait_up(exp, "podresources", 1.0)
        wait_samples(exp, lambda s: gpu_rows(s) == 2, "allocations")
        node.podresources.stop()  # a kubelet restart: the socket is replaced
        samples = wait_samples(
            exp, lambda s: (source_up(s, "podresources") or (1.0, ""))[0] == 0.0, "down"
        )
        assert gpu_rows(samples) == 2  # last known allocations kept for the TTL
        node.podresources.start()
        wait_up(exp, "podresources", 1.0)


def test_apiserver_down_and_watch_expiry(host: FixtureHost, exporter: StartExporter) -> None:
    pods = as_apiserver_pods(fixture_pods())
    with apiserver_for(pods, metaserver=False) as api, ticking(host):
        exp = exporter(
            *host.args(),
            *FAST,
            *apiserver_args(api.url),
        )
        wait_samples(exp, lambda s: nginx(s) == ("shop", "web-7d9c8b6f5-x2k4p", "nginx"), "names")
        lists = api.lists
        api.expire_watches()  # 410 in the watch stream: a re-list, not an outage
        renamed = dict(pods[0])
        renamed["metadata"] = {**pods[0]["metadata"], "name": "web-after-410"}
        api.add(renamed)
        samples = wait_samples(
            exp, lambda s: nginx(s) == ("shop", "web-after-410", "nginx"), "relist"
        )
        assert api.lists > lists
        assert source_up(samples, "apiserver") == (1.0, "")
        api.stop()
        samples = wait_up(exp, "apiserver", 0.0, "unreachable")
        assert nginx(samples) == ("shop", "web-after-410", "nginx")
        api.start()
        wait_up(exp, "apiserver", 1.0)
