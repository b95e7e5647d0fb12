"""A model of node power for nodes without a power sensor (VMs, most cloud instances).

The model comes from the node's instance type or CPU model in Boavizta's tables, with stated
fallbacks down to Cloud Carbon Footprint's averages (0.74 W idle, 3.5 W at full load, per vCPU):
exporter/sources/cpumodel/. CPU power follows the model's load curve at the node's CPU busy
fraction; memory gets a `dram` zone from installed memory. Readings are labelled
source="estimated".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from exporter.config import Config
from exporter.readings import SourceError
from exporter.sources.cpumodel.lookup import Estimate
from exporter.sources.cpumodel.node import NodeFacts, node_estimate, read_facts
from exporter.sources.procfs.source import FIXES as PROCFS_FIXES
from exporter.sources.procfs.source import ProcfsSource
from exporter.sourcespec import POWER, CheckResult, Finding, SourceSpec

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

    def dram_energy_j(self, busy_fraction: float, dt_s: float) -> tuple[float, float] | None:
        """(active, idle) joules of the estimated memory, None without a memory model."""
        if self.estimate is None or self.estimate.dram is None:
            return None
        u = min(max(busy_fraction, 0.0), 1.0)
        idle = self.estimate.dram_w(0.0)
        return (self.estimate.dram_w(u) - idle) * dt_s, idle * dt_s


class NodeModels:
    """The node's model per CPU count (the monitor asks every interval; CPUs rarely change):
    the node's facts are read once, the model built once per CPU count."""

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


def probe(config: Config, earlier: Sequence[CheckResult]) -> Finding:
    try:
        cpu = ProcfsSource(config.procfs).cpu_times()
    except SourceError as exc:
        return Finding(
            False, reason="needs /proc/stat", detail=exc.detail, fix=PROCFS_FIXES["read error"]
        )
    est = NodeModels(config).estimate(cpu.ncpu)
    measured = any(r.ok for r in earlier if r.kind == POWER)
    use = "standby: measured power is available" if measured else "in use: no power sensor found"
    dram = f", memory {est.dram_w(0.0):.3g} W idle" if est.dram is not None else ""
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


# Not read like the others: the monitor applies the model to /proc/stat (exporter/wiring.py).
SPEC = SourceSpec(
    name=ESTIMATED,
    kind=POWER,
    default_on=True,
    probe=probe,
    flag_aliases=("estimate",),
    workload_zones=(("package", "dram"),),  # CPU and memory, split like RAPL's
)
