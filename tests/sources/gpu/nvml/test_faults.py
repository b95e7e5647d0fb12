"""NVML faults against a serving exporter: init failure, every call NotSupported, XID event waits
failing, one GPU's calls hanging in the driver. Each: the exporter keeps serving, the affected
source_up goes 0 with a reason, the rest is unaffected, it recovers by itself, no counter goes
back, and the joules the fake's counters advanced are counted exactly once.

(Library missing and a GPU lost mid-run: tests/sources/gpu/nvml/test_e2e.py. NVML going away
mid-run and the
init retry interval: tests/sources/gpu/nvml/test_source.py.)"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest

from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.model.config import IdlePower
from exporter.sources.activity.procfs.source import ProcfsSource
from exporter.sources.gpu.nvml.source import NvmlSource
from exporter.sources.power.hwmon import HwmonSource
from exporter.sources.power.rapl import RaplSource
from tests.conftest import StartExporter
from tests.sources.gpu.nvml.conftest import LoadScenario
from tests.sources.gpu.nvml.pods import H100_PODS, add_pods
from tests.sources.gpu.nvml.scenario import Scenario
from tests.support.faults_support import EPS_J, CounterWatch, node_energy, source_up
from tests.support.fixturehost import FixtureHost
from tests.support.inprocess import InProcessExporter
from tests.support.monitor import monitor_settings
from tests.support.running import ExporterProcess, Samples, select

Env = Callable[[Scenario], dict[str, str]]
STEP_J = 5.0
GPU_STEP_J = 100.0


def gpu_j(samples: Samples, gpu: str) -> float:
    return math.fsum(select(samples, "wattprobe_gpu_energy_joules_total", gpu=gpu).values())


def gpu_series(samples: Samples) -> list[str]:
    return [name for name, _ in samples if name.startswith("wattprobe_gpu_")]


def wait_until(
    watch: CounterWatch, check: Callable[[Samples], bool], what: str, timeout: float = 30.0
) -> Samples:
    deadline = time.monotonic() + timeout
    while True:
        samples = watch.next(1)
        if check(samples):
            return samples
        assert time.monotonic() < deadline, f"timed out waiting for {what}"


@pytest.fixture
def h100(tmp_path_factory: pytest.TempPathFactory, host: FixtureHost) -> Scenario:
    add_pods(host, H100_PODS)
    return Scenario.from_fixture("h100x8-timesliced", tmp_path_factory.mktemp("nvml") / "h100.nvml")


@pytest.fixture
def in_process(host: FixtureHost) -> Iterator[Callable[[NvmlSource], InProcessExporter]]:
    made: list[InProcessExporter] = []

    def start(nvml: NvmlSource) -> InProcessExporter:
        procfs = ProcfsSource(host.procfs)
        monitor = Monitor(
            MonitorParts(
                cpu=procfs,
                activity=procfs,
                power=[RaplSource(host.sysfs), HwmonSource(host.sysfs)],
                gpus=[nvml],
            ),
            monitor_settings(idle_power=IdlePower(default_w=0.0), read_timeout_s=2.0),
        )
        exp = InProcessExporter(monitor, interval_s=0.25)
        made.append(exp)
        return exp

    yield start
    for exp in made:
        exp.stop()


def test_init_failure_is_reported_and_recovers_by_itself(
    scenario: LoadScenario,
    host: FixtureHost,
    tmp_path: Path,
    in_process: Callable[[NvmlSource], InProcessExporter],
) -> None:
    """In process, for a 1 s init retry (serve retries every 60 s,
    tests/sources/gpu/nvml/test_source.py)."""
    add_pods(host, H100_PODS)
    s = scenario("h100x8-timesliced")
    s["init_error"] = pynvml.NVML_ERROR_NO_PERMISSION
    s.write()
    exp = in_process(NvmlSource(host.procfs, retry_s=1.0))
    watch = CounterWatch(exp)
    start = watch.next()
    for _ in range(3):
        host.add_energy_j("intel-rapl:0", STEP_J)
        samples = watch.next()
        assert source_up(samples, "nvml") == (0.0, "permission denied")
        assert source_up(samples, "rapl") == (1.0, "")
        assert source_up(samples, "procfs") == (1.0, "")
        assert not gpu_series(samples)
        assert exp.get("/healthz")[0] == 200
    rapl = node_energy(samples, "rapl", "intel-rapl:0") - node_energy(start, "rapl", "intel-rapl:0")
    assert abs(rapl - 3 * STEP_J) < EPS_J  # counted on while NVML was down
    del s["init_error"]
    s.write()
    up = wait_until(watch, lambda x: source_up(x, "nvml") == (1.0, ""), "nvml up", timeout=10)
    assert len(select(up, "wattprobe_gpu_info")) == 8
    before = watch.next()  # every GPU has its energy baseline
    s.add_energy_j(0, GPU_STEP_J)
    s.write()
    after = watch.next()
    assert abs(gpu_j(after, "0") - gpu_j(before, "0") - GPU_STEP_J) < EPS_J
    assert gpu_j(after, "1") == gpu_j(before, "1")


def start_serve(
    exporter: StartExporter, host: FixtureHost, env: dict[str, str], *args: str
) -> ExporterProcess:
    return exporter(*host.args(), "--interval", "0.3s", "--power.idle", "gpu=0", *args, env=env)


def test_every_call_not_supported(
    exporter: StartExporter, host: FixtureHost, tmp_path: Path, exporter_env: Env
) -> None:
    """A driver that answers NOT_SUPPORTED to everything but init and the device count: GPUs
    with no name, no power, no energy. Nothing is invented, each field is logged once."""
    s = Scenario(tmp_path / "bare.nvml", {"device_count": "2"})
    s.write()
    exp = start_serve(exporter, host, exporter_env(s))
    watch = CounterWatch(exp)
    watch.next()
    log_after_first = exp.log().count("not supported")
    for _ in range(4):
        host.add_energy_j("intel-rapl:0", STEP_J)
        samples = watch.next()
        assert source_up(samples, "nvml") == (1.0, "")  # NVML works; it has nothing to say
        assert source_up(samples, "rapl") == (1.0, "")
        assert len(select(samples, "wattprobe_gpu_info")) == 2
        assert not select(samples, "wattprobe_gpu_energy_joules_total")
        assert not select(samples, "wattprobe_gpu_power_watts")
    assert log_after_first > 0
    assert exp.log().count("not supported") == log_after_first  # once per field, not per read
    assert "Traceback" not in exp.log()


def test_xid_event_waits_failing(
    exporter: StartExporter, host: FixtureHost, h100: Scenario, exporter_env: Env
) -> None:
    exp = start_serve(exporter, host, exporter_env(h100))
    watch = CounterWatch(exp)
    wait_until(watch, lambda x: source_up(x, "nvml_xid") == (1.0, ""), "XID watch up")
    h100["event_wait_error"] = pynvml.NVML_ERROR_UNKNOWN
    h100.write()
    samples = wait_until(watch, lambda x: source_up(x, "nvml_xid")[0] == 0.0, "XID watch down")
    assert source_up(samples, "nvml_xid") == (0.0, "wait failed")
    h100.add_event(gpu=6, xid=48)  # raised while nobody can wait for it
    h100.write()
    for _ in range(4):
        h100.add_energy_j(1, GPU_STEP_J)
        h100.write()
        samples = watch.next()
        assert source_up(samples, "nvml") == (1.0, "")  # readings go on
        assert source_up(samples, "nvml_xid") == (0.0, "wait failed")
        assert not select(samples, "wattprobe_gpu_xid_errors_total", gpu="6")
    del h100["event_wait_error"]
    h100.write()
    samples = wait_until(
        watch,
        lambda x: bool(select(x, "wattprobe_gpu_xid_errors_total", gpu="6", xid="48")),
        "XID 48 counted",
    )
    assert source_up(samples, "nvml_xid") == (1.0, "")
    assert list(select(samples, "wattprobe_gpu_xid_errors_total", gpu="6").values()) == [1.0]
    log = exp.log()
    assert log.count("waiting for XID events: Unknown Error (logged once)") == 1, log
    assert "waiting for XID events works again" in log


def test_gpu_call_hanging_in_the_driver(
    exporter: StartExporter, host: FixtureHost, h100: Scenario, exporter_env: Env
) -> None:
    """Every call on GPU 3 stalls for 0.4 s: a read takes seconds. NVML times out and is not
    read again until that read returns; CPU power sources and /proc go on at every interval."""
    exp = start_serve(
        exporter, host, exporter_env(h100), "--interval", "0.5s", "--source.timeout", "0.3s"
    )
    watch = CounterWatch(exp)
    wait_until(watch, lambda x: source_up(x, "nvml") == (1.0, ""), "nvml up")
    start = watch.next()
    h100["gpu.3.delay_ms"] = 400
    h100.write()
    frozen = wait_until(watch, lambda x: source_up(x, "nvml")[0] == 0.0, "nvml timing out")
    reasons = []
    rapl_added = 0.0
    for _ in range(4):
        host.add_energy_j("intel-rapl:0", STEP_J)
        rapl_added += STEP_J
        h100.add_energy_j(0, GPU_STEP_J)
        h100.write()
        samples = watch.next(1)
        reasons.append(source_up(samples, "nvml"))
        assert source_up(samples, "rapl") == (1.0, "")
        assert source_up(samples, "procfs") == (1.0, "")
        assert gpu_j(samples, "0") == gpu_j(frozen, "0")  # frozen until NVML answers
        assert exp.get("/healthz")[0] == 200
    assert reasons[-1] == (0.0, "still busy"), reasons
    counted = node_energy(samples, "rapl", "intel-rapl:0") - node_energy(
        start, "rapl", "intel-rapl:0"
    )
    assert abs(counted - rapl_added) < EPS_J
    del h100["gpu.3.delay_ms"]
    h100.write()
    samples = wait_until(watch, lambda x: source_up(x, "nvml") == (1.0, ""), "nvml back")
    samples = watch.next()
    assert abs(gpu_j(samples, "0") - gpu_j(start, "0") - 4 * GPU_STEP_J) < EPS_J
    assert "source nvml: a read has not returned" in exp.log()
