from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.idle import IdleBaseline, learn_idle_power, percentile


def test_linear_zone_recovers_its_intercept() -> None:
    rng = random.Random(7)
    samples = []
    for _ in range(200):
        u = rng.uniform(0.2, 0.9)
        samples.append((u, 40.0 + 120.0 * u + rng.gauss(0, 1.0)))
    assert learn_idle_power(samples) == pytest.approx(40.0, abs=1.5)


def test_without_spread_the_low_percentile_is_used() -> None:
    samples = [(0.5, 100.0 + i % 7) for i in range(100)]
    assert learn_idle_power(samples) == percentile([p for _, p in samples], 0.05)


def test_fixed_baseline_ignores_observations() -> None:
    baseline = IdleBaseline(fixed_w=12.0)
    baseline.observe(0.9, 300.0)
    assert baseline.watts == 12.0


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0.001, 2000)), min_size=1, max_size=60))
def test_learned_idle_is_positive_and_never_above_observed_power(
    samples: list[tuple[float, float]],
) -> None:
    idle = learn_idle_power(samples)
    assert 0 < idle <= max(p for _, p in samples)
