from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exporter.accounting.attribution import (
    UNATTRIBUTED_TASK,
    IntervalAttribution,
    ZoneEnergy,
    attribute,
    shares,
)
from exporter.model.identity import SYSTEM, ContainerRef


@given(
    total=st.floats(0, 1e7, allow_nan=False),
    weights=st.dictionaries(st.integers(0, 50), st.floats(0, 1e6, allow_nan=False), max_size=40),
)
# the largest part cannot take the remainder (a tie in its rounding): another part must
@example(total=192.83570080425912, weights={0: 2.0, 1: 1.0})
@example(total=5e-324, weights={0: 1.0, 1: 1e-300, 2: 3.0})
@example(total=1e7, weights={0: 1e6, 1: 5e-324})
# subnormal: the other parts sum to the total exactly, so the largest part's remainder is 0
@example(total=1e-323, weights={0: 1.0, 1: 1.0, 2: 1.0})
def test_shares_hand_out_exactly_the_total(total: float, weights: dict[int, float]) -> None:
    """Exactly: math.fsum of the parts is total, to the last bit."""
    parts = shares(total, weights)
    if total > 0 and any(w > 0 for w in weights.values()):
        assert math.fsum(parts.values()) == total
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
        assert math.fsum(per_container) == amount  # exactly
        for ref, amounts in result.containers.items():
            mine = [
                result.tasks[t].get(key, 0.0) for t in result.tasks if owner.get(t, SYSTEM) == ref
            ]
            assert math.fsum(mine) == amounts.get(key, 0.0)  # exactly


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


def _zone_sum(result: IntervalAttribution, mode: str) -> float:
    return math.fsum(c.get(("package", "", mode), 0.0) for c in result.containers.values())


def test_a_zone_whose_weights_are_all_zero_keeps_its_energy() -> None:
    """Tasks that ran but did no measurable work: the zone's energy is not lost, it goes to
    system_processes through the unattributed task (visible, and the sums still balance)."""
    owner = {(1, 0): CONTAINERS[1], (2, 0): CONTAINERS[3]}
    weights = {(1, 0): 0.0, (2, 0): 0.0}
    zone = ZoneEnergy("package", "", 10.0, 4.0, weights, weights)
    result = attribute([zone], owner, with_tasks=True)
    assert result.containers == {
        SYSTEM: {("package", "", "active"): 10.0, ("package", "", "idle"): 4.0}
    }
    assert result.tasks == {
        UNATTRIBUTED_TASK: {("package", "", "active"): 10.0, ("package", "", "idle"): 4.0}
    }


def test_holders_whose_weights_are_all_zero_split_the_idle_evenly() -> None:
    held = {CONTAINERS[1]: 0.0, CONTAINERS[3]: 0.0}
    zone = ZoneEnergy("package", "", 0.0, 6.0, {}, idle_containers=held)
    result = attribute([zone], {}, with_tasks=False)
    assert result.containers == {ref: {("package", "", "idle"): 3.0} for ref in held}


# weights that are often exactly 0, so that zones with every weight 0 are common
_weight = st.one_of(st.just(0.0), st.floats(0, 100))


@given(
    active=st.floats(0, 1e5),
    idle=st.floats(0, 1e5),
    tasks=st.dictionaries(
        st.tuples(st.integers(1, 100), st.integers(0, 3)),
        st.tuples(st.integers(0, len(CONTAINERS) - 1), _weight),
        max_size=12,
    ),
    # the holders of a device are pods' containers
    held=st.dictionaries(st.integers(1, len(CONTAINERS) - 1), _weight, min_size=1, max_size=3),
    idle_split=st.sampled_from(("none", "weights", "containers")),
)
@example(
    active=10.0,
    idle=4.0,
    tasks={(1, 0): (1, 0.0), (2, 0): (3, 0.0)},
    held={1: 0.0, 3: 0.0},
    idle_split="weights",
)
@example(
    active=10.0,
    idle=4.0,
    tasks={(1, 0): (1, 0.0)},
    held={1: 0.0, 3: 0.0},
    idle_split="containers",
)
# nothing active, idle split by activity: the idle must still be handed out
@example(active=0.0, idle=4.0, tasks={(1, 0): (1, 2.0)}, held={1: 1.0}, idle_split="weights")
# less than a joule of idle among holders is handed out too
@example(active=0.0, idle=0.5, tasks={(1, 0): (1, 2.0)}, held={1: 1.0}, idle_split="containers")
def test_what_attribute_returns_sums_to_its_input_for_any_weights(
    active: float,
    idle: float,
    tasks: dict[tuple[int, int], tuple[int, float]],
    held: dict[int, float],
    idle_split: str,
) -> None:
    """Whatever the weights, all 0 included: the containers' active energy is the zone's active
    energy, and so is their idle energy where a policy splits idle (by task weights, or among
    the containers holding the device)."""
    weights = {k: w for k, (_, w) in tasks.items()}
    owner = {k: CONTAINERS[c] for k, (c, _) in tasks.items()}
    zone = ZoneEnergy(
        "package",
        "",
        active,
        idle,
        weights,
        weights if idle_split == "weights" else None,
        {CONTAINERS[c]: w for c, w in held.items()} if idle_split == "containers" else None,
    )
    result = attribute([zone], owner, with_tasks=True)
    assert _zone_sum(result, "active") == active
    assert _zone_sum(result, "idle") == (0.0 if idle_split == "none" else idle)
    # and a container that has tasks is the sum of its tasks, in each mode (a holder without a
    # task on the node has no process series to add up)
    for ref, amounts in result.containers.items():
        mine = [t for t in result.tasks if owner.get(t, SYSTEM) == ref]
        if mine:
            for key, joules in amounts.items():
                assert math.fsum(result.tasks[t].get(key, 0.0) for t in mine) == joules


@pytest.mark.parametrize(
    ("total", "weights"),
    [
        (6049884.379992821, {0: 3.0, 1: 872767.0246282014}),
        (2993821.114208344, {0: 841535.5745874388, 1: 25467.44677382151, 2: 1e-300}),
    ],
)
def test_the_rounding_residue_goes_to_the_largest_part(
    total: float, weights: dict[int, float]
) -> None:
    """Where it can, only the largest part absorbs the residue: every other part is its share
    rounded once, so a small consumer's bill never carries the error of a large one's. (In a
    tie the next largest takes it: test_shares_hand_out_exactly_the_total's first example.)"""
    parts = shares(total, weights)
    assert math.fsum(parts.values()) == total
    largest = max(weights, key=weights.__getitem__)
    weight_sum = math.fsum(weights.values())
    for k, w in weights.items():
        if k != largest:
            assert parts[k] == total * w / weight_sum


def test_the_unattributed_task_is_no_process() -> None:
    """PID 0 is the idle task, never a process of /proc or eBPF: the pseudo task cannot take a
    real process's key (and its energy)."""
    assert isinstance(UNATTRIBUTED_TASK, tuple)
    assert UNATTRIBUTED_TASK[0] == 0


def test_a_zones_energy_and_its_split_cannot_change_once_built() -> None:
    """Zones are handed between stages and held for late activity (accounting/pending.py); an
    attribution goes to the ledger as it was computed."""
    zone = ZoneEnergy("package", "", 1.0, 0.0, {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        zone.active_j = 2.0  # type: ignore[misc]
    split = attribute([zone], {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        split.containers = {}  # type: ignore[misc]


def test_by_default_idle_stays_on_the_node_and_no_task_is_split() -> None:
    """--attribution.idle none is the default: a zone without idle weights hands out only its
    active energy; per-task energy (--collector.process, opt-in) is split only when asked."""
    owner = {(1, 0): CONTAINERS[1]}
    result = attribute([ZoneEnergy("package", "", 10.0, 4.0, {(1, 0): 1.0})], owner)
    assert result.containers == {CONTAINERS[1]: {("package", "", "active"): 10.0}}
    assert result.tasks == {}
