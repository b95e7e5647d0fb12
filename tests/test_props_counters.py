"""Properties of counter deltas: never negative, never beyond what any domain can draw."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from exporter.counters import MAX_PLAUSIBLE_POWER_W, counter_delta_uj, integrate_power_j
from tests.props import PROPERTY

uj = st.integers(min_value=0, max_value=2**64)
dt = st.floats(min_value=1e-4, max_value=3600.0)


def limit_uj(dt_s: float) -> float:
    return MAX_PLAUSIBLE_POWER_W * max(dt_s, 1e-3) * 1e6


@PROPERTY
@given(uj, uj, st.one_of(st.none(), uj), dt)
def test_delta_is_bounded(prev: int, cur: int, max_range: int | None, dt_s: float) -> None:
    delta = counter_delta_uj(prev, cur, max_range, dt_s)
    if delta is None:
        return
    assert 0 <= delta <= limit_uj(dt_s)
    if cur >= prev:
        assert delta == cur - prev
    else:
        assert max_range is not None and delta == max_range - prev + cur


@PROPERTY
@given(
    max_range=st.integers(min_value=10**6, max_value=2**40),
    start=st.integers(min_value=0, max_value=2**40),
    steps=st.lists(
        st.tuples(
            st.floats(min_value=0.01, max_value=60.0),  # interval length
            st.floats(min_value=0.0, max_value=MAX_PLAUSIBLE_POWER_W),  # true mean power
            st.booleans(),  # a reset (driver reload) in this interval
        ),
        max_size=40,
    ),
)
def test_counted_energy_never_exceeds_drawn_energy(
    max_range: int, start: int, steps: list[tuple[float, float, bool]]
) -> None:
    """A wrapping counter with resets, read once per interval.

    Without a reset, each interval's true delta is recovered exactly (wraps included). A reset
    is never counted as more than the plausibility bound allows for its interval: a reset that
    looks like a wrap (counter near its max, reset to near zero) is indistinguishable from one,
    which docs/reliability.md records.
    """
    value = start % max_range
    counted = drawn_clean = 0
    ambiguous_uj = 0.0
    for dt_s, power, reset in steps:
        # floor: the true energy of an interval never exceeds the bound; at most one wrap
        energy = min(math.floor(power * dt_s * 1e6), max_range - 1)
        prev = value
        value = (energy % max_range) if reset else (value + energy) % max_range
        delta = counter_delta_uj(prev, value, max_range, dt_s)
        if delta is not None:
            assert 0 <= delta <= limit_uj(dt_s)
            counted += delta
        if reset:
            ambiguous_uj += limit_uj(dt_s)
        else:
            drawn_clean += energy
            assert delta == energy  # no reset: the true delta, wrap or not
    assert drawn_clean <= counted <= drawn_clean + ambiguous_uj


@PROPERTY
@given(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=-1.0, max_value=1e6),
)
def test_integrated_power_is_never_negative(prev_w: float, cur_w: float, dt_s: float) -> None:
    energy = integrate_power_j(prev_w, cur_w, dt_s)
    assert math.isnan(energy) or energy >= 0
