"""Resident memory of `wattprobe serve` per Kubernetes mode, on the fixture host with the loopback
kubelet / apiserver / PodResources. Run: .venv/bin/python -m tests.support.kube_rss

Each mode: start the exporter, let it run 30 intervals of 0.2 s while /metrics is scraped, then
read VmRSS and VmHWM from /proc/<pid>/status. Prints a Markdown table (docs/kubernetes.md)."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.fixturehost import FixtureHost
from tests.support.kubeenv import (
    add_nvidia_gpus,
    apiserver_for,
    as_apiserver_pods,
    fixture_pods,
    kube_node,
    ticking,
)
from tests.support.paths import FIXTURES
from tests.support.running import start_exporter

INTERVALS = 30


def status_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


@contextlib.contextmanager
def mode_args(name: str, host: FixtureHost, tmp: Path) -> Iterator[list[str]]:
    if name == "none":
        yield ["--kube.pod-source", "none"]
    elif name.startswith("kubelet"):
        if name == "kubelet+podresources":
            add_nvidia_gpus(host)
        with kube_node(tmp) as node:
            yield node.kubelet_args()
    else:
        with apiserver_for(as_apiserver_pods(fixture_pods()), metaserver=False) as api:
            yield [
                "--kube.pod-source",
                "apiserver",
                "--kube.apiserver-url",
                api.url,
                "--kube.node-name",
                "node-1",
            ]


def measure(name: str) -> dict[str, int]:
    tmp = Path(tempfile.mkdtemp(prefix="wp-rss-"))
    host = FixtureHost.copy_of(FIXTURES, tmp / "host")
    with mode_args(name, host, tmp) as args, ticking(host):
        # procfs activity: the budget in question is the one without eBPF
        run = [*host.args(), "--interval", "0.2s", "--activity-source", "procfs", *args]
        exp = start_exporter(run, log_dir=tmp)
        try:
            for _ in range(INTERVALS):
                exp.wait_next_interval()
            return status_kib(exp.proc.pid)
        finally:
            exp.stop()


def main() -> None:
    print("| mode | VmRSS MiB | VmHWM MiB |")
    print("|---|---|---|")
    for name in ("none", "kubelet", "kubelet+podresources", "apiserver"):
        kib = measure(name)
        print(f"| {name} | {kib['VmRSS'] / 1024:.1f} | {kib['VmHWM'] / 1024:.1f} |")
        time.sleep(0.5)


if __name__ == "__main__":
    main()
