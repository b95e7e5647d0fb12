"""Pod churn: 10,000 pods created and deleted through the pod source while /metrics is scraped.
Deleted pods' series go after the retention window (the series count returns to its baseline)
and the exporter's memory stays bounded (RSS growth under 10% once warmed up)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import StartExporter
from tests.support.fixturehost import FixtureHost
from tests.support.kubeenv import (
    add_nvidia_gpus,
    apiserver_args,
    apiserver_for,
    fixture_pods,
    kube_node,
    labels_of,
    ticking,
    wait_samples,
)
from tests.support.kubefakes import Ctr, pod_object
from tests.support.running import ExporterProcess, Samples

TOTAL = 10_000
BATCH = 250
WARM_AFTER = 1_000  # pods churned before the reference RSS is taken
RETENTION = ["--workload.retention", "2s"]
FAST = ["--interval", "0.25s", "--kube.poll-interval", "0.5s"]
WORKLOAD_PREFIXES = ("wattprobe_container_", "wattprobe_pod_", "wattprobe_process_")


def uid(n: int) -> str:
    return f"{n:08x}-0000-4000-8000-{n:012x}"


def cid(n: int) -> str:
    return f"c0{n:062x}"


def churn_pod(n: int) -> dict[str, Any]:
    return pod_object(
        name=f"churn-{n}",
        namespace="churn",
        uid=uid(n),
        qos="BestEffort",
        containers=[Ctr("work", f"containerd://{cid(n)}")],
        labels={"app": "churn"},
    )


def cgroup(n: int) -> str:
    pod = uid(n).replace("-", "_")
    return (
        "0::/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{pod}.slice/cri-containerd-{cid(n)}.scope\n"
    )


def workload_series(samples: Samples) -> int:
    return sum(1 for name, _ in samples if name.startswith(WORKLOAD_PREFIXES))


def _owner(key: tuple[str, frozenset[tuple[str, str]]]) -> tuple[str, str, str]:
    labels = dict(key[1])
    return labels.get("container_id", ""), labels.get("pod_uid", ""), labels.get("container", "")


def churn_series(samples: Samples) -> list[tuple[str, frozenset[tuple[str, str]]]]:
    return [
        k
        for k in samples
        if k[0].startswith(WORKLOAD_PREFIXES) and dict(k[1]).get("namespace") == "churn"
    ]


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def named(pod: str) -> Callable[[Samples], bool]:
    def check(samples: Samples) -> bool:
        rows = labels_of(samples, "wattprobe_container_cpu_seconds_total", pod=pod)
        return any(r["container"] == "work" for r in rows)

    return check


def settled_series(exp: ExporterProcess) -> int:
    """The workload series count once it stopped changing (the fixture's own containers)."""
    counts: list[int] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        counts.append(workload_series(exp.samples()))
        if len(counts) >= 5 and len(set(counts[-5:])) == 1:
            return counts[-1]
        time.sleep(0.3)
    raise AssertionError(f"series count never settled: {counts}")


def churn(
    host: FixtureHost,
    exp: ExporterProcess,
    create: Callable[[range], None],
    delete: Callable[[range], None],
) -> dict[str, float]:
    """Run the churn; the figures it measured."""
    baseline = settled_series(exp)
    base_keys = [k for k in exp.samples() if k[0].startswith(WORKLOAD_PREFIXES)]
    figures: dict[str, float] = {
        "baseline_series": baseline,
        "start_rss_kib": rss_kib(exp.proc.pid),
    }
    started = time.monotonic()
    peak = baseline
    for first in range(0, TOTAL, BATCH):
        batch = range(first, first + BATCH)
        for n in batch:
            host.add_process(300_000 + n, "work", cgroup(n), start=10_000 + n, utime=5)
        create(batch)
        last = f"churn-{batch[-1]}"
        samples = wait_samples(exp, named(last), f"{last} named")
        peak = max(peak, workload_series(samples))
        for n in batch:
            host.remove_process(300_000 + n)
        delete(batch)
        if first + BATCH == WARM_AFTER:
            figures["warm_rss_kib"] = rss_kib(exp.proc.pid)
        if first + BATCH == TOTAL // 2:
            figures["half_rss_kib"] = rss_kib(exp.proc.pid)
    figures["churn_s"] = time.monotonic() - started
    figures["peak_series"] = peak
    # Back to baseline: every churned pod's series is gone, and what is left belongs to the
    # fixture's own workloads (one of which may have gained a series meanwhile, e.g. the first
    # energy of system_processes in an interval where no task ran).
    samples = wait_samples(exp, lambda s: not churn_series(s), "churn series gone", timeout=60)
    owners = {_owner(k) for k in base_keys}
    strangers = [
        k for k in samples if k[0].startswith(WORKLOAD_PREFIXES) and _owner(k) not in owners
    ]
    assert not strangers, f"series of unknown workloads left: {strangers}"
    figures["end_series"] = workload_series(samples)
    assert not labels_of(samples, "wattprobe_container_cpu_seconds_total", namespace="churn")
    time.sleep(1.0)  # a few more intervals with everything expired
    figures["end_rss_kib"] = rss_kib(exp.proc.pid)
    figures["growth"] = figures["end_rss_kib"] / figures["warm_rss_kib"] - 1
    return figures


@pytest.mark.slow
def test_kubelet_churn(host: FixtureHost, exporter: StartExporter, tmp_path: Path) -> None:
    add_nvidia_gpus(host)
    with kube_node(tmp_path) as node, ticking(host):
        base = fixture_pods()
        live: dict[int, dict[str, Any]] = {}

        def create(batch: range) -> None:
            live.update({n: churn_pod(n) for n in batch})
            node.kubelet.set_pods([*base, *live.values()])

        def delete(batch: range) -> None:
            for n in batch:
                del live[n]
            node.kubelet.set_pods([*base, *live.values()])

        exp = exporter(*host.args(), *FAST, *RETENTION, *node.kubelet_args())
        wait_samples(
            exp, lambda s: bool(labels_of(s, "wattprobe_pod_energy_joules_total")), "first pods"
        )
        figures = churn(host, exp, create, delete)
    print(f"kubelet churn: {figures}")
    assert figures["growth"] < 0.10, figures


@pytest.mark.slow
def test_apiserver_churn(host: FixtureHost, exporter: StartExporter) -> None:
    with apiserver_for(fixture_pods(), metaserver=False) as api, ticking(host):

        def create(batch: range) -> None:
            for n in batch:
                api.add(churn_pod(n))

        def delete(batch: range) -> None:
            for n in batch:
                api.delete(uid(n))

        exp = exporter(
            *host.args(),
            *FAST,
            *RETENTION,
            *apiserver_args(api.url),
        )
        wait_samples(
            exp, lambda s: bool(labels_of(s, "wattprobe_pod_energy_joules_total")), "first pods"
        )
        figures = churn(host, exp, create, delete)
        assert api.lists == 1  # 20,000 events over watches, never a re-list
    print(f"apiserver churn: {figures}")
    assert figures["growth"] < 0.10, figures
