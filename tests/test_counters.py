from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.counters import MAX_PLAUSIBLE_POWER_W, counter_delta_uj, integrate_power_j

RANGE = 262_143_328_850


def test_plain_increase() -> None:
    assert counter_delta_uj(1_000, 51_000, RANGE, 5.0) == 50_000


def test_single_wrap_is_counted() -> None:
    assert counter_delta_uj(RANGE - 1_000_000, 2_000_000, RANGE, 5.0) == 3_000_000


def test_reset_without_plausible_wrap_is_not_counted() -> None:
    # a driver reload restarts the counter near zero while the old value was far from the end
    assert counter_delta_uj(100_000_000_000, 5_000, RANGE, 5.0) is None


def test_lower_value_without_known_range_is_a_reset() -> None:
    assert counter_delta_uj(10_000, 5_000, None, 5.0) is None


def test_implausible_jump_is_not_counted() -> None:
    too_much = int(MAX_PLAUSIBLE_POWER_W * 5.0 * 1e6) + 1
    assert counter_delta_uj(0, too_much, RANGE, 5.0) is None


@given(
    prev=st.integers(0, RANGE),
    cur=st.integers(0, RANGE),
    dt=st.floats(0.001, 3600.0),
    known_range=st.booleans(),
)
def test_delta_never_negative_nor_above_the_plausible_bound(
    prev: int, cur: int, dt: float, known_range: bool
) -> None:
    delta = counter_delta_uj(prev, cur, RANGE if known_range else None, dt)
    if delta is not None:
        assert 0 <= delta <= MAX_PLAUSIBLE_POWER_W * dt * 1e6


def test_integrate_power_trapezoid() -> None:
    assert integrate_power_j(100.0, 200.0, 2.0) == pytest.approx(300.0)
    assert integrate_power_j(100.0, 200.0, -1.0) == 0.0
