"""`wattprobe serve` as a subprocess: the real pynvml loads the fake libnvidia-ml.so.1 through
LD_LIBRARY_PATH; the tests change the scenario file between samples and read /metrics."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from tests.conftest import StartExporter
from tests.sources.gpu.nvml.pods import (
    H100_PODS,
    MIG_PODS,
    P100_PODS,
    POD_A,
    POD_B,
    POD_D,
    POD_E,
    POD_MIG_1G,
    POD_MIG_2G,
    POD_MIG_3G,
    POD_P100,
    add_pods,
)
from tests.sources.gpu.nvml.scenario import Scenario
from tests.support.fixturehost import FixtureHost
from tests.support.running import REPO, ExporterProcess, Samples, parse_samples, select

pytestmark = pytest.mark.container_series  # its exporters serve them

Env = Callable[[Scenario], dict[str, str]]
INTERVAL = "0.3s"
GPU_IDLE_W = 60.0


def one(samples: Samples, name: str, **labels: str) -> float:
    found = select(samples, name, **labels)
    assert len(found) == 1, f"{name}{labels}: {found}"
    return next(iter(found.values()))


def total(samples: Samples, name: str, **labels: str) -> float:
    return math.fsum(select(samples, name, **labels).values())


def settle(proc: ExporterProcess) -> Samples:
    """Samples of a snapshot read after everything written before this call."""
    proc.wait_next_interval()
    return parse_samples(proc.wait_next_interval())


def start(
    exporter: StartExporter, host: FixtureHost, env: dict[str, str], *args: str
) -> ExporterProcess:
    proc = exporter(
        *host.args(), "--interval", INTERVAL, "--power.idle", f"gpu={GPU_IDLE_W}", *args, env=env
    )
    settle(proc)  # the first reading (the energy baseline) is behind us
    return proc


@pytest.fixture
def h100(tmp_path_factory: pytest.TempPathFactory, host: FixtureHost) -> Scenario:
    add_pods(host, H100_PODS)
    return Scenario.from_fixture("h100x8-timesliced", tmp_path_factory.mktemp("nvml") / "h100.nvml")


def test_gpu_metrics_match_the_scenario(
    exporter: StartExporter, host: FixtureHost, h100: Scenario, exporter_env: Env
) -> None:
    proc = start(exporter, host, exporter_env(h100))
    samples = settle(proc)
    assert one(samples, "wattprobe_source_up", source="nvml") == 1
    assert one(samples, "wattprobe_source_up", source="nvml_xid") == 1
    for i in range(8):
        g = f"gpu.{i}."
        ids = {"gpu": str(i), "uuid": h100[g + "uuid"]}
        info = select(samples, "wattprobe_gpu_info", **ids)
        assert list(info.values()) == [1.0]
        assert dict(next(iter(info))) == {
            **ids,
            "model": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": h100[g + "pci_bus_id"],
            "driver_version": "550.54.15",
            "cuda_version": "12.4",
            "mig_mode": "disabled",
            "vendor": "nvidia",
        }
        assert one(samples, "wattprobe_gpu_lost", **ids) == 0
        expect = {
            "wattprobe_gpu_power_watts": h100.number(g + "power_mw") / 1000,
            "wattprobe_gpu_power_limit_watts": 700.0,
            "wattprobe_gpu_temperature_celsius": h100.number(g + "temperature"),
            "wattprobe_gpu_utilization_ratio": h100.number(g + "util.gpu") / 100,
            "wattprobe_gpu_memory_utilization_ratio": h100.number(g + "util.memory") / 100,
            "wattprobe_gpu_memory_used_bytes": h100.number(g + "memory.used"),
            "wattprobe_gpu_memory_total_bytes": h100.number(g + "memory.total"),
            "wattprobe_gpu_memory_reserved_bytes": h100.number(g + "memory.reserved"),
            "wattprobe_gpu_pcie_replays_total": h100.number(g + "pcie_replay"),
        }
        for name, value in expect.items():
            assert one(samples, name, **ids) == pytest.approx(value), name
        assert one(samples, "wattprobe_gpu_clock_hertz", clock="sm", **ids) == pytest.approx(
            h100.number(g + "clock.sm") * 1e6
        )
        assert one(samples, "wattprobe_gpu_clock_hertz", clock="memory", **ids) == 2619e6
        reasons = h100.number(g + "clock_events")
        idle = one(samples, "wattprobe_gpu_clock_event_active", reason="gpu_idle", **ids)
        cap = one(samples, "wattprobe_gpu_clock_event_active", reason="sw_power_cap", **ids)
        assert (idle, cap) == (reasons & 1, (reasons >> 2) & 1)
        ecc = h100.number(g + "ecc.corrected")
        assert one(samples, "wattprobe_gpu_ecc_errors_total", type="corrected", **ids) == ecc
        assert one(samples, "wattprobe_gpu_ecc_errors_total", type="uncorrected", **ids) == 0
        assert set(
            dict(k)["source"] for k in select(samples, "wattprobe_gpu_energy_joules_total", **ids)
        ) == {"nvml_energy"}
    assert one(samples, "wattprobe_gpu_processes", gpu="0") == 2
    memory = {
        dict(k)["container_id"]: v
        for k, v in select(samples, "wattprobe_container_gpu_memory_used_bytes", gpu="0").items()
    }
    assert memory == {
        POD_A.container_id: h100.number("gpu.0.proc.0.memory"),
        POD_B.container_id: h100.number("gpu.0.proc.1.memory"),
    }
    unknown = one(
        samples, "wattprobe_container_gpu_memory_used_bytes", gpu="2", container="unknown_processes"
    )
    assert unknown == h100.number("gpu.2.proc.0.memory")
    # the rest of the exporter is unaffected
    assert select(samples, "wattprobe_node_energy_joules_total", zone="package")


def test_time_sliced_pods_split_by_sm_share(
    exporter: StartExporter, host: FixtureHost, h100: Scenario, exporter_env: Env
) -> None:
    proc = start(exporter, host, exporter_env(h100))
    added = {0: 0.0, 2: 0.0, 3: 0.0}
    for _ in range(3):
        for gpu, joules in ((0, 300.0), (2, 120.0), (3, 200.0)):
            h100.add_energy_j(gpu, joules)
            added[gpu] += joules
        h100.write()
        settle(proc)
    samples = settle(proc)

    def gpu_energy(index: int, mode: str) -> float:
        return total(samples, "wattprobe_gpu_energy_joules_total", gpu=str(index), mode=mode)

    def pod(p_uid: str, index: int) -> float:
        return one(
            samples,
            "wattprobe_pod_energy_joules_total",
            pod_uid=p_uid,
            zone="gpu",
            gpu=str(index),
            mode="active",
        )

    for index, joules in added.items():
        # measured == active + idle, to the millijoule the fake counted
        assert gpu_energy(index, "active") + gpu_energy(index, "idle") == pytest.approx(joules)
        assert gpu_energy(index, "idle") > 0
    a, b = pod(POD_A.pod_uid, 0), pod(POD_B.pod_uid, 0)
    assert a / b == pytest.approx(60 / 20, rel=0.01)  # SM shares, not the 2:1 memory ratio
    assert a + b == pytest.approx(gpu_energy(0, "active"), rel=1e-9)
    d, e = pod(POD_D.pod_uid, 3), pod(POD_E.pod_uid, 3)
    assert d / e == pytest.approx(3.0, rel=0.01)  # no SM samples on GPU 3: memory 30:10 GiB
    assert d + e == pytest.approx(gpu_energy(3, "active"), rel=1e-9)
    unknown = one(
        samples,
        "wattprobe_container_energy_joules_total",
        container="unknown_processes",
        zone="gpu",
        gpu="2",
        mode="active",
    )
    assert unknown == pytest.approx(gpu_energy(2, "active"), rel=1e-9)
    methods = {
        (dict(k)["gpu"], dict(k)["method"])
        for k in select(samples, "wattprobe_gpu_attribution_intervals_total")
    }
    assert {("0", "sm"), ("2", "sm"), ("3", "memory")} <= methods


def test_xid_79_then_lost_gpu_keeps_the_exporter_serving(
    exporter: StartExporter, host: FixtureHost, h100: Scenario, exporter_env: Env
) -> None:
    proc = start(exporter, host, exporter_env(h100))
    uuid5 = h100["gpu.5.uuid"]
    h100.add_event(gpu=5, xid=79)  # "GPU has fallen off the bus" ...
    h100["gpu.5.lost"] = 1  # ... and from now on NVML says GPU_IS_LOST
    h100.add_energy_j(1, 200.0)
    h100.write()
    deadline = time.monotonic() + 15
    while True:
        samples = parse_samples(proc.wait_next_interval())
        xids = select(samples, "wattprobe_gpu_xid_errors_total", gpu="5", xid="79")
        if xids or time.monotonic() > deadline:
            break
    assert list(xids.values()) == [1.0]
    samples = settle(proc)
    assert one(samples, "wattprobe_gpu_lost", gpu="5", uuid=uuid5) == 1
    assert one(samples, "wattprobe_gpu_info", gpu="5", uuid=uuid5) == 1
    assert not select(samples, "wattprobe_gpu_power_watts", gpu="5")  # no stale gauges
    assert one(samples, "wattprobe_gpu_xid_errors_total", gpu="5", xid="79") == 1
    assert one(samples, "wattprobe_source_up", source="nvml") == 1
    for other in ("0", "1", "7"):
        assert one(samples, "wattprobe_gpu_lost", gpu=other) == 0
        assert select(samples, "wattprobe_gpu_power_watts", gpu=other)
    gpu1 = total(samples, "wattprobe_gpu_energy_joules_total", gpu="1")
    assert gpu1 == pytest.approx(200.0)
    assert proc.get("/healthz")[0] == 200
    # the GPU comes back (after a reset): gauges return, counters continue
    h100["gpu.5.lost"] = 0
    h100.write()
    samples = settle(proc)
    assert one(samples, "wattprobe_gpu_lost", gpu="5") == 0
    assert one(samples, "wattprobe_gpu_power_watts", gpu="5") == pytest.approx(69.0)
    assert one(samples, "wattprobe_gpu_xid_errors_total", gpu="5", xid="79") == 1
    # shutdown stops the XID thread and NVML cleanly
    proc.stop()
    assert proc.proc.returncode == 0, proc.log()
    assert "Traceback" not in proc.log()


def test_mig_instances_and_pods(
    exporter: StartExporter,
    host: FixtureHost,
    tmp_path_factory: pytest.TempPathFactory,
    exporter_env: Env,
) -> None:
    add_pods(host, MIG_PODS)
    mig = Scenario.from_fixture("a100-mig", tmp_path_factory.mktemp("nvml") / "mig.nvml")
    proc = start(exporter, host, exporter_env(mig))
    for _ in range(2):
        mig.add_energy_j(0, 150.0)
        mig.write()
        settle(proc)
    samples = settle(proc)
    ids = {"gpu": "0", "uuid": mig["gpu.0.uuid"]}
    assert one(samples, "wattprobe_gpu_info", mig_mode="enabled", **ids) == 1
    assert not select(samples, "wattprobe_gpu_utilization_ratio")  # NVML has none in MIG mode
    instances = {
        (dict(k)["gpu_instance"], dict(k)["profile"], dict(k)["mig_uuid"])
        for k in select(samples, "wattprobe_gpu_mig_info", **ids)
    }
    assert instances == {
        (
            mig[f"gpu.0.mig.{m}.gi"],
            mig[f"gpu.0.mig.{m}.name"].split("MIG ")[1],
            mig[f"gpu.0.mig.{m}.uuid"],
        )
        for m in range(4)
    }
    # each GPU instance's share of the A100's 7 compute slices, from its profile's "<N>g."
    shares = {
        dict(k)["gpu_instance"]: v
        for k, v in select(samples, "wattprobe_gpu_mig_slice_ratio", **ids).items()
    }
    assert shares == {
        mig[f"gpu.0.mig.{m}.gi"]: pytest.approx(
            int(mig[f"gpu.0.mig.{m}.name"].split("MIG ")[1].split("g.")[0]) / 7
        )
        for m in range(4)
    }
    for m in range(4):
        gi = mig[f"gpu.0.mig.{m}.gi"]
        labels = {**ids, "gpu_instance": gi, "compute_instance": "0"}
        assert one(samples, "wattprobe_gpu_memory_total_bytes", **labels) == mig.number(
            f"gpu.0.mig.{m}.memory.total"
        )
        assert one(samples, "wattprobe_gpu_memory_used_bytes", **labels) == mig.number(
            f"gpu.0.mig.{m}.memory.used"
        )
    active = {
        p.pod_uid: one(
            samples,
            "wattprobe_pod_energy_joules_total",
            pod_uid=p.pod_uid,
            zone="gpu",
            gpu="0",
            mode="active",
        )
        for p in (POD_MIG_3G, POD_MIG_2G, POD_MIG_1G)
    }
    gpu_active = total(samples, "wattprobe_gpu_energy_joules_total", gpu="0", mode="active")
    assert math.fsum(active.values()) == pytest.approx(gpu_active, rel=1e-9)
    assert active[POD_MIG_3G.pod_uid] / active[POD_MIG_1G.pod_uid] == pytest.approx(6, rel=0.01)
    assert active[POD_MIG_2G.pod_uid] / active[POD_MIG_1G.pod_uid] == pytest.approx(3, rel=0.01)
    assert (
        one(samples, "wattprobe_gpu_attribution_intervals_total", method="mig_memory", **ids) >= 2
    )


def test_pre_volta_gpu_integrates_power(
    exporter: StartExporter,
    host: FixtureHost,
    tmp_path_factory: pytest.TempPathFactory,
    exporter_env: Env,
) -> None:
    add_pods(host, P100_PODS)
    p100 = Scenario.from_fixture("p100-no-energy", tmp_path_factory.mktemp("nvml") / "p100.nvml")
    proc = exporter(
        *host.args(), "--interval", "0.5s", "--power.idle", "gpu=25", env=exporter_env(p100)
    )
    settle(proc)
    first = parse_samples(proc.wait_next_interval())
    t_first = time.monotonic()  # within a poll (20 ms) of the snapshot's publication
    for _ in range(5):
        proc.wait_next_interval()
    last = parse_samples(proc.wait_next_interval())
    t_last = time.monotonic()

    def energy(samples: Samples, mode: str = "") -> float:
        labels = {"mode": mode} if mode else {}
        return total(
            samples, "wattprobe_gpu_energy_joules_total", gpu="0", source="nvml_power", **labels
        )

    # constant 125 W integrated over the time between the two snapshots
    assert energy(last) - energy(first) == pytest.approx(125.0 * (t_last - t_first), rel=0.05)
    # and exactly per interval: idle is 25 W * dt of the same intervals, so 25/125 of the total
    assert energy(last, "idle") / energy(last) == pytest.approx(0.2, rel=1e-9)
    assert not select(last, "wattprobe_gpu_energy_joules_total", source="nvml_energy")
    pod_active = one(
        last,
        "wattprobe_pod_energy_joules_total",
        pod_uid=POD_P100.pod_uid,
        zone="gpu",
        gpu="0",
        mode="active",
    )
    gpu_active = total(last, "wattprobe_gpu_energy_joules_total", gpu="0", mode="active")
    assert pod_active == pytest.approx(gpu_active, rel=1e-9) and pod_active > 0
    # not supported: logged once, not every interval
    assert proc.log().count("total energy counter (power is integrated instead) not supported") == 1


@pytest.mark.parametrize("driver_loaded", [False, True])
def test_no_library_leaves_the_rest_working(
    exporter: StartExporter, host: FixtureHost, driver_loaded: bool
) -> None:
    if driver_loaded:
        (host.procfs / "driver" / "nvidia").mkdir(parents=True)
        (host.procfs / "driver" / "nvidia" / "version").write_text("NVRM version: 550.54.15\n")
    proc = exporter(*host.args(), "--interval", INTERVAL, env={"LD_LIBRARY_PATH": ""})
    samples = settle(proc)
    reason = "library not found" if driver_loaded else "absent"
    assert one(samples, "wattprobe_source_up", source="nvml") == 0
    assert one(samples, "wattprobe_source_up", source="nvml", reason=reason) == 0
    assert "Traceback" not in proc.log()
    assert not [name for name, _ in samples if name.startswith("wattprobe_gpu_")]
    assert one(samples, "wattprobe_source_up", source="rapl") == 1
    # CPU energy is still attributed to containers
    host.add_energy_j("intel-rapl:0", 50.0)
    host.add_cpu_ticks(busy=100, idle=100)
    host.add_process_ticks(1001, 50)
    samples = settle(proc)
    assert select(samples, "wattprobe_container_energy_joules_total", zone="package")


def test_check_reports_gpus_and_missing_library(
    host: FixtureHost, h100: Scenario, exporter_env: Env
) -> None:
    def check(env: dict[str, str]) -> tuple[int, dict[str, object]]:
        result = subprocess.run(
            [sys.executable, "-m", "exporter", "check", "--json", *host.args()],
            cwd=REPO,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        report = json.loads(result.stdout)
        return result.returncode, next(s for s in report["sources"] if s["source"] == "nvml")

    code, nvml = check(exporter_env(h100))
    assert code == 0
    assert nvml["ok"] is True
    assert nvml["found"] == (
        "driver 550.54.15, NVML 12.550.54.15, CUDA 12.4; "
        "8 GPUs: 0-7 NVIDIA H100 80GB HBM3 (MIG off)"
    )
    code, nvml = check({"LD_LIBRARY_PATH": ""})
    assert code == 0  # RAPL and /proc still work
    assert nvml["ok"] is False
    assert str(nvml["reason"]).startswith("absent")


def test_nvml_collector_can_be_switched_off(
    exporter: StartExporter, host: FixtureHost, h100: Scenario, exporter_env: Env
) -> None:
    proc = exporter(
        *host.args(), "--interval", INTERVAL, "--no-collector.nvml", env=exporter_env(h100)
    )
    samples = settle(proc)
    assert not select(samples, "wattprobe_source_up", source="nvml")
    assert not [name for name, _ in samples if name.startswith("wattprobe_gpu_")]
