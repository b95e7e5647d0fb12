"""Energy that waits for the activity reading that covers it.

An interval whose activity read is late, timed out or failed has energy but no CPU deltas.
Split then, all of it would go to system_processes, while the CPU time it paid for is counted
at the next reading (deltas are taken against the last reading used, so the next one covers
the gap). So the energy of such an interval is held, per zone kind, and handed out with the
next interval that has an activity reading: its deltas cover the held time and the current one,
so held and current energy are split together by them.

Held energy is bounded: at most HOLD_INTERVALS intervals in a row are held; the oldest one
beyond that goes, per zone kind, to the node's unattributed counter with the reason of its gap,
never silently to a workload. So, per attributed zone kind, at every instant:

    node active == sum of workloads' active + unattributed + pending        (mode "active"; and
    the same for "idle" under --idle.attribution=activity, whose idle follows the same deltas)

Exactness: an interval's amounts are kept apart while held, and a release hands out
math.fsum(held amounts + current), which attribution.shares splits exactly, so fsum of what goes
out of one step equals fsum of what came in, to the correct rounding of that one sum.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from exporter.accounting.attribution import ACTIVE, IDLE, EnergyKey, ZoneEnergy
from exporter.accounting.deadline import BUSY, TIMEOUT
from exporter.model.readings import SourceStatus, TaskKey
from exporter.model.snapshot import UNATTRIBUTED_FAILED, UNATTRIBUTED_LATE

# How many intervals without an activity reading are held before the oldest is given up. Three
# covers a read that misses one or two deadlines on a loaded node (the deadline reader hands a
# late result to the next interval) without holding energy for long.
HOLD_INTERVALS = 3

# Why energy could not be attributed (a label value, so defined with the Snapshot's fields)
LATE = UNATTRIBUTED_LATE
FAILED = UNATTRIBUTED_FAILED

_COMPACT_AT = 64


@dataclass(frozen=True)
class _Gap:
    """One held interval: its amounts per (zone, gpu, mode), and why it had no activity."""

    reason: str
    amounts: Mapping[EnergyKey, float]


def gap_reason(have_tasks: bool, statuses: Sequence[SourceStatus], source: str) -> str:
    """Why an interval has no activity reading: LATE when the activity source's read missed its
    deadline (timed out, or the one before still runs), FAILED otherwise; "" when it has one.
    source: the activity source's name in the statuses."""
    if have_tasks:
        return ""
    mine = [s for s in statuses if s.source == source and not s.up]
    return LATE if any(s.reason in (TIMEOUT, BUSY) for s in mine) else FAILED


class PendingEnergy:
    """Holds the energy of intervals without activity. Driven by the monitor's thread only."""

    def __init__(self, hold_intervals: int = HOLD_INTERVALS) -> None:
        if hold_intervals < 0:
            raise ValueError("hold_intervals must be >= 0")
        self._hold = hold_intervals
        self._gaps: deque[_Gap] = deque()
        self._unattributed: dict[tuple[EnergyKey, str], list[float]] = {}

    def settle(
        self,
        zones: Sequence[ZoneEnergy],
        *,
        gap: str,
        weights: Mapping[TaskKey, float],
        idle_weights: Mapping[TaskKey, float] | None,
    ) -> list[ZoneEnergy]:
        """The zones to attribute this interval.

        gap is "" when this interval has an activity reading (weights are its deltas), else the
        reason it has none (LATE or FAILED). With a reading, held energy joins the current zones
        (a held zone kind absent now comes back with the current weights); without one, the
        zones' activity-split energy is held and they are returned without it.
        """
        if gap:
            held: dict[EnergyKey, float] = {}
            out = []
            for z in zones:
                held[(z.zone, z.gpu, ACTIVE)] = z.active_j
                idle_j = z.idle_j
                if _idle_follows_activity(z):
                    held[(z.zone, z.gpu, IDLE)] = z.idle_j
                    idle_j = 0.0
                out.append(replace(z, active_j=0.0, idle_j=idle_j))
            self._gaps.append(_Gap(gap, {k: v for k, v in held.items() if v > 0}))
            while len(self._gaps) > self._hold:
                self._give_up(self._gaps.popleft())
            return out
        if not self._gaps:
            return list(zones)
        held_parts: dict[EnergyKey, list[float]] = {}
        for g in self._gaps:
            for key, joules in g.amounts.items():
                held_parts.setdefault(key, []).append(joules)
        self._gaps.clear()
        out = []
        seen: set[tuple[str, str]] = set()
        for z in zones:
            seen.add((z.zone, z.gpu))
            active = math.fsum([*held_parts.get((z.zone, z.gpu, ACTIVE), ()), z.active_j])
            idle = z.idle_j
            if _idle_follows_activity(z):
                idle = math.fsum([*held_parts.get((z.zone, z.gpu, IDLE), ()), z.idle_j])
            out.append(replace(z, active_j=active, idle_j=idle))
        for zone, gpu in sorted({(k[0], k[1]) for k in held_parts} - seen):
            out.append(
                ZoneEnergy(
                    zone,
                    gpu,
                    math.fsum(held_parts.get((zone, gpu, ACTIVE), ())),
                    math.fsum(held_parts.get((zone, gpu, IDLE), ())),
                    weights,
                    idle_weights,
                )
            )
        return out

    def _give_up(self, gap: _Gap) -> None:
        for key, joules in gap.amounts.items():
            parts = self._unattributed.setdefault((key, gap.reason), [])
            parts.append(joules)
            if len(parts) > _COMPACT_AT:  # bounded memory on a source that never comes back
                parts[:] = [math.fsum(parts)]

    def pending(self) -> dict[EnergyKey, float]:
        """Joules held now, per (zone, gpu, mode)."""
        parts: dict[EnergyKey, list[float]] = {}
        for g in self._gaps:
            for key, joules in g.amounts.items():
                parts.setdefault(key, []).append(joules)
        return {k: math.fsum(v) for k, v in parts.items()}

    def unattributed(self) -> dict[tuple[EnergyKey, str], float]:
        """Cumulative joules given up, per ((zone, gpu, mode), reason). Never decreases: parts
        are only appended, and fsum of a longer list of non-negative parts is not smaller."""
        return {k: math.fsum(v) for k, v in self._unattributed.items()}


def _idle_follows_activity(z: ZoneEnergy) -> bool:
    """Idle split by the same CPU deltas (--idle.attribution=activity) waits with active."""
    return z.idle_weights is not None and z.idle_containers is None
