"""A source whose read blocks, against a running `wattprobe serve`.

A FIFO no longer blocks anything (host files are opened non-blocking and a FIFO is refused:
tests/host/test_hostfile.py), but a wedged sysfs attribute or /proc behind a frozen process
still can. So the exporter under test loads tests/support/stuckread/sitecustomize.py, which
holds the open of one RAPL energy_uj until the test releases it. The exporter keeps its pace
(one interval per tick), the other sources count on, RAPL reports "timeout" then "still busy",
and when the read returns every joule the counters advanced is counted exactly once.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.faults_support import EPS_J, CounterWatch, node_energy, source_up
from tests.support.fixturehost import FixtureHost, write_atomic
from tests.support.paths import REPO
from tests.support.running import ExporterProcess, Samples, select, start_exporter, stop_process

INTERVAL_S = 0.5
TIMEOUT_S = 0.3
ARGS = ["--interval", f"{INTERVAL_S}s", "--source.timeout", f"{TIMEOUT_S}s"]
STEP_J = 5.0
HWMON_ENERGY = ("hwmon3", "energy1_input")
HWMON_DEVICE = "0000:00:02.0"
STUCK = "intel-rapl:0"  # the first MSR zone read: the whole RAPL read waits on it


def rapl_devices(host: FixtureHost) -> list[str]:
    powercap = host.sysfs / "class" / "powercap"
    return sorted(
        d.name
        for d in powercap.iterdir()
        if ":" in d.name and "mmio" not in d.name and (d / "energy_uj").exists()
    )


def intervals(samples: Samples) -> float:
    return next(iter(select(samples, "wattprobe_intervals_total").values()))


STUCK_READ = REPO / "tests" / "support" / "stuckread"


def stuck_env(tmp_path: Path) -> dict[str, str]:
    """Environment for an exporter whose reads Stuck can hold (tests/support/stuckread)."""
    path = os.environ.get("PYTHONPATH", "")
    return {
        "PYTHONPATH": f"{STUCK_READ}{os.pathsep}{path}" if path else str(STUCK_READ),
        "WATTPROBE_TEST_STUCK_DIR": str(tmp_path),
    }


class Stuck:
    """The next open of a zone's energy_uj hangs until release()."""

    def __init__(self, host: FixtureHost, device: str, control: Path) -> None:
        self.path = host.rapl_dir(device) / "energy_uj"
        self.value_uj = int(self.path.read_text())
        self.marker = control / "stuck"
        write_atomic(self.marker, str(self.path))

    def release(self, value_uj: int) -> None:
        """The held read goes on, and reads this value."""
        write_atomic(self.path, f"{value_uj}\n")
        self.marker.unlink()


@pytest.fixture
def exporter_on(host: FixtureHost, tmp_path: Path) -> Iterator[ExporterProcess]:
    proc = start_exporter([*host.args(), *ARGS], log_dir=tmp_path, env=stuck_env(tmp_path))
    try:
        yield proc
    finally:
        proc.stop()


def test_blocked_read_keeps_the_pace_and_loses_nothing(
    host: FixtureHost, exporter_on: ExporterProcess, tmp_path: Path
) -> None:
    exp = exporter_on
    watch = CounterWatch(exp)
    devices = rapl_devices(host)
    start = watch.next()
    added = dict.fromkeys(devices, 0.0)
    hwmon_added = 0.0

    def advance() -> None:
        nonlocal hwmon_added
        for device in devices:
            if device == STUCK:
                continue  # its value is what release() hands over
            host.add_energy_j(device, STEP_J)
            added[device] += STEP_J
        host.add_hwmon_energy_j(*HWMON_ENERGY, STEP_J)
        hwmon_added += STEP_J

    def hwmon_counted(samples: Samples) -> float:
        return node_energy(samples, "hwmon", HWMON_DEVICE) - node_energy(
            start, "hwmon", HWMON_DEVICE
        )

    advance()
    frozen = watch.next()
    stuck = Stuck(host, STUCK, tmp_path)
    began = time.monotonic()
    first_interval = intervals(frozen)
    reasons = []
    for _ in range(6):
        advance()
        samples = watch.next(1)
        reasons.append(source_up(samples, "rapl"))
        assert source_up(samples, "hwmon") == (1.0, "")
        assert source_up(samples, "procfs") == (1.0, "")
        assert abs(hwmon_counted(samples) - hwmon_added) < EPS_J  # counting on, on time
        for device in devices:  # the stuck read's zones are frozen, not zeroed or dropped
            assert node_energy(samples, "rapl", device) == node_energy(frozen, "rapl", device)
        assert exp.get("/healthz")[0] == 200
    assert (0.0, "timeout") in reasons[:2], reasons
    assert reasons[-1] == (0.0, "still busy"), reasons
    # every zone the stuck read did not read is down, each with a rejection counted
    rapl_up = select(samples, "wattprobe_device_up", source="rapl")
    assert len(rapl_up) == len(devices) and set(rapl_up.values()) == {0.0}, rapl_up
    rejected = select(samples, "wattprobe_device_rejected_readings_total", source="rapl")
    assert {dict(k)["device"] for k, v in rejected.items() if v >= 4} == set(devices), rejected
    assert all(r[0] == 0.0 for r in reasons[1:]), reasons
    # the loop kept its pace while the read hung: an interval per tick, none skipped
    elapsed = time.monotonic() - began
    done = intervals(samples) - first_interval
    assert done >= elapsed / INTERVAL_S - 2, (done, elapsed)
    log = exp.log()
    assert log.count("source rapl: a read has not returned") == 1, log

    stuck_added = 3 * STEP_J  # drawn while the read hung; the counter shows it when it answers
    added[STUCK] = stuck_added
    stuck.release(stuck.value_uj + round(stuck_added * 1e6))
    samples = watch.next(3)
    assert source_up(samples, "rapl") == (1.0, "")
    assert set(select(samples, "wattprobe_device_up", source="rapl").values()) == {1.0}
    advance()
    samples = watch.next()
    for device in devices:
        counted = node_energy(samples, "rapl", device) - node_energy(start, "rapl", device)
        assert abs(counted - added[device]) < EPS_J, (device, counted, added[device])
    assert abs(hwmon_counted(samples) - hwmon_added) < EPS_J
    assert "source rapl answers in time again" in exp.log()
    assert "Traceback" not in exp.log()


def test_shutdown_is_not_held_by_a_read_that_never_returns(
    host: FixtureHost, tmp_path: Path
) -> None:
    exp = start_exporter([*host.args(), *ARGS], log_dir=tmp_path, env=stuck_env(tmp_path))
    try:
        watch = CounterWatch(exp)
        watch.next()
        Stuck(host, STUCK, tmp_path)
        samples = watch.next(3)
        assert source_up(samples, "rapl") == (0.0, "still busy")
        started = time.monotonic()
        stop_process(exp.proc, timeout=15)
        took = time.monotonic() - started
    finally:
        exp.stop()
    assert exp.proc.returncode == 0, exp.log()
    assert took < 5.0, took
    assert "its read is still running at shutdown" in exp.log()
