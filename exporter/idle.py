"""Idle power baselines, learned per zone from what the zone drew at different activity levels."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

DEFAULT_WINDOW = 720  # intervals: an hour at the default 5 s
MIN_FIT_SAMPLES = 10
MIN_FIT_SPREAD = 0.1  # utilization range needed before a line fit means anything
LOW_PERCENTILE = 0.05


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of a non-empty sequence."""
    ordered = sorted(values)
    rank = min(len(ordered) - 1, max(0, int(q * len(ordered))))
    return ordered[rank]


def learn_idle_power(samples: Sequence[tuple[float, float]]) -> float:
    """A zone's idle power from (utilization 0..1, power W) samples.

    With enough spread in utilization, fit P = a + b*u by least squares and take the intercept a
    (what the zone draws at zero activity), capped by the low percentile of observed power. Without
    that spread, or when the fit is not physical (a <= 0 or b <= 0), the low percentile itself: a
    node that never idled keeps more energy as idle, never less, until it is seen at lower load.
    Positive whenever the zone drew power.
    """
    if not samples:
        return 0.0
    powers = [p for _, p in samples]
    low = percentile(powers, LOW_PERCENTILE)
    utils = [u for u, _ in samples]
    if len(samples) < MIN_FIT_SAMPLES or max(utils) - min(utils) < MIN_FIT_SPREAD:
        return low
    n = len(samples)
    mean_u = sum(utils) / n
    mean_p = sum(powers) / n
    var_u = sum((u - mean_u) ** 2 for u in utils)
    cov = sum((u - mean_u) * (p - mean_p) for u, p in samples)
    slope = cov / var_u
    intercept = mean_p - slope * mean_u
    if slope <= 0 or intercept <= 0:
        return low
    return min(intercept, low)


class IdleBaseline:
    """One zone's idle power: fixed when configured, else learned over a sliding window."""

    def __init__(self, fixed_w: float | None = None, window: int = DEFAULT_WINDOW) -> None:
        self.fixed_w = fixed_w
        self._samples: deque[tuple[float, float]] = deque(maxlen=window)
        self._learned: float | None = None

    def observe(self, utilization: float, power_w: float) -> None:
        if self.fixed_w is None and power_w >= 0:
            self._samples.append((utilization, power_w))
            self._learned = None

    @property
    def watts(self) -> float:
        if self.fixed_w is not None:
            return self.fixed_w
        if self._learned is None:
            self._learned = learn_idle_power(self._samples)
        return self._learned
