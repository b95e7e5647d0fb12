"""The GPUs of the live fleet (tests/support/livestack.py): the fake NVML on two of its nodes.

- node "gpu": 8 x H100 (tests/fixtures/nvml/h100x8-timesliced.nvml), the scenario's pods in its
  /proc (tests/sources/gpu/nvml/pods.py), set up so that each GPU alert has a case:
    GPU 0 at 87 °C: WattprobeGpuTemperatureHigh, warning tier only;
    GPU 1 as in the fixture, 97 % busy at 640 of 700 W: WattprobeGpuHighUtilization and
      WattprobeGpuPowerNearLimit;
    GPU 3 at 92 °C: WattprobeGpuTemperatureHigh, warning and critical tiers;
  and, a few seconds into the run (inject_faults), GPU 2 reports XID 13 (an application fault:
  shown, but no alert) and GPU 5 reports XID 79 and falls off the bus (lost):
  WattprobeGpuXidError and WattprobeGpuLost.
- node "sensorless": an A100 in MIG mode (tests/fixtures/nvml/a100-mig.nvml), as in a GPU VM
  without RAPL or hwmon; its 1g.5gb instance GI 13 is 97 % full: WattprobeGpuMemoryNearlyFull
  for that MIG instance.

Every GPU's energy counter advances by its power times the real time elapsed, so the rate of
wattprobe_gpu_energy_joules_total matches wattprobe_gpu_power_watts however the advancing
thread is scheduled.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.sources.gpu.nvml.build import build_fake_nvml
from tests.sources.gpu.nvml.pods import H100_PODS, MIG_PODS, GpuPod, add_pods
from tests.sources.gpu.nvml.scenario import Scenario
from tests.support.fixturehost import FixtureHost

HOT_GPU = 0  # warning tier
HOTTER_GPU = 3  # both tiers
BUSY_GPU = 1  # the fixture's 97 % utilization, 640 of 700 W
APP_FAULT = (2, 13)  # (GPU, XID): not a critical XID
OFF_THE_BUS = (5, 79)  # (GPU, XID): then lost
FULL_MIG = 2  # the fixture's MIG device 2: 1g.5gb, GPU instance 13
CRITICAL = {HOT_GPU: 87, HOTTER_GPU: 92}  # °C


@dataclass
class FakeGpus:
    """One node's scenario for the fake libnvidia-ml.so.1, advanced from another thread."""

    scenario: Scenario
    library_dir: Path
    pods: tuple[GpuPod, ...]
    lock: threading.Lock = field(default_factory=threading.Lock)
    last: float = field(default_factory=time.monotonic)

    def env(self) -> dict[str, str]:
        return {"LD_LIBRARY_PATH": str(self.library_dir), **self.scenario.env()}

    def lost(self, gpu: int) -> bool:
        return self.scenario.values.get(f"gpu.{gpu}.lost", "0") == "1"

    def advance(self) -> None:
        """Every GPU that answers gains its power times the time since the last call."""
        with self.lock:
            now = time.monotonic()
            elapsed, self.last = now - self.last, now
            for gpu in range(self.scenario.gpu_count()):
                if not self.lost(gpu):
                    watts = self.scenario.number(f"gpu.{gpu}.power_mw") / 1000
                    self.scenario.add_energy_j(gpu, watts * elapsed)
            self.scenario.write()

    def raise_xid(self, gpu: int, xid: int, *, lose: bool = False) -> None:
        with self.lock:
            self.scenario.add_event(gpu, xid)
            if lose:
                self.scenario[f"gpu.{gpu}.lost"] = 1
            self.scenario.write()

    def uuid(self, gpu: int) -> str:
        return self.scenario[f"gpu.{gpu}.uuid"]


def build_library(workdir: Path, gcc: str) -> Path:
    return build_fake_nvml(workdir / "fake-nvml", gcc)


def h100_node(host: FixtureHost, library_dir: Path) -> FakeGpus:
    add_pods(host, H100_PODS)
    scenario = Scenario.from_fixture("h100x8-timesliced", host.root / "h100.nvml")
    for gpu, celsius in CRITICAL.items():
        scenario[f"gpu.{gpu}.temperature"] = celsius
    scenario.write()
    return FakeGpus(scenario, library_dir, H100_PODS)


def mig_node(host: FixtureHost, library_dir: Path) -> FakeGpus:
    add_pods(host, MIG_PODS)
    scenario = Scenario.from_fixture("a100-mig", host.root / "a100-mig.nvml")
    full = f"gpu.0.mig.{FULL_MIG}.memory."
    before = scenario.number(full + "used")
    after = scenario.number(full + "total") * 97 // 100
    scenario[full + "used"] = after
    scenario.add("gpu.0.memory.used", after - before)  # the whole GPU holds it too
    scenario.write()
    return FakeGpus(scenario, library_dir, MIG_PODS)


def inject_faults(gpus: FakeGpus) -> None:
    """The faults of the H100 node that happen during the run (see the module docstring)."""
    gpus.raise_xid(*APP_FAULT)
    gpus.raise_xid(*OFF_THE_BUS, lose=True)
