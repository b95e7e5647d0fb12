"""End to end: `wattprobe serve` on the fixture trees, counters advanced between intervals,
/metrics compared with a checked-in golden file (time-dependent series filtered)."""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest

from tests.conftest import StartExporter
from tests.support.fixturehost import FixtureHost
from tests.support.invariants import check_exposition
from tests.support.kubeenv import KubeNode, fixture_pods, kube_node, wait_samples
from tests.support.paths import FIXTURES
from tests.support.promtool import check_metrics
from tests.support.realparts import require_binary
from tests.support.running import ExporterProcess, parse_samples, select

pytestmark = pytest.mark.container_series  # its exporters serve them

GOLDEN = FIXTURES / "golden" / "fixture-host.prom"

# series whose values depend on wall-clock time or on this machine, not on the fixture counters
TIME_DEPENDENT = (
    "wattprobe_collect_duration_seconds",
    "wattprobe_intervals_total",
    "wattprobe_last_interval_timestamp_seconds",
    "wattprobe_build_info",
    "wattprobe_showback_config_last_reload_success_timestamp_seconds",
    "process_",  # wattprobe's own CPU, memory, fds, start time (checked in the test below)
)
POWER_INTEGRATED_ZONES = ('zone="power_meter_power1"', 'zone="amdgpu_ppt"')

# (pid, utime ticks) per process in the first advance
WORK_A = {
    1001: 100,
    1002: 50,
    1101: 200,
    1102: 100,
    1201: 150,
    1301: 50,
    1401: 100,
    2001: 80,
    2101: 60,
    800: 30,
    15: 20,
    1: 10,
    950: 5,
}
ENERGY_A = {
    "intel-rapl:0": 150.0,
    "intel-rapl:1": 100.0,
    "intel-rapl:0:0": 60.0,
    "intel-rapl:1:0": 40.0,
    "intel-rapl:0:1": 20.0,
    "intel-rapl:1:1": 3.0,
}
ENERGY_B = {
    "intel-rapl:0": 90.0,
    "intel-rapl:1": 60.0,
    "intel-rapl:0:0": 30.0,
    "intel-rapl:1:0": 20.0,
    "intel-rapl:0:1": 10.0,
    "intel-rapl:1:1": 2.0,
}
WORK_B = {1001: 30, 1101: 90, 1401: 60, 2202: 0, 950: 0}

# the node's showback settings (docs/showback-config.md): a flag and the file over it
SHOWBACK = """\
pue: 1.3
energy_price: 0.21
carbon_intensity: 350
gpu_hour_prices:
  - model: NVIDIA H100 80GB HBM3
    price: 2.5
  - resource: nvidia.com/gpu
    price: 0.75
"""


def normalize(body: str) -> str:
    """Drop time-dependent series, sort samples within each family, round to 10 digits."""
    out: list[str] = []
    family: list[str] = []
    samples: list[str] = []

    def flush() -> None:
        if samples:
            out.extend(family)
            out.extend(sorted(samples))
        family.clear()
        samples.clear()

    for line in body.splitlines():
        if line.startswith("# HELP"):
            flush()
            family.append(line)
        elif line.startswith("#"):
            family.append(line)
        elif line:
            if line.startswith(TIME_DEPENDENT) or any(z in line for z in POWER_INTEGRATED_ZONES):
                continue
            series, value = line.rsplit(" ", 1)
            samples.append(f"{series} {float(value):.10g}")
    flush()
    return "\n".join(out) + "\n"


def advance(
    host: FixtureHost, energy: dict[str, float], work: dict[int, int], idle_ticks: int
) -> None:
    for device, joules in energy.items():
        host.add_energy_j(device, joules)
    for pid, ticks in work.items():
        if ticks:
            host.add_process_ticks(pid, ticks)
    host.add_hwmon_energy_j("hwmon3", "energy1_input", 10.0)
    host.add_cpu_ticks(busy=sum(work.values()), idle=idle_ticks)


def run_scenario(
    host: FixtureHost, exporter: StartExporter, node: KubeNode
) -> tuple[ExporterProcess, str]:
    """The fixture host with the fake kubelet naming its pods (tests/fixtures/kube)."""
    showback = host.root / "showback.yaml"
    showback.write_text(SHOWBACK)
    proc = exporter(
        *host.args(),
        "--interval",
        "1s",
        "--power.idle",
        "0",
        "--collector.process",
        "--showback.currency",
        "EUR",
        "--showback.config",
        str(showback),
        *node.kubelet_args(),
    )
    proc.wait_for("/readyz")
    wait_samples(
        proc,
        lambda s: list(select(s, "wattprobe_source_up", source="kubelet").values()) == [1.0],
        "the kubelet's pod names",
    )
    proc.wait_next_interval()
    advance(host, ENERGY_A, WORK_A, idle_ticks=2645)
    proc.wait_next_interval()
    # a process exits; a new one starts in the same pod; a PID is reused by a host service
    host.remove_process(2201)
    g = "4d5e6f7a-8b9c-4d0e-8f1a-2b3c4d5e6f7a"
    host.add_process(
        2202, "sleep", f"0::/kubepods/besteffort/pod{g}/{'f3' * 32}\n", start=9000, utime=40
    )
    host.remove_process(950)
    host.add_process(950, "cron", "0::/system.slice/cron.service\n", start=9001, utime=7)
    advance(host, ENERGY_B, WORK_B, idle_ticks=1000)
    host.add_cpu_ticks(busy=47, idle=0)  # the new processes' 40 + 7 ticks
    return proc, proc.wait_next_interval()


@pytest.mark.smoke
def test_golden_metrics(host: FixtureHost, exporter: StartExporter, tmp_path: Path) -> None:
    with kube_node(tmp_path) as kube:
        _, body = run_scenario(host, exporter, kube)
    got = normalize(body)
    if os.environ.get("WATTPROBE_UPDATE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text(), f"golden differs; if intended, run `make golden`\n{got}"

    samples = parse_samples(body)
    check_exposition(samples)
    node = select(samples, "wattprobe_node_energy_joules_total", mode="active")
    total = {dict(k)["device"]: v for k, v in node.items() if dict(k)["source"] == "rapl"}
    assert total["intel-rapl:0"] == pytest.approx(240.0)
    assert total["intel-rapl:1:1"] == pytest.approx(5.0)  # wrapped during the first advance
    containers = select(
        samples, "wattprobe_container_energy_joules_total", zone="package", mode="active"
    )
    # interval A: 400 package joules... 250 J over 955 ticks; nginx did 100 of them
    nginx = next(v for k, v in containers.items() if dict(k)["container_id"] == "a1" * 32)
    assert nginx == pytest.approx(250.0 * 100 / 955 + 150.0 * 30 / (180 + 47), rel=1e-9)
    assert math.fsum(containers.values()) == pytest.approx(400.0)
    assert "wattprobe_node_cpu_usage_ratio" in body

    # every workload series carries the names the kubelet gave its pod uid (swapped or missing
    # labels would still add up, so they are checked against the kubelet's payload itself)
    names = {
        p["metadata"]["uid"]: (p["metadata"]["namespace"], p["metadata"]["name"])
        for p in fixture_pods()
    }
    labelled = [
        dict(k)
        for family in (
            "wattprobe_pod_energy_joules_total",
            "wattprobe_container_energy_joules_total",
        )
        for k in select(samples, family)
        if dict(k)["pod_uid"]
    ]
    assert len({row["pod_uid"] for row in labelled}) >= 4
    for row in labelled:
        assert (row["namespace"], row["pod"]) == names[row["pod_uid"]], row


def test_self_metrics_are_the_serving_process(host: FixtureHost, exporter: StartExporter) -> None:
    """process_* describe the `wattprobe serve` process itself (its /proc/<pid>), whatever
    --path.procfs says (here the fixture /proc, which has no such process)."""
    before = time.time()
    proc = exporter(*host.args(), "--interval", "1s")
    proc.wait_for("/readyz")
    samples = parse_samples(proc.wait_next_interval())
    pid = proc.proc.pid
    value = {name: v for (name, labels), v in samples.items() if name.startswith("process_")}
    assert before - 2 <= value["process_start_time_seconds"] <= time.time()
    assert 0 < value["process_cpu_seconds_total"] < time.time() - before + 1
    rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    assert 0.5 * rss < value["process_resident_memory_bytes"] < 2 * rss
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    assert abs(value["process_open_fds"] - fds) <= 8  # connections come and go
    assert value["process_max_fds"] >= value["process_open_fds"]


def test_exposition_passes_promtool(
    host: FixtureHost, exporter: StartExporter, tmp_path: Path
) -> None:
    require_binary("promtool")  # fails before the scenario when missing
    with kube_node(tmp_path) as kube:
        _, body = run_scenario(host, exporter, kube)
    check_metrics(body)
    check_metrics(GOLDEN.read_text())


def test_golden_file_is_checked_in() -> None:
    assert GOLDEN.exists() and Path(GOLDEN).read_text().startswith("# HELP")
