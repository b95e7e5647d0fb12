"""A model of node power for nodes without a power sensor (VMs, most cloud instances).

The model comes from the node's instance type or CPU model in Boavizta's tables, with stated
fallbacks down to the Cloud Carbon Footprint averages (0.74 W idle, 3.5 W at full load, per vCPU):
exporter/sources/power/cpumodel/. CPU power follows the model's load curve at the node's CPU busy
fraction between two reads of /proc/stat; memory gets a `dram` zone from installed memory.
Readings are labelled source="estimated".

It is a power source like the others: each read integrates the model's power since the last
read into an energy counter per zone, and the zone's meter splits it with the model's own idle
power. It is a fallback (SPEC.fallback): the monitor reads it only until a measured source has
read, except its dram zone (SPEC.fills_zones), which goes on while no measured source has given a
dram zone: a node whose RAPL has package but no DRAM domain (most AMD CPUs), or whose hwmon has no
memory sensor, still gets its memory's power, labelled source="estimated".
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from exporter.host.procstat import read_cpu_times
from exporter.model.config import Config
from exporter.model.readings import CpuTimes, EnergyReading, SourceError
from exporter.model.snapshot import EstimateInfo
from exporter.model.spec import MOUNT_PROCFS, POWER, BuildContext, CheckResult, Finding, SourceSpec
from exporter.sources.power.cpumodel.lookup import AVERAGE, Estimate
from exporter.sources.power.cpumodel.node import NodeFacts, node_estimate, read_facts

# One name everywhere: the check entry, --collector.estimated and the source label of its readings
# (source="estimated" in /metrics, which alerts and dashboards match on). --collector.estimate, the
# flag's first name, stays as an alias.
ESTIMATED = "estimated"
IDLE_W_PER_CPU = 0.74
MAX_W_PER_CPU = 3.5


@dataclass(frozen=True, slots=True)
class CpuPowerModel:
    idle_w: float
    max_w: float
    estimate: Estimate | None = None  # None: the straight line between idle_w and max_w

    @classmethod
    def of(cls, estimate: Estimate) -> CpuPowerModel:
        return cls(idle_w=estimate.idle_w, max_w=estimate.max_w, estimate=estimate)

    @classmethod
    def for_cpus(
        cls, ncpu: int, idle_w: float | None = None, max_w: float | None = None
    ) -> CpuPowerModel:
        idle = IDLE_W_PER_CPU * ncpu if idle_w is None else idle_w
        peak = MAX_W_PER_CPU * ncpu if max_w is None else max_w
        return cls(idle_w=idle, max_w=max(peak, idle))

    def energy_j(self, busy_fraction: float, dt_s: float) -> tuple[float, float]:
        """(active, idle) joules over dt_s at the given mean CPU busy fraction."""
        u = min(max(busy_fraction, 0.0), 1.0)
        if self.estimate is not None:
            return (self.estimate.power(u) - self.idle_w) * dt_s, self.idle_w * dt_s
        return (self.max_w - self.idle_w) * u * dt_s, self.idle_w * dt_s

    @property
    def dram_idle_w(self) -> float | None:
        """The estimated memory's idle power; None without a memory model."""
        if self.estimate is None or self.estimate.dram is None:
            return None
        return self.estimate.dram_w(0.0)

    def dram_energy_j(self, busy_fraction: float, dt_s: float) -> tuple[float, float] | None:
        """(active, idle) joules of the estimated memory, None without a memory model."""
        idle = self.dram_idle_w
        if self.estimate is None or idle is None:
            return None
        u = min(max(busy_fraction, 0.0), 1.0)
        return (self.estimate.dram_w(u) - idle) * dt_s, idle * dt_s

    def info(self) -> EstimateInfo:
        est = self.estimate
        if est is None:  # CpuPowerModel.for_cpus: the per-CPU averages (or the flags)
            return EstimateInfo(cpu_model="", instance_type="", basis=AVERAGE)
        return EstimateInfo(est.cpu_model, est.instance_type, est.basis)


class NodeModels:
    """The node's model per CPU count (asked at every read; CPUs rarely change): the node's
    facts are read once, a model built once per CPU count."""

    def __init__(self, config: Config, facts: NodeFacts | None = None) -> None:
        self._config = config
        self._facts = facts
        self._models: dict[int, CpuPowerModel] = {}

    def __call__(self, ncpu: int) -> CpuPowerModel:
        model = self._models.get(ncpu)
        if model is None:
            model = self._models[ncpu] = CpuPowerModel.of(self.estimate(ncpu))
        return model

    def estimate(self, ncpu: int) -> Estimate:
        if self._facts is None:
            self._facts = read_facts(self._config.procfs, self._config.sysfs)
        c = self._config
        return node_estimate(
            self._facts, c.estimate_instance_type, ncpu, c.estimate_idle_w, c.estimate_max_w
        )


class EstimateSource:
    """The model's node power as energy counters (package and dram zones, source="estimated")."""

    name = ESTIMATED

    def __init__(
        self,
        cpu_times: Callable[[], CpuTimes],
        model: Callable[[int], CpuPowerModel],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._cpu_times = cpu_times
        self._model = model  # the model for a number of CPUs
        self._clock = clock
        self._last: tuple[CpuTimes, float] | None = None
        self._energy_uj = 0
        self._dram_uj = 0
        self._model_in_use: CpuPowerModel | None = None

    def read(self) -> list[EnergyReading]:
        cpu = self._cpu_times()  # a SourceError says why it cannot
        now = self._clock()
        model = self._model(cpu.ncpu)
        self._model_in_use = model
        if self._last is not None:
            before, then = self._last
            usage = cpu.busy_fraction_since(before)
            if usage is not None and now > then:
                active, idle = model.energy_j(usage, now - then)
                self._energy_uj += round((active + idle) * 1e6)
                dram = model.dram_energy_j(usage, now - then)
                if dram is not None:
                    self._dram_uj += round((dram[0] + dram[1]) * 1e6)
        self._last = (cpu, now)
        readings = [
            EnergyReading(
                zone="package",
                device="",
                source=ESTIMATED,
                energy_uj=self._energy_uj,
                idle_w=model.idle_w,
            )
        ]
        if model.dram_idle_w is not None:  # memory, attributed like RAPL's dram zone
            readings.append(
                EnergyReading(
                    zone="dram",
                    device="",
                    source=ESTIMATED,
                    energy_uj=self._dram_uj,
                    idle_w=model.dram_idle_w,
                )
            )
        return readings

    def estimate_info(self) -> EstimateInfo | None:
        """Where the model in use comes from (wattprobe_estimate_info); None before a read."""
        model = self._model_in_use
        return None if model is None else model.info()


def build(config: Config, _context: BuildContext) -> EstimateSource:
    return EstimateSource(
        partial(read_cpu_times, config.procfs),
        NodeModels(config),
    )


def probe(config: Config, earlier: Sequence[CheckResult], _context: BuildContext) -> Finding:
    try:
        cpu = read_cpu_times(config.procfs)
    except SourceError as exc:
        return Finding(False, reason="needs /proc/stat", detail=exc.detail, fix=MOUNT_PROCFS)
    est = NodeModels(config).estimate(cpu.ncpu)
    measured = [r for r in earlier if r.ok and r.kind == POWER]
    use = "standby: measured power is available" if measured else "in use: no power sensor found"
    dram = f", memory {est.dram_w(0.0):.3g} W idle" if est.dram is not None else ""
    if measured and dram:  # the per-zone fallback (SPEC.fills_zones): memory where none is measured
        fills = set(SPEC.fills_zones) - {z for r in measured for z in r.zones}
        dram += (
            " (in use: no measured source has a dram zone)"
            if fills
            else " (standby: a measured source has a dram zone)"
        )
    text = (
        f"{use}; basis {est.basis} ({est.detail}): CPU {est.idle_w:.3g} W idle .. "
        f"{est.max_w:.3g} W busy{dram}"
    )
    better = () if measured else (*est.hints, *_BETTER)
    return Finding.works(text, items=[f"to improve: {b}" for b in better])


# what makes any estimate better, said after the basis-specific hints
_BETTER = (
    "a node with RAPL or hwmon power sensors measures instead of estimating",
    "--estimate.idle-watts/--estimate.max-watts from a measurement of this instance type",
)


SPEC = SourceSpec(
    name=ESTIMATED,
    kind=POWER,
    default_on=True,
    probe=probe,
    build=build,
    fallback=True,  # read only until a measured power source has read,
    fills_zones=("dram",),  # except memory, for as long as no measured source has a dram zone
    flag_aliases=("estimate",),
    workload_zones=(("package", "dram"),),  # CPU and memory, split like RAPL's
)
