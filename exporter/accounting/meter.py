"""One device's energy from its readings: the reading gate, counter deltas and wraparound, power
integration, the idle baseline and the active/idle split. CPU zones and GPUs use the same meter.

The gate: a reading becomes a baseline only if it is plausible for its device (a counter within
its range, a power within the device's bound, a delta no larger than the bound allows over the
time it covers). An implausible reading counts nothing and leaves the last good baseline in place,
so one absurd value can never add energy, neither in its own interval nor in the next. A counter
that went back (a driver reload) or jumped is held as a candidate: when the next reading moves on
plausibly from the candidate, the candidate was real (a reset, or a bad baseline) and counting
goes on from it; otherwise it was a spike and the baseline stays. The energy across the break is
lost, never invented. Every rejection is counted per reason, for the exposition.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

from exporter.accounting.idle import IdleBaseline
from exporter.model.health import (
    IMPLAUSIBLE,
    RESET,
    UNREADABLE,
    MeterHealth,
)

log = logging.getLogger(__name__)

# No single power domain we read (a CPU package, a DRAM channel, a GPU) draws more than this.
MAX_PLAUSIBLE_POWER_W = 5_000.0
U64_MAX = 2**64 - 1

_SAYS = {UNREADABLE: "unreadable", IMPLAUSIBLE: "implausible reading", RESET: "counter reset"}

COUNTER = "counter"  # energy from a cumulative counter's delta
POWER = "power"  # energy from power integrated over the interval


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One reading of one device, as the meter needs it: vendor- and source-neutral."""

    stamp: float  # monotonic seconds when it was read
    energy_uj: int | None = None
    max_energy_uj: int | None = None  # where the counter wraps
    power_w: float | None = None
    max_power_w: float | None = None  # what the device can plausibly draw; None: generic bound
    rated_power_w: float | None = None  # its rating (a GPU's power limit), for the idle prior
    fault: str = ""  # why the source could not read it


@dataclass(frozen=True, slots=True)
class Measured:
    """Energy of one device over the span since its last accepted reading."""

    active_j: float
    idle_j: float
    dt_s: float
    method: str  # COUNTER or POWER

    @property
    def energy_j(self) -> float:
        return self.active_j + self.idle_j


@dataclass
class _Base:
    sample: DeviceSample
    interval: int  # the interval it was read in: a wrap is trusted only between consecutive ones


@dataclass
class ZoneMeter:
    """Cumulative state of one device. Driven by one thread, once per interval it is read in."""

    idle: IdleBaseline = field(default_factory=IdleBaseline)
    name: str = "device"  # for log lines: which source, zone and device
    up: bool = True
    rejected: dict[str, int] = field(default_factory=dict)
    _base: _Base | None = None
    _candidate: _Base | None = None

    def measure(
        self, sample: DeviceSample, *, interval: int, utilization: float | None
    ) -> Measured | None:
        """The energy since the last accepted reading, split into active and idle; None when
        this reading is the first, is rejected, or covers no time."""
        reason = _invalid(sample)
        if reason:
            self._reject(reason, None, sample.fault)
            return None
        base = self._base
        if base is None:
            self._accept(sample, interval)
            return None
        outcome = _between(base, sample, interval)
        if self._candidate is not None:
            # The last reading broke from the baseline. If this one follows it plausibly, the
            # series goes on from there (a reset, or a bad baseline); otherwise it was a spike.
            from_candidate = _between(self._candidate, sample, interval)
            if not isinstance(from_candidate, str):
                outcome = from_candidate
        if isinstance(outcome, str):
            self._reject(outcome, _Base(sample, interval), "")
            return None
        self._accept(sample, interval)
        energy_j, dt, method = outcome
        if dt <= 0:
            return None
        self.idle.observe(utilization, energy_j / dt, sample.rated_power_w)
        if utilization == 0:  # the device did nothing: all it drew was idle, whatever the baseline
            return Measured(0.0, energy_j, dt, method)
        active, idle = split_active_idle(energy_j, self.idle.watts, dt)
        return Measured(active, idle, dt, method)

    def health(self) -> MeterHealth:
        watts, origin = self.idle.current()
        return MeterHealth(self.up, tuple(sorted(self.rejected.items())), watts, origin)

    def _accept(self, sample: DeviceSample, interval: int) -> None:
        if not self.up:
            log.info("%s: readings accepted again", self.name)
        self._base = _Base(sample, interval)
        self._candidate = None
        self.up = True

    def _reject(self, reason: str, candidate: _Base | None, detail: str) -> None:
        # once per fault episode: a sensor that stays broken must not flood the log
        if self.up:
            log.warning(
                "%s: %s%s; the last good reading stays the baseline",
                self.name,
                _SAYS[reason],
                f" ({detail})" if detail else "",
            )
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        self.up = False
        if candidate is not None:
            self._candidate = candidate


def split_active_idle(energy_j: float, idle_power_w: float, dt_s: float) -> tuple[float, float]:
    """(active, idle): idle = min(P_idle * dt, dE), so neither part is ever negative."""
    energy_j = max(energy_j, 0.0)
    idle = min(max(idle_power_w, 0.0) * max(dt_s, 0.0), energy_j)
    return energy_j - idle, idle


def _invalid(sample: DeviceSample) -> str:
    """Why the reading cannot be used at all, or ''."""
    if sample.fault or (sample.energy_uj is None and sample.power_w is None):
        return UNREADABLE
    if sample.energy_uj is not None:
        limit = sample.max_energy_uj if sample.max_energy_uj else U64_MAX
        if not 0 <= sample.energy_uj <= limit:
            return IMPLAUSIBLE
    if sample.power_w is not None and not 0 <= sample.power_w <= _power_bound(sample):
        return IMPLAUSIBLE  # NaN fails the comparison too
    return ""


def _power_bound(sample: DeviceSample) -> float:
    bound = sample.max_power_w
    return bound if bound is not None and 0 < bound < math.inf else MAX_PLAUSIBLE_POWER_W


def _between(base: _Base, new: DeviceSample, interval: int) -> tuple[float, float, str] | str:
    """(joules, seconds, method) from base to new, or the reason the step cannot be trusted."""
    old = base.sample
    dt = new.stamp - old.stamp
    if old.energy_uj is not None and new.energy_uj is not None:
        # the tolerance keeps float rounding of the stamps from rejecting a device at its bound
        limit_uj = _power_bound(new) * max(dt, 1e-3) * 1e6 * (1 + 1e-9)
        if new.energy_uj >= old.energy_uj:
            delta = new.energy_uj - old.energy_uj
            return (delta / 1e6, dt, COUNTER) if delta <= limit_uj else IMPLAUSIBLE
        wrap = new.max_energy_uj
        # A wrap is only recognised between readings of consecutive intervals: after a gap a
        # lower value could be a wrap or a reset, and inventing energy is worse than losing it.
        if base.interval == interval - 1 and wrap and wrap > old.energy_uj:
            wrapped = wrap - old.energy_uj + new.energy_uj
            if wrapped <= limit_uj:
                return wrapped / 1e6, dt, COUNTER
        return RESET
    if old.power_w is not None and new.power_w is not None:
        return (old.power_w + new.power_w) / 2.0 * max(dt, 0.0), dt, POWER
    # The two readings share no quantity (a GPU's counter failed once): start again from here,
    # so no span is ever counted twice.
    return 0.0, 0.0, POWER
