"""Pure functions that split measured energy among workloads.

Per interval and per zone: idle = min(P_idle * dt, dE), active = dE - idle; active is split by
each task's share of the zone's activity (CPU seconds for CPU zones), rolled up task ->
container. Every split hands out exactly what it was given: the parts sum to the whole.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from exporter.model.identity import SYSTEM, ContainerRef
from exporter.model.readings import TaskKey

K = TypeVar("K", bound=Hashable)

# Stands for "no task was active": a zone's energy in an interval where nothing that can be
# attributed ran goes to the system_processes pseudo-container through this pseudo task.
UNATTRIBUTED_TASK: TaskKey = (0, 0)

# How many parts may take the remainder in turn (each try costs a sum over all parts).
_REMAINDER_TRIES = 8

ACTIVE = "active"
IDLE = "idle"


def shares(total: float, weights: Mapping[K, float]) -> dict[K, float]:
    """Split total in proportion to the positive weights; {} when there is nothing to split.

    The rounding residue goes to one part (the largest where it can), so math.fsum of the
    parts equals total exactly.
    """
    positive = {k: w for k, w in weights.items() if w > 0}
    weight_sum = math.fsum(positive.values())
    if total == 0 or weight_sum <= 0:
        return {}
    parts = {k: total * w / weight_sum for k, w in positive.items()}
    # One part takes the exact remainder, total - fsum(the others), so that fsum(parts) == total.
    # The largest first; where that remainder cannot be rounded to such a value (a tie: the sum
    # of the others has a finer last bit than total), the next largest, and so on.
    for k in sorted(parts, key=parts.__getitem__, reverse=True)[:_REMAINDER_TRIES]:
        if math.fsum(parts.values()) == total:
            break
        rest = math.fsum([total, *(-v for j, v in parts.items() if j != k)])
        if rest >= 0:
            parts[k] = rest
    return parts


@dataclass(frozen=True)
class ZoneEnergy:
    """One attributed zone's energy in an interval and the activity that splits it."""

    zone: str
    gpu: str  # "" for host zones
    active_j: float
    idle_j: float
    weights: Mapping[TaskKey, float]  # activity per task in this zone
    idle_weights: Mapping[TaskKey, float] | None = None  # None: idle stays on the node
    # Idle split by container instead (e.g. the pods holding a GPU); wins over idle_weights.
    # With tasks, a container's part is split evenly among its tasks in the owner map.
    idle_containers: Mapping[ContainerRef, float] | None = None


# (zone, gpu, mode) -> joules
EnergyKey = tuple[str, str, str]


@dataclass(frozen=True)
class IntervalAttribution:
    containers: Mapping[ContainerRef, Mapping[EnergyKey, float]]
    tasks: Mapping[TaskKey, Mapping[EnergyKey, float]] = field(default_factory=dict)


def _split_to_containers(
    amount: float,
    weights: Mapping[TaskKey, float],
    owner: Mapping[TaskKey, ContainerRef],
) -> tuple[dict[ContainerRef, float], dict[ContainerRef, dict[TaskKey, float]]]:
    """amount -> per container (by summed task weights), and the task weights per container."""
    by_container: dict[ContainerRef, dict[TaskKey, float]] = {}
    for task, w in weights.items():
        if w > 0:
            ref = owner.get(task, SYSTEM)
            by_container.setdefault(ref, {})[task] = w
    if not by_container:
        by_container = {SYSTEM: {UNATTRIBUTED_TASK: 1.0}}
    totals = {ref: math.fsum(ws.values()) for ref, ws in by_container.items()}
    return shares(amount, totals), by_container


def attribute(
    zones: Iterable[ZoneEnergy],
    owner: Mapping[TaskKey, ContainerRef],
    with_tasks: bool = False,
) -> IntervalAttribution:
    """Split each zone's active (and, where a policy asks, idle) energy among containers.

    With with_tasks, each container's part is split again among its tasks, so that a container
    equals the sum of its tasks exactly.
    """
    containers: dict[ContainerRef, dict[EnergyKey, float]] = {}
    tasks: dict[TaskKey, dict[EnergyKey, float]] = {}
    tasks_of: dict[ContainerRef, list[TaskKey]] | None = None
    for z in zones:
        parts = [(ACTIVE, z.active_j, z.weights)]
        if z.idle_containers is not None:
            if tasks_of is None:
                tasks_of = _tasks_by_container(owner)
            _add_by_container(z, tasks_of, with_tasks, containers, tasks)
        elif z.idle_weights is not None:
            parts.append((IDLE, z.idle_j, z.idle_weights))
        for mode, amount, weights in parts:
            if amount <= 0:
                continue
            key = (z.zone, z.gpu, mode)
            per_container, task_weights = _split_to_containers(amount, weights, owner)
            for ref, joules in per_container.items():
                bucket = containers.setdefault(ref, {})
                bucket[key] = bucket.get(key, 0.0) + joules
                if with_tasks:
                    for task, tj in shares(joules, task_weights[ref]).items():
                        tb = tasks.setdefault(task, {})
                        tb[key] = tb.get(key, 0.0) + tj
    return IntervalAttribution(containers, tasks)


def _tasks_by_container(owner: Mapping[TaskKey, ContainerRef]) -> dict[ContainerRef, list[TaskKey]]:
    out: dict[ContainerRef, list[TaskKey]] = {}
    for task, ref in owner.items():
        out.setdefault(ref, []).append(task)
    return out


def _add_by_container(
    z: ZoneEnergy,
    tasks_of: Mapping[ContainerRef, list[TaskKey]],
    with_tasks: bool,
    containers: dict[ContainerRef, dict[EnergyKey, float]],
    tasks: dict[TaskKey, dict[EnergyKey, float]],
) -> None:
    """A zone's idle energy split by container weights (z.idle_containers)."""
    assert z.idle_containers is not None
    if z.idle_j <= 0:
        return
    key = (z.zone, z.gpu, IDLE)
    # holders whose weights are all 0 split it evenly (none of them was active); no holder at all
    # leaves it on the node
    split = shares(z.idle_j, z.idle_containers) or shares(
        z.idle_j, dict.fromkeys(z.idle_containers, 1.0)
    )
    for ref, joules in split.items():
        bucket = containers.setdefault(ref, {})
        bucket[key] = bucket.get(key, 0.0) + joules
        if with_tasks:
            for task, tj in shares(joules, dict.fromkeys(tasks_of.get(ref, ()), 1.0)).items():
                tb = tasks.setdefault(task, {})
                tb[key] = tb.get(key, 0.0) + tj
