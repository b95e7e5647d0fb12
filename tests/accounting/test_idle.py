"""The idle baseline is learned only from evidence of idleness, by value."""

from __future__ import annotations

import random

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exporter.accounting.idle import (
    DEFAULT_WINDOW,
    PRIOR_SHARE,
    IdleBaseline,
    fitted_intercept,
)
from exporter.model.health import IdleOrigin

HOUR_OF_INTERVALS = 720  # at the default 5 s


def test_linear_device_recovers_its_intercept() -> None:
    rng = random.Random(7)
    samples = []
    for _ in range(200):
        u = rng.uniform(0.2, 0.9)
        samples.append((u, 40.0 + 120.0 * u + rng.gauss(0, 1.0)))
    assert fitted_intercept(samples) == pytest.approx(40.0, abs=1.5)


def test_no_fit_without_spread() -> None:
    samples = [(0.9 + 0.01 * (i % 7), 600.0 + i % 5) for i in range(200)]
    assert fitted_intercept(samples) is None


def test_sustained_load_keeps_the_prior_not_its_low_percentile() -> None:
    """A GPU at 97 % and a steady 640 W for an hour: the baseline stays the prior (5 % of its
    700 W limit), not the lowest power of its load (which billed a training job 0 %)."""
    baseline = IdleBaseline()
    rng = random.Random(1)
    for _ in range(HOUR_OF_INTERVALS):
        baseline.observe(0.97, 640.0 + rng.uniform(-3, 3), rated_w=700.0)
    assert baseline.origin is IdleOrigin.PRIOR
    assert baseline.watts == pytest.approx(PRIOR_SHARE * 700.0)
    assert baseline.watts / 640.0 < 0.10  # >= 90 % of the energy bills as active


def test_prior_without_a_rating_is_a_share_of_the_peak_seen() -> None:
    baseline = IdleBaseline()
    for watts in (80.0, 95.0, 90.0):
        baseline.observe(0.8, watts, rated_w=None)
    assert (baseline.watts, baseline.origin) == (PRIOR_SHARE * 95.0, IdleOrigin.PRIOR)


def test_idle_then_busy_keeps_what_idleness_showed() -> None:
    """Idle intervals teach the baseline, and a day of load afterwards does not push it out."""
    baseline = IdleBaseline()
    for i in range(20):
        baseline.observe(0.0, 62.0 + (i % 3), rated_w=700.0)
    assert (baseline.watts, baseline.origin) == (63.0, IdleOrigin.LEARNED)
    for _ in range(24 * HOUR_OF_INTERVALS):
        baseline.observe(1.0, 650.0, rated_w=700.0)
    assert (baseline.watts, baseline.origin) == (63.0, IdleOrigin.LEARNED)


def test_spread_utilization_learns_the_intercept() -> None:
    baseline = IdleBaseline()
    for i in range(100):
        u = 0.2 + 0.6 * (i % 10) / 9
        baseline.observe(u, 30.0 + 100.0 * u, rated_w=None)
    assert baseline.origin is IdleOrigin.LEARNED
    assert baseline.watts == pytest.approx(30.0)


def test_unknown_utilization_is_no_evidence() -> None:
    """MIG GPUs report no utilization: their power never teaches the baseline."""
    baseline = IdleBaseline()
    for _ in range(50):
        baseline.observe(None, 50.0, rated_w=400.0)
    assert (baseline.watts, baseline.origin) == (PRIOR_SHARE * 400.0, IdleOrigin.PRIOR)


def test_fixed_baseline_ignores_observations() -> None:
    baseline = IdleBaseline(fixed_w=12.0)
    baseline.observe(0.0, 300.0, rated_w=None)
    assert (baseline.watts, baseline.origin) == (12.0, IdleOrigin.CONFIGURED)


@given(
    st.lists(
        st.tuples(st.one_of(st.none(), st.floats(0, 1)), st.floats(0, 2000)),
        min_size=1,
        max_size=80,
    ),
    st.one_of(st.none(), st.floats(1, 2000)),
)
def test_baseline_is_never_negative_nor_above_what_evidence_allows(
    samples: list[tuple[float | None, float]], rated: float | None
) -> None:
    baseline = IdleBaseline(window=DEFAULT_WINDOW)
    for u, p in samples:
        baseline.observe(u, p, rated_w=rated)
    watts, origin = baseline.current()
    assert watts >= 0
    if origin is IdleOrigin.PRIOR:
        assert watts == pytest.approx(PRIOR_SHARE * (rated or max(p for _, p in samples)))
    else:
        # learned: from idle intervals' power, or an intercept below every power seen
        idle_powers = [p for u, p in samples if u is not None and u <= 0.05]
        assert watts <= max(idle_powers or [p for _, p in samples])


# A line with a real spread and one low outlier at mid utilization: slope and intercept are both
# positive, and the intercept (about 100 W) is above the outlier's 10 W. Dropping the bound
# `intercept <= min(powers)` would bill 100 W of every interval as idle on a device seen at 10 W.
_LOW_OUTLIER = [(i / 39, 100.0 + 50.0 * i / 39) for i in range(40)] + [(0.5, 10.0)]


def test_an_intercept_above_the_lowest_power_seen_is_refused() -> None:
    assert fitted_intercept(_LOW_OUTLIER) is None


@given(
    st.lists(st.tuples(st.floats(0, 1), st.floats(0, 2000)), min_size=30, max_size=120),
)
@example(_LOW_OUTLIER)
def test_a_fitted_intercept_never_exceeds_the_lowest_power_seen(
    samples: list[tuple[float, float]],
) -> None:
    """Any fit, whatever its spread: the idle power it learns is positive and at most the lowest
    power the device was seen drawing (a device never draws less than its idle)."""
    intercept = fitted_intercept(samples)
    if intercept is not None:
        assert 0 < intercept <= min(p for _, p in samples)


def _line(intercept: float, slope: float, n: int = 40) -> list[tuple[float, float]]:
    """n samples on P = intercept + slope * u, u in exact quarters 0..1 (exact arithmetic)."""
    us = [0.0, 0.25, 0.5, 0.75, 1.0]
    return [(us[i % 5], intercept + slope * us[i % 5]) for i in range(n)]


def test_the_fit_takes_its_bounds_inclusively() -> None:
    """An intercept equal to the lowest power seen is physical (the device was seen idle);
    thirty samples and a spread of exactly MIN_FIT_SPREAD are enough."""
    assert fitted_intercept(_line(10.0, 8.0)) == 10.0
    assert fitted_intercept(_line(10.0, 8.0, n=30)) == 10.0
    assert fitted_intercept(_line(10.0, 8.0, n=29)) is None
    spread = [(0.0 if i % 2 else 0.3, 10.0 + (0.0 if i % 2 else 3.0)) for i in range(30)]
    assert fitted_intercept(spread) == pytest.approx(10.0)


def test_a_fit_refuses_a_flat_or_falling_line_and_a_zero_intercept() -> None:
    """A power that does not rise with utilization says nothing about idle: a flat line's
    intercept is its constant power, which would bill all of it as idle."""
    assert fitted_intercept(_line(100.0, 0.0)) is None
    assert fitted_intercept(_line(100.0, -5.0)) is None
    assert fitted_intercept(_line(0.0, 8.0)) is None  # no device idles at 0 W


def test_small_slopes_and_small_intercepts_are_still_learned() -> None:
    """A nearly flat device (0.5 W across its range) and one idling under a watt."""
    assert fitted_intercept(_line(10.0, 0.5)) == pytest.approx(10.0)
    assert fitted_intercept(_line(0.5, 10.0)) == pytest.approx(0.5)


def test_three_idle_intervals_are_evidence_two_are_not() -> None:
    baseline = IdleBaseline()
    for watts in (60.0, 62.0):
        baseline.observe(0.0, watts, rated_w=700.0)
    assert baseline.origin is IdleOrigin.PRIOR
    baseline.observe(0.01, 64.0, rated_w=700.0)
    assert (baseline.watts, baseline.origin) == (62.0, IdleOrigin.LEARNED)


def test_the_fit_forgets_what_is_older_than_the_window() -> None:
    """The window is an hour of 5 s intervals: the one sample that gave the fit its spread
    counts for DEFAULT_WINDOW intervals, and not one more."""
    assert DEFAULT_WINDOW * 5 == 3600
    baseline = IdleBaseline()
    baseline.observe(0.2, 50.0, rated_w=None)
    for _ in range(DEFAULT_WINDOW - 1):
        baseline.observe(0.9, 140.0, rated_w=None)
    assert baseline.origin is IdleOrigin.LEARNED
    baseline.observe(0.9, 140.0, rated_w=None)
    assert (baseline.watts, baseline.origin) == (PRIOR_SHARE * 140.0, IdleOrigin.PRIOR)


def test_idle_evidence_at_its_bounds() -> None:
    """At most IDLE_UTILIZATION busy is idle, 0 W is a power; a NaN or negative power is no
    evidence at all."""
    at_bound = IdleBaseline()
    for _ in range(3):
        at_bound.observe(0.05, 40.0, rated_w=None)
    assert (at_bound.watts, at_bound.origin) == (40.0, IdleOrigin.LEARNED)
    off = IdleBaseline()
    for _ in range(3):
        off.observe(0.0, 0.0, rated_w=100.0)
    assert (off.watts, off.origin) == (0.0, IdleOrigin.LEARNED)
    broken = IdleBaseline()
    for watts in (float("nan"), -5.0, float("nan")):
        broken.observe(0.0, watts, rated_w=100.0)
    # nothing learned from them, not even the rating that came with them
    assert (broken.watts, broken.origin) == (0.0, IdleOrigin.PRIOR)


def test_a_rating_is_kept_until_a_positive_one_replaces_it() -> None:
    """NVML answers 0 for a power limit it does not know: that must not drop the rating the
    prior is a share of (the prior would fall to a share of the peak seen)."""
    baseline = IdleBaseline()
    baseline.observe(0.9, 300.0, rated_w=700.0)
    baseline.observe(0.9, 300.0, rated_w=0.0)
    assert baseline.watts == PRIOR_SHARE * 700.0
    small = IdleBaseline()
    small.observe(0.9, 0.8, rated_w=1.0)  # a one-watt rail
    assert small.watts == PRIOR_SHARE * 1.0
