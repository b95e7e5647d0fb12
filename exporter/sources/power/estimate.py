"""A model of node CPU power for nodes without a power sensor (VMs, most cloud instances).

P = P_idle + (P_max - P_idle) * u, with u the node's CPU busy fraction between two reads of
/proc/stat. The default coefficients are the Cloud Carbon Footprint project's averages for cloud
vCPUs (0.74 W idle, 3.5 W at full load, per vCPU). Readings are labelled source="estimated".

It is a power source like the others: each read integrates the model's power since the last
read into an energy counter, and the zone's meter splits it with the model's own idle power.
It is a fallback (SPEC.fallback): the monitor reads it only until a measured source has read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

from exporter.host.procstat import read_cpu_times
from exporter.model.config import Config
from exporter.model.readings import CpuTimes, EnergyReading, SourceError
from exporter.model.spec import MOUNT_PROCFS, POWER, BuildContext, CheckResult, Finding, SourceSpec

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


class EstimateSource:
    """The model's node CPU power as an energy counter (package zone, source="estimated")."""

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

    def read(self) -> list[EnergyReading]:
        cpu = self._cpu_times()  # a SourceError says why it cannot
        now = self._clock()
        model = self._model(cpu.ncpu)
        if self._last is not None:
            before, then = self._last
            usage = cpu.busy_fraction_since(before)
            if usage is not None and now > then:
                active, idle = model.energy_j(usage, now - then)
                self._energy_uj += round((active + idle) * 1e6)
        self._last = (cpu, now)
        return [
            EnergyReading(
                zone="package",
                device="",
                source=ESTIMATED,
                energy_uj=self._energy_uj,
                idle_w=model.idle_w,
            )
        ]


def build(config: Config, _context: BuildContext) -> EstimateSource:
    return EstimateSource(
        partial(read_cpu_times, config.procfs),
        partial(CpuPowerModel.for_cpus, idle_w=config.estimate_idle_w, max_w=config.estimate_max_w),
    )


def probe(config: Config, earlier: Sequence[CheckResult], _context: BuildContext) -> Finding:
    try:
        cpu = read_cpu_times(config.procfs)
    except SourceError as exc:
        return Finding(False, reason="needs /proc/stat", detail=exc.detail, fix=MOUNT_PROCFS)
    model = CpuPowerModel.for_cpus(cpu.ncpu, config.estimate_idle_w, config.estimate_max_w)
    measured = any(r.ok for r in earlier if r.kind == POWER)
    use = "standby: measured power is available" if measured else "in use: no power sensor found"
    return Finding.works(f"{use}; model {model.idle_w:g} W idle .. {model.max_w:g} W busy")


SPEC = SourceSpec(
    name=ESTIMATED,
    kind=POWER,
    default_on=True,
    probe=probe,
    build=build,
    fallback=True,  # read only until a measured power source has read
    flag_aliases=("estimate",),
    workload_zones=(("package",),),  # the model estimates the package alone
)
