"""`wattprobe serve` on this machine: no RAPL, hwmon or GPU -> estimated power, real shares."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.conftest import StartExporter
from tests.support.invariants import check_exposition
from tests.support.kubecgroups import kube_container
from tests.support.running import select


def test_serve_with_no_flags_estimates_power_and_splits_it(exporter: StartExporter) -> None:
    with kube_container() as container:
        pod_uid, container_id = container.pod_uid, container.container_id
        busy = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import time\nend = time.time() + 30\nwhile time.time() < end: pass",
            ]
        )
        try:
            container.add(busy.pid)
            proc = exporter("--interval", "1s")
            proc.wait_for("/readyz")
            time.sleep(3)
            samples = proc.samples()
        finally:
            busy.kill()
            busy.wait()
    status = {dict(k)["source"]: v for k, v in select(samples, "wattprobe_source_up").items()}
    assert status["estimated"] == 1 and status["procfs"] == 1
    reasons = {dict(k)["source"]: dict(k)["reason"] for k in select(samples, "wattprobe_source_up")}
    assert reasons["rapl"] == "absent" and reasons["hwmon"] == "absent"
    node = select(samples, "wattprobe_node_energy_joules_total", source="estimated", zone="package")
    assert {dict(k)["mode"] for k in node} == {"active", "idle"} and all(
        v > 0 for v in node.values()
    )
    cpu = select(
        samples, "wattprobe_container_cpu_seconds_total", container_id=container_id, pod_uid=pod_uid
    )
    assert len(cpu) == 1 and next(iter(cpu.values())) > 1.5, cpu  # one core busy for >= 3 intervals
    mine = select(
        samples,
        "wattprobe_container_energy_joules_total",
        container_id=container_id,
        zone="package",
        mode="active",
    )
    everyone = select(
        samples, "wattprobe_container_energy_joules_total", zone="package", mode="active"
    )
    # its share of the active energy follows its share of the CPU time (the per-interval shares
    # are weighted by each interval's energy, so they agree closely but not exactly)
    cpu_all = select(samples, "wattprobe_container_cpu_seconds_total")
    cpu_share = next(iter(cpu.values())) / sum(cpu_all.values())
    assert sum(mine.values()) / sum(everyone.values()) == pytest.approx(cpu_share, rel=0.25)
    pods = select(
        samples, "wattprobe_pod_energy_joules_total", pod_uid=pod_uid, zone="package", mode="active"
    )
    # the estimate's memory zone is split the same way (this VM has no DRAM sensor either)
    dram = select(samples, "wattprobe_node_energy_joules_total", source="estimated", zone="dram")
    assert {dict(k)["mode"] for k in dram} == {"active", "idle"}
    info = select(samples, "wattprobe_estimate_info")
    assert len(info) == 1 and dict(next(iter(info)))["basis"], info
    assert sum(pods.values()) == pytest.approx(sum(mine.values()), rel=1e-9)
    check_exposition(samples)
