from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from exporter.accounting.attribution import (
    UNATTRIBUTED_TASK,
    ZoneEnergy,
    attribute,
    shares,
)
from exporter.model.identity import SYSTEM, ContainerRef


@given(
    total=st.floats(0, 1e7, allow_nan=False),
    weights=st.dictionaries(st.integers(0, 50), st.floats(0, 1e6, allow_nan=False), max_size=40),
)
def test_shares_hand_out_exactly_the_total(total: float, weights: dict[int, float]) -> None:
    parts = shares(total, weights)
    if total > 0 and any(w > 0 for w in weights.values()):
        assert math.isclose(math.fsum(parts.values()), total, rel_tol=1e-12)
        assert all(v >= 0 for v in parts.values())
        assert set(parts) == {k for k, w in weights.items() if w > 0}
    else:
        assert parts == {}


CONTAINERS = [
    SYSTEM,
    ContainerRef("a" * 64, "pod-1"),
    ContainerRef("b" * 64, "pod-1"),
    ContainerRef("c" * 64, "pod-2"),
]


@given(
    active=st.floats(0, 1e5),
    idle=st.floats(0, 1e5),
    tasks=st.dictionaries(
        st.tuples(st.integers(1, 100), st.integers(0, 3)),
        st.tuples(st.integers(0, len(CONTAINERS) - 1), st.floats(0, 100)),
        max_size=30,
    ),
    split_idle=st.booleans(),
)
def test_attribute_conserves_energy_at_every_level(
    active: float, idle: float, tasks: dict[tuple[int, int], tuple[int, float]], split_idle: bool
) -> None:
    weights = {k: w for k, (_, w) in tasks.items()}
    owner = {k: CONTAINERS[c] for k, (c, _) in tasks.items()}
    zone = ZoneEnergy("package", "", active, idle, weights, weights if split_idle else None)
    result = attribute([zone], owner, with_tasks=True)
    for mode, amount in (("active", active), ("idle", idle if split_idle else 0.0)):
        key = ("package", "", mode)
        per_container = [c.get(key, 0.0) for c in result.containers.values()]
        assert math.isclose(math.fsum(per_container), amount, rel_tol=1e-9, abs_tol=1e-9)
        for ref, amounts in result.containers.items():
            mine = [
                result.tasks[t].get(key, 0.0) for t in result.tasks if owner.get(t, SYSTEM) == ref
            ]
            assert math.isclose(math.fsum(mine), amounts.get(key, 0.0), rel_tol=1e-9, abs_tol=1e-9)


def test_no_activity_goes_to_system_processes_through_the_unattributed_task() -> None:
    result = attribute([ZoneEnergy("package", "", 10.0, 0.0, {})], {}, with_tasks=True)
    assert result.containers == {SYSTEM: {("package", "", "active"): 10.0}}
    assert result.tasks == {UNATTRIBUTED_TASK: {("package", "", "active"): 10.0}}


@given(
    active=st.floats(1.0, 1e5),
    tasks=st.dictionaries(
        st.tuples(st.integers(1, 100), st.integers(0, 3)),
        st.tuples(st.integers(0, len(CONTAINERS) - 1), st.floats(0.001, 100)),
        min_size=1,
        max_size=30,
    ),
)
def test_each_container_gets_energy_in_proportion_to_its_activity(
    active: float, tasks: dict[tuple[int, int], tuple[int, float]]
) -> None:
    """Conservation alone would pass with the energy handed to the wrong containers: each
    container's part must be its share of the zone's activity, and each task's its share."""
    weights = {k: w for k, (_, w) in tasks.items()}
    owner = {k: CONTAINERS[c] for k, (c, _) in tasks.items()}
    result = attribute([ZoneEnergy("package", "", active, 0.0, weights)], owner, with_tasks=True)
    total_weight = math.fsum(weights.values())
    key = ("package", "", "active")
    for ref in set(owner.values()):
        expected = active * math.fsum(w for t, w in weights.items() if owner[t] == ref)
        got = result.containers[ref][key]
        assert math.isclose(got, expected / total_weight, rel_tol=1e-9, abs_tol=1e-9)
    for task, w in weights.items():
        got = result.tasks[task][key]
        assert math.isclose(got, active * w / total_weight, rel_tol=1e-9, abs_tol=1e-9)
