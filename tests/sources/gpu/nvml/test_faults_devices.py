"""Hostile NVML values per GPU, through the real binding and the fake libnvidia-ml.

NVML is a binary API: no NaN or text, but a counter can jump absurdly, read 2**64-1 (a negative
number seen unsigned), go back (a reset), a power reading can be absurd, a call can fail and a
GPU can be lost. Each example breaks any set of the 8 GPUs, each its own way, one step of the
monitor on a fake clock; the property: each broken GPU is device_up 0 with one more rejection of
the expected reason and counts nothing, every other GPU is up, with no rejection, and counts
exactly what its counter advanced; all are up again once the values are good.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.model.config import IdlePower
from exporter.model.gpu_readings import GpuReadings
from exporter.model.health import IMPLAUSIBLE, RESET, UNREADABLE
from exporter.model.snapshot import Snapshot
from exporter.sources.gpu.nvml.source import NvmlSource
from tests.sources.gpu.nvml.conftest import LoadScenario
from tests.sources.gpu.nvml.scenario import Scenario
from tests.sources.gpu.nvml.scripted import StaticActivity, StaticCpu, gpu_reading
from tests.support.monitor import monitor_settings

GPUS = 8
STEP_MJ = 300_000  # 300 J in one second: inside an H100's 700 W limit

Fault = Callable[[Scenario, int], None]


def _energy(s: Scenario, i: int) -> int:
    return int(s[f"gpu.{i}.energy_mj"])


def _failing(s: Scenario, i: int) -> None:
    """The energy and power calls fail (NVML_ERROR_UNKNOWN)."""
    s[f"gpu.{i}.error.energy"] = 999
    s[f"gpu.{i}.error.power"] = 999


FAULTS: dict[str, tuple[Fault, str]] = {
    # 10^9 J in a second: no GPU draws that
    "jump": (lambda s, i: s.__setitem__(f"gpu.{i}.energy_mj", _energy(s, i) + 10**12), IMPLAUSIBLE),
    # -1 as NVML's unsigned long long: beyond any counter's range once in microjoules
    "u64max": (lambda s, i: s.__setitem__(f"gpu.{i}.energy_mj", 2**64 - 1), IMPLAUSIBLE),
    # 1 MW against a 700 W limit
    "power": (lambda s, i: s.__setitem__(f"gpu.{i}.power_mw", 10**9), IMPLAUSIBLE),
    # the counter restarted (a driver reload)
    "reset": (lambda s, i: s.__setitem__(f"gpu.{i}.energy_mj", 1000), RESET),
    "failing": (_failing, UNREADABLE),
    "lost": (lambda s, i: s.__setitem__(f"gpu.{i}.lost", 1), UNREADABLE),
}


def health(snap: Snapshot) -> dict[str, tuple[bool, dict[str, int]]]:
    return {d.device: (d.meter.up, dict(d.meter.rejected)) for d in snap.devices if d.zone == "gpu"}


def counted(snap: Snapshot) -> dict[str, float]:
    return {str(g.index): sum(e.joules for e in g.energy) for g in snap.gpus}


@pytest.mark.slow
@settings(
    deadline=None,
    max_examples=12,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.dictionaries(
        st.integers(0, GPUS - 1), st.sampled_from(sorted(FAULTS)), min_size=1, max_size=GPUS
    )
)
def test_each_hostile_nvml_value_shows_on_its_gpu_only(
    scenario: LoadScenario, tmp_path: Path, faults: dict[int, str]
) -> None:
    s = scenario("h100x8-timesliced")
    clock = [0.0]
    nvml = NvmlSource(tmp_path, retry_s=60.0, clock=lambda: clock[0])
    monitor = Monitor(
        MonitorParts(
            cpu=StaticCpu(),
            activity=StaticActivity([]),
            power=[],
            gpus=[nvml],
        ),
        monitor_settings(idle_power=IdlePower(default_w=0.0)),
        clock=lambda: clock[0],
        wall_clock=lambda: clock[0],
    )

    def step(skip: frozenset[int] = frozenset()) -> Snapshot:
        clock[0] += 1.0
        for i in range(GPUS):
            if i not in skip:
                s[f"gpu.{i}.energy_mj"] = _energy(s, i) + STEP_MJ
        s.write()
        return monitor.step()

    try:
        step()
        before_snap = step()
        before, start = health(before_snap), counted(before_snap)
        assert len(before) == GPUS and all(up for up, _ in before.values()), before
        saved = dict(s.values)
        for i, fault in faults.items():
            FAULTS[fault][0](s, i)
        snap = step(skip=frozenset(faults))
        after, now = health(snap), counted(snap)
        for i in range(GPUS):
            up, rejected = after[str(i)]
            was = before[str(i)][1]
            if i in faults:
                reason = FAULTS[faults[i]][1]
                assert not up, (i, faults)
                assert rejected.get(reason, 0) == was.get(reason, 0) + 1, (i, faults, rejected)
                assert now[str(i)] == start[str(i)], (i, faults)
            else:
                assert up, (i, faults, after[str(i)])
                assert rejected == was, (i, rejected)
                assert abs(now[str(i)] - start[str(i)] - STEP_MJ / 1000) < 1e-6, i
        # good values again (the counters where they were, moved on): every GPU up again
        s.values.clear()
        s.values.update(saved)
        step()
        final = step()
        assert all(up for up, _ in health(final).values()), health(final)
    finally:
        monitor.close()
        nvml.close()


class StuckGpus:
    """A GPU backend whose read hangs in the driver while `hang` is set (NVML calls can)."""

    name = "nvml"

    def __init__(self) -> None:
        self.hang = threading.Event()
        self.release = threading.Event()

    def read(self) -> GpuReadings:
        if self.hang.is_set():
            self.release.wait(30)
        # power only: the monitor's real clock gives intervals of milliseconds here
        gpus = tuple(gpu_reading(i, None, power_w=100.0) for i in range(2))
        return GpuReadings("550.54.15", "12.550.54.15", "12.4", gpus)

    def close(self) -> None:
        pass


def test_a_gpu_backend_stuck_in_a_read_marks_each_gpu_down() -> None:
    gpus = StuckGpus()
    monitor = Monitor(
        MonitorParts(
            cpu=StaticCpu(),
            activity=StaticActivity([]),
            power=[],
            gpus=[gpus],
        ),
        monitor_settings(idle_power=IdlePower(default_w=0.0), read_timeout_s=0.2),
    )
    try:
        monitor.step()
        assert all(up for up, _ in health(monitor.step()).values())
        gpus.hang.set()
        for i in range(1, 4):
            snap = monitor.step()
            assert health(snap) == {"0": (False, {UNREADABLE: i}), "1": (False, {UNREADABLE: i})}
        gpus.hang.clear()
        gpus.release.set()
        for _ in range(3):
            snap = monitor.step()
        assert all(up for up, _ in health(snap).values()), health(snap)
    finally:
        gpus.release.set()
        monitor.close()
