"""The whole path from files to counters, under hostile readings (issue 15).

A stateful property test: RAPL zones and hwmon sensors are fixture files that the real sources
read, GPUs come from a GPU backend with the same hostile repertoire; each interval every device
gets a good reading or something else (garbage, empty, negative, huge, NaN, a reset, a wrap, a
vanished file), the monitor steps, and the exposition is rendered as Prometheus would scrape it.
Whatever comes: no device's energy exceeds what it can draw over the time that passed, no counter
decreases, the attribution sums hold, and every hostile reading shows on wattprobe_device_up.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from prometheus_client import CollectorRegistry, generate_latest

from exporter.accounting.meter import MAX_PLAUSIBLE_POWER_W
from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.exposition.collector import SnapshotCollector
from exporter.model.config import IdlePower
from exporter.model.gpu_readings import GpuReading, GpuReadings
from exporter.model.readings import CpuTimes, TaskSample
from exporter.sources.power.hwmon import HwmonSource
from exporter.sources.power.rapl import RAPL_MAX_POWER_W, RaplSource
from tests.support.fixturehost import FixtureHost, write_atomic
from tests.support.invariants import check_exposition
from tests.support.monitor import monitor_settings
from tests.support.paths import FIXTURES
from tests.support.props import PROPERTY
from tests.support.running import Samples, parse_samples, select

RAPL = ("intel-rapl:0", "intel-rapl:1")
RAPL_RANGE = 262_143_328_850
POWER_METER = ("hwmon1", "power1_input", "ACPI000D:00")  # a power sensor
I915 = ("hwmon3", "energy1_input", "0000:00:02.0")  # an energy counter
GPU_LIMIT_W = 700.0
POD = "5f1c3e2a-8b4d-4c6e-9f0a-1b2c3d4e5f60"
CGROUP = (
    "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
    f"{POD.replace('-', '_')}.slice/cri-containerd-{'a' * 64}.scope\n"
)

GOOD, GARBAGE, EMPTY, NEGATIVE, HUGE, NAN, RESET, ALSO_GOOD, VANISH = range(9)
GOODS = {GOOD, ALSO_GOOD}
HOSTILE = {GARBAGE, EMPTY, NEGATIVE, HUGE, NAN, RESET}
TEXT = {GARBAGE: "12ab\n", EMPTY: "", NEGATIVE: "-5000000\n", NAN: "nan\n", HUGE: "9" * 400 + "\n"}
kinds = st.integers(0, 8)


class Node:
    """The fake CPU and activity parts around the real RAPL and hwmon sources."""

    name = "procfs"

    def __init__(self) -> None:
        self.busy = 100.0
        self.cpu_s = 0.0

    def cpu_times(self) -> CpuTimes:
        return CpuTimes(self.busy, 1000.0, 4)

    def tasks(self) -> list[TaskSample]:
        return [TaskSample((42, 1), 42, "trainer", CGROUP, False, self.cpu_s)]


class Gpus:
    """A GPU device backend handing out whatever the test set."""

    name = "nvml"

    def __init__(self) -> None:
        self.gpus: list[GpuReading] = []

    def read(self) -> GpuReadings:
        return GpuReadings("550.54.15", "12.550", "12.4", tuple(self.gpus))

    def close(self) -> None:
        pass


class Pipeline(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="wp-pipeline-"))
        self.host = FixtureHost.copy_of(FIXTURES, self.tmp / "host")
        self.node = Node()
        self.now = 1000.0
        self.dt = 0.0
        self.elapsed = 0.0
        # near the end of their range, so that ordinary intervals wrap them
        for device in RAPL:
            self.host.set_energy_uj(device, RAPL_RANGE - 5 * 10**9)
        self.rapl_uj = {d: self.host.energy_uj(d) for d in RAPL}
        self.i915_uj = int(self.host.hwmon_file(*I915[:2]).read_text())
        self.gpu_mj = [10**9, 2 * 10**9]
        self.gpus = Gpus()
        self.monitor = Monitor(
            MonitorParts(
                cpu=self.node,
                activity=self.node,
                power=[RaplSource(self.host.sysfs), HwmonSource(self.host.sysfs)],
                gpus=[self.gpus] if self.gpus is not None else [],
            ),
            monitor_settings(idle_power=IdlePower()),
            clock=lambda: self.now,
            wall_clock=lambda: self.now,
        )
        self.registry = CollectorRegistry()
        self.registry.register(SnapshotCollector(lambda: self.monitor.snapshot))
        self.last: Samples = {}
        # (source, device) given a bad reading now, and those readings that look good at first
        # sight (a reset value is a plausible first reading: only a baseline shows it is not)
        self.hostile: set[tuple[str, str]] = set()
        self.ambiguous: set[tuple[str, str]] = set()
        self.previous_kind: dict[tuple[str, str], int] = {}
        self.samples: Samples = {}

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    @rule(
        dt=st.floats(0.05, 30.0),
        watts=st.floats(0.0, 300.0),
        rapl=st.tuples(kinds, kinds),
        meter=kinds,
        i915=kinds,
        gpus=st.tuples(kinds, kinds),
    )
    def interval(
        self,
        *,
        dt: float,
        watts: float,
        rapl: tuple[int, int],
        meter: int,
        i915: int,
        gpus: tuple[int, int],
    ) -> None:
        self.now += dt
        self.dt = dt
        self.elapsed += dt
        self.node.busy += 4 * dt * 0.5
        self.node.cpu_s += 4 * dt * 0.5
        self.hostile = set()
        self.ambiguous = set()
        for device, kind in zip(RAPL, rapl, strict=True):
            self._counter(("rapl", device), self.host.rapl_dir(device) / "energy_uj", kind, watts)
        self._power(meter, watts)
        self._i915(i915, watts)
        self.gpus.gpus = [g for i, k in enumerate(gpus) if (g := self._gpu(i, k, watts, dt))]
        self.monitor.step()
        body = generate_latest(self.registry).decode()
        self.samples = parse_samples(body)

    def _counter(self, device: tuple[str, str], path: Path, kind: int, watts: float) -> None:
        previous, self.previous_kind[device] = self.previous_kind.get(device), kind
        before = self.rapl_uj[device[1]]
        true = (before + int(watts * self.dt * 1e6)) % RAPL_RANGE
        if kind == RESET:
            true = before // 2  # below the last reading: a driver reload, not a step forward
            self.hostile.add(device)
            if previous not in GOODS or not 10**9 < before < RAPL_RANGE // 2:
                # judged against an older baseline or candidate, or from near the end of the
                # range, a lower value can be a plausible wrap or an earlier reset going on
                self.ambiguous.add(device)
        elif kind in TEXT:
            write_atomic(path, TEXT[kind])
            self.hostile.add(device)
            self.rapl_uj[device[1]] = true
            return
        if kind == VANISH:
            # the zone is gone (hot-unplugged, like an hwmon chip): no reading, not a fault;
            # its meter keeps its baseline and counts the gap if the zone comes back
            path.unlink(missing_ok=True)
        else:
            write_atomic(path, f"{true}\n")
        self.rapl_uj[device[1]] = true

    def _power(self, kind: int, watts: float) -> None:
        path = self.host.hwmon_file(*POWER_METER[:2])
        if kind in TEXT:
            write_atomic(path, TEXT[kind])
            self.hostile.add(("hwmon", POWER_METER[2]))
        else:
            write_atomic(path, f"{int(watts * 1e6)}\n")

    def _i915(self, kind: int, watts: float) -> None:
        path = self.host.hwmon_file(*I915[:2])
        self.i915_uj += int(watts * self.dt * 1e6)
        if kind in TEXT:
            write_atomic(path, TEXT[kind])
            self.hostile.add(("hwmon", I915[2]))
        else:
            write_atomic(path, f"{self.i915_uj}\n")

    def _gpu(self, index: int, kind: int, watts: float, dt: float) -> GpuReading | None:
        gpu = ("nvml", str(index))
        previous, self.previous_kind[gpu] = self.previous_kind.get(gpu), kind
        if kind == VANISH:
            return None
        before = self.gpu_mj[index]
        self.gpu_mj[index] += int(watts * dt * 1000)
        energy: int | None = self.gpu_mj[index]
        power: float | None = watts
        if kind in (GARBAGE, EMPTY):
            energy = power = None
        elif kind == NEGATIVE:
            power = -5.0
            energy = None
        elif kind == NAN:
            power, energy = math.nan, None
        elif kind == HUGE:
            energy = 2**62
        elif kind == RESET:
            energy = self.gpu_mj[index] = before // 2
            if previous not in GOODS or before < 10**7:
                self.ambiguous.add(gpu)  # as for RAPL zones
        if kind in HOSTILE:
            self.hostile.add(("nvml", str(index)))
        return GpuReading(
            index,
            f"GPU-{index:08d}-0000-0000-0000-000000000000",
            "H100",
            f"00000000:{index + 1:02X}:00.0",
            utilization_ratio=0.5,
            power_w=power,
            power_limit_w=GPU_LIMIT_W,
            energy_mj=energy,
        )

    @invariant()
    def counters_never_decrease(self) -> None:
        for key, value in self.samples.items():
            if key[0].endswith("_total"):
                assert not math.isnan(value), key
            if key[0].endswith("_total") and key in self.last:
                assert value >= self.last[key] - 1e-9, f"{key}: {self.last[key]} -> {value}"
        self.last = self.samples

    @invariant()
    def no_device_draws_more_than_it_can(self) -> None:
        for labels, joules in _by_device(self.samples, "wattprobe_node_energy_joules_total"):
            bound = RAPL_MAX_POWER_W if labels["source"] == "rapl" else MAX_PLAUSIBLE_POWER_W
            assert joules <= bound * self.elapsed * (1 + 1e-9) + 1e-6, labels
        for labels, joules in _by_device(self.samples, "wattprobe_gpu_energy_joules_total"):
            assert joules <= 2 * GPU_LIMIT_W * self.elapsed * (1 + 1e-9) + 1e-6, labels

    @invariant()
    def sums_hold(self) -> None:
        if self.samples:
            check_exposition(self.samples)

    @invariant()
    def every_hostile_reading_is_visible(self) -> None:
        up = {
            (dict(k)["source"], dict(k)["device"]): v
            for k, v in select(self.samples, "wattprobe_device_up").items()
        }
        for device in self.hostile:
            if device in self.ambiguous:
                continue
            assert up.get(device) == 0.0, (device, up)


def _by_device(samples: Samples, name: str) -> Sequence[tuple[dict[str, str], float]]:
    totals: dict[tuple[tuple[str, str], ...], float] = {}
    for key, value in select(samples, name).items():
        labels = {k: v for k, v in dict(key).items() if k != "mode"}
        ident = tuple(sorted(labels.items()))
        totals[ident] = totals.get(ident, 0.0) + value
    return [(dict(k), v) for k, v in totals.items()]


TestPipeline = Pipeline.TestCase
TestPipeline.settings = settings(
    PROPERTY, max_examples=max(20, PROPERTY.max_examples // 10), stateful_step_count=25
)
