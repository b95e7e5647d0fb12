"""A model of node CPU power for nodes without a power sensor (VMs, most cloud instances).

P = P_idle + (P_max - P_idle) * u, with u the node's CPU busy fraction over the interval.
The default coefficients are the Cloud Carbon Footprint project's averages for cloud vCPUs
(0.74 W idle, 3.5 W at full load, per vCPU). Readings are labelled source="estimated".
"""

from __future__ import annotations

from dataclasses import dataclass

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
