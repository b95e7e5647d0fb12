"""validate.py end to end against the fake NVML (issue 32's no-GPU half): the real pynvml loads
the fake libnvidia-ml.so.1, the fake-load mode drives the fake's scenario as a driver would show
the load process, a stand-in nvidia-smi (fake_smi.py) prints what NVML says, and the agent runs
as on the GPU machine. Then the recorded scenario is replayed through the fake and wattprobe must
serve the GPU it describes."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from exporter.host.cgroupfs.classify import parse_cgroup_path
from tests.gpu_real import cgroup
from tests.gpu_real.agent import REPO, Agent, pick
from tests.gpu_real.figures import agreement_pct
from tests.gpu_real.smi import FIELDS, parse_row
from tests.sources.gpu.nvml.build import SCENARIO_ENV, build_fake_nvml
from tests.sources.gpu.nvml.scenario import parse as parse_scenario
from tests.support.paths import FIXTURES
from tests.support.realparts import require_binary

SCRIPT = REPO / "tests" / "gpu_real" / "validate.py"
BUDGET_S = 30  # start-up, four phases of ~2 s at a 0.5 s interval, the end
RUN_TIMEOUT_S = 120  # the budget, the closing steps' own bounds and a loaded CI machine


def one_gpu_scenario(path: Path) -> Path:
    """GPU 0 of the H100 fixture alone, with no processes: the load is the only one."""
    lines = (FIXTURES / "nvml" / "h100x8-timesliced.nvml").read_text().splitlines()
    keep = [
        line
        for line in lines
        if not line.startswith("gpu.")
        or (line.startswith("gpu.0.") and ".proc." not in line and ".putil." not in line)
    ]
    path.write_text("\n".join(keep) + "\n")
    return path


def stand_in_smi(path: Path) -> Path:
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m tests.gpu_real.fake_smi "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture(scope="module")
def fake_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_nvml(tmp_path_factory.mktemp("fake-nvml"), require_binary("gcc"))


def validate(fake: Path, scenario: Path, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": str(fake),
        SCENARIO_ENV: str(scenario),
        "PYTHONPATH": str(REPO),
    }
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


@pytest.fixture(scope="module")
def run(fake_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    work = tmp_path_factory.mktemp("validate")
    scenario = one_gpu_scenario(work / "gpu.nvml")
    args = ["--budget-s", str(BUDGET_S), "--engine", "fake", "--interval", "0.5s"]
    args += ["--sample-s", "0.25", "--nvidia-smi", str(stand_in_smi(work / "nvidia-smi"))]
    result = validate(fake_dir, scenario, work / "out", *args)
    report_path = work / "out" / "report.json"
    assert report_path.exists(), result.stdout + result.stderr
    report: dict[str, Any] = json.loads(report_path.read_text())
    assert result.returncode == 0, json.dumps(report["errors"], indent=1)
    return report, scenario


@pytest.mark.slow
def test_the_report_compares_energy_with_the_fakes_counter(
    run: tuple[dict[str, Any], Path],
) -> None:
    report, scenario = run
    assert report["complete"] and report["errors"] == []
    energy = report["energy"]["gpus"]["0"]
    # the driver stopped before the last read: the counter NVML gave is the file's final value
    final_mj = int(parse_scenario(scenario.read_text())["gpu.0.energy_mj"])
    first_mj, last_mj = energy["nvml_counter_mj"]
    assert last_mj == final_mj
    assert energy["nvml_counter_j"] == pytest.approx((last_mj - first_mj) / 1000)
    assert energy["nvml_counter_j"] > 0
    # Both ends are exact: the fake's counter stands still before the first phase and after the
    # load stopped, so wattprobe's baseline and last read see what the validator's reads see.
    assert energy["wattprobe_j"] == pytest.approx(energy["nvml_counter_j"], abs=0.01), energy
    assert energy["wattprobe_vs_nvml_pct"] == pytest.approx(0.0, abs=0.01), energy
    # nvidia-smi rows, timed on arrival, every ~100 ms of a power that steps once per phase:
    # each step is placed to within a row's lateness; a unit or window error is far larger
    assert energy["nvidia_smi_rows"] >= 10, energy
    assert abs(energy["nvidia_smi_vs_nvml_pct"]) <= 15.0, energy
    # the counter was read after the agent's interval ended, at both ends of the window
    skews = report["energy"]["nvml_read_after_agent_s"]
    assert all(skew is not None and skew >= 0 for skew in skews), skews


@pytest.mark.slow
def test_the_busy_phase_is_billed_to_the_loads_cgroup(run: tuple[dict[str, Any], Path]) -> None:
    report, _ = run
    busy = report["phases"][0]
    assert busy["duty"] == 1.0
    assert busy["load_in_process_list"] and busy["load_in_process_utilization"]
    billing = busy["billing"]
    share = billing["container_share"] if report["load"]["cgroup"]["placed"] else None
    assert (share if share is not None else billing["process_share"]) >= 0.9
    assert report["busy_ok"] is True
    # the fake's power at duty 1 is 90 % of the 700 W limit: the three witnesses agree
    gauges = busy["gauges"]
    assert gauges["power_w"] == {"wattprobe": 630.0, "nvml": 630.0, "nvidia_smi": 630.0}
    assert gauges["power_limit_w"] == {"wattprobe": 700.0, "nvml": 700.0, "nvidia_smi": 700.0}
    assert gauges["utilization_pct"] == {"wattprobe": 100.0, "nvml": 100, "nvidia_smi": 100.0}
    for name in ("temperature_c", "clock_sm_mhz", "memory_used_mib"):
        assert gauges[name]["wattprobe"] == gauges[name]["nvml"], name
    idle = report["phases"][-1]
    assert idle["duty"] == 0.0 and idle["load_in_process_list"]  # idle, context kept


@pytest.mark.slow
def test_health_series_latencies_and_cost_are_reported(run: tuple[dict[str, Any], Path]) -> None:
    report, _ = run
    health = report["health"]["0"]["wattprobe"]
    xids = [s for s in health["wattprobe_gpu_xid_errors_total"] if s["labels"]["xid"] == "31"]
    assert [s["value"] for s in xids] == [1.0]  # the one XID the fake load raised
    ecc = {s["labels"]["type"]: s["value"] for s in health["wattprobe_gpu_ecc_errors_total"]}
    assert ecc == {"corrected": 0.0, "uncorrected": 0.0}
    reasons = {s["labels"]["reason"] for s in health["wattprobe_gpu_clock_event_active"]}
    assert {"gpu_idle", "sw_power_cap", "hw_slowdown"} <= reasons
    for phase in report["phases"]:
        assert phase["agent_collect_s"]["nvml"] >= 0  # the agent's own NVML read per interval
    times = report["nvml"]["call_times"]
    for call in (
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetMigMode",
        "nvmlEventSetWait(0)",
    ):
        assert times[call]["calls"] >= 1 and times[call]["max_ms"] >= 0, call
    assert report["nvml"]["xid_event_set"]["wait"] == "NVMLError_Timeout"
    agent = report["agent"]
    assert agent["ready_s"] > 0 and agent["at_ready"]["rss_mib"] > 0
    assert agent["steady"]["cpu_cores"] >= 0 and agent["steady"]["rss_mib_peak"] > 0


@pytest.mark.slow
def test_the_recording_replays_through_the_fake(
    run: tuple[dict[str, Any], Path], fake_dir: Path, tmp_path: Path
) -> None:
    report, _ = run
    recorded = Path(report["recording"])
    values = parse_scenario(recorded.read_text())
    load_pid = report["load"]["pid"]
    assert values["gpu.0.proc.0.pid"] == str(load_pid)  # recorded while the load ran
    assert values["gpu.0.util.gpu"] == "100"
    assert_served_as_recorded(recorded, fake_dir, tmp_path)


def assert_served_as_recorded(recorded: Path, fake_dir: Path, tmp_path: Path) -> None:
    """wattprobe serve, on the fake replaying a recording, serves every GPU it describes with
    the recorded identity and values (the check a real GPU's recording gets in CI once it is
    copied to tests/fixtures/nvml/)."""
    values = parse_scenario(recorded.read_text())
    env = {**os.environ, "LD_LIBRARY_PATH": str(fake_dir), SCENARIO_ENV: str(recorded)}
    agent = Agent.start(
        ["--activity.source", "procfs", "--interval", "0.5s"], tmp_path / "log", env
    )
    try:
        agent.wait_ready(30)
        _, samples = agent.next_interval(30)
    finally:
        agent.stop()
    gpus = sorted({k.split(".")[1] for k in values if k.startswith("gpu.")})
    assert gpus, "the recording describes no GPU"
    for gpu in gpus:
        g = f"gpu.{gpu}."
        (info,) = pick(samples, "wattprobe_gpu_info", gpu=gpu)
        labels = dict(info)
        assert labels["uuid"] == values[g + "uuid"] and labels["model"] == values[g + "name"]
        assert labels["driver_version"] == values["driver_version"]
        served = {
            "wattprobe_gpu_power_watts": (g + "power_mw", 1e-3),
            "wattprobe_gpu_power_limit_watts": (g + "power_limit_mw", 1e-3),
            "wattprobe_gpu_temperature_celsius": (g + "temperature", 1),
            "wattprobe_gpu_memory_used_bytes": (g + "memory.used", 1),
        }
        for name, (key, scale) in served.items():
            if key not in values:  # NVML did not answer it on that GPU: nothing to serve
                continue
            got = [
                v
                for lbl, v in pick(samples, name, gpu=gpu).items()
                if not dict(lbl).get("gpu_instance")
            ]
            assert got == [pytest.approx(int(values[key], 0) * scale)], name
        source = "nvml_energy" if g + "energy_mj" in values else "nvml_power"
        assert pick(samples, "wattprobe_gpu_energy_joules_total", gpu=gpu, source=source)


def test_a_missing_driver_still_writes_a_report(fake_dir: Path, tmp_path: Path) -> None:
    """NVML that cannot initialise: no agent, no load; the partial report says why, exit 1."""
    scenario = tmp_path / "broken.nvml"
    scenario.write_text("init_error=9\n")  # NVML_ERROR_DRIVER_NOT_LOADED
    result = validate(fake_dir, scenario, tmp_path / "out", "--engine", "fake", "--budget-s", "10")
    assert result.returncode == 1
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["complete"] is False
    assert any("NVML lists no GPU" in e for e in report["errors"]), report["errors"]
    assert report["nvml"]["call_errors"]["nvmlInit"] == {"NVMLError_DriverNotLoaded": 1}
    assert report["recording"] is None


def test_smi_rows_parse_with_missing_values() -> None:
    assert parse_row("0, 71.23, 0, 530, 31, 345, 700.00") == dict(
        zip(FIELDS, (0.0, 71.23, 0.0, 530.0, 31.0, 345.0, 700.0), strict=True)
    )
    row = parse_row("1, [N/A], 5, 10, 40, 1980, [N/A]")
    assert row is not None and row["power.draw"] is None and row["power.limit"] is None
    assert parse_row("index, power.draw [W]") is None  # a header or a warning line
    assert parse_row("N/A, 1, 2, 3, 4, 5, 6") is None


def test_cgroup_hierarchies_pure_v2_and_hybrid(tmp_path: Path) -> None:
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu memory\n")
    assert cgroup.hierarchies(v2) == [v2]
    hybrid = tmp_path / "hybrid"
    for name in ("unified", "cpu", "memory", "cpuset"):
        (hybrid / name).mkdir(parents=True)
        (hybrid / name / "cgroup.procs").write_text("")
    (hybrid / "not-mounted").mkdir()
    assert [p.name for p in cgroup.hierarchies(hybrid)] == ["cpu", "memory", "unified"]
    placement = cgroup.place(4242, hybrid)
    assert placement.placed and len(placement.made) == 3
    for name in ("cpu", "memory", "unified"):
        procs = hybrid / name / placement.relative / "cgroup.procs"
        assert procs.read_text() == "4242\n"
    # the agent's classifier sees the scope as a podman container with that ID
    ref = parse_cgroup_path("/" + placement.relative)
    assert ref is not None and ref.container_id == placement.container_id
    assert not cgroup.place(1, tmp_path / "absent").placed


def test_agreement_is_relative_to_the_reference() -> None:
    assert agreement_pct(101.0, 100.0) == 1.0
    assert agreement_pct(95.0, 100.0) == -5.0
    assert agreement_pct(None, 100.0) is None and agreement_pct(1.0, 0.0) is None
