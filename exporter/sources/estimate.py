"""A model of node CPU power for nodes without a power sensor (VMs, most cloud instances).

P = P_idle + (P_max - P_idle) * u, with u the node's CPU busy fraction over the interval.
The default coefficients are the Cloud Carbon Footprint project's averages for cloud vCPUs
(0.74 W idle, 3.5 W at full load, per vCPU). Readings are labelled source="estimated".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from exporter.config import Config
from exporter.readings import SourceError
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
        return (self.max_w - self.idle_w) * u * dt_s, self.idle_w * dt_s


def probe(config: Config, earlier: Sequence[CheckResult]) -> Finding:
    try:
        cpu = ProcfsSource(config.procfs).cpu_times()
    except SourceError as exc:
        return Finding(
            False, reason="needs /proc/stat", detail=exc.detail, fix=PROCFS_FIXES["read error"]
        )
    model = CpuPowerModel.for_cpus(cpu.ncpu, config.estimate_idle_w, config.estimate_max_w)
    measured = any(r.ok for r in earlier if r.kind == POWER)
    use = "standby: measured power is available" if measured else "in use: no power sensor found"
    return Finding.works(f"{use}; model {model.idle_w:g} W idle .. {model.max_w:g} W busy")


# Not read like the others: the monitor applies the model to /proc/stat (exporter/wiring.py).
SPEC = SourceSpec(
    name=ESTIMATED,
    kind=POWER,
    default_on=True,
    probe=probe,
    flag_aliases=("estimate",),
    workload_zones=(("package",),),  # the model estimates the package alone
)
