"""Idle power baselines, learned per device only from evidence that the device was idle.

A device's idle power is what it draws doing nothing. It is learned from:

1. intervals in which the device was (nearly) idle: utilization at most IDLE_UTILIZATION; the
   median power of those intervals (kept apart from the busy ones, so days of load never push
   them out);
2. else, when utilization has spread widely enough, the intercept of a line P = a + b*u fitted to
   the window's samples (what the device would draw at u = 0), if it is physical;
3. else a prior: PRIOR_SHARE of the device's rated power (a GPU's power limit), or of the highest
   power seen when no rating is known. Low on purpose: a device never seen idle bills most of its
   energy as active, never a sliver (docs/attribution.md says where the number comes from).

Sustained load is never evidence of idleness: the low percentile of a busy device's power is its
load, not its idle.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence

from exporter.model.health import IdleOrigin

DEFAULT_WINDOW = 720  # intervals: an hour at the default 5 s
IDLE_UTILIZATION = 0.05  # at most this busy counts as evidence of idleness
MIN_IDLE_SAMPLES = 3
MIN_FIT_SAMPLES = 30
MIN_FIT_SPREAD = 0.3  # utilization range a line fit needs before its intercept means anything
# NVIDIA data-centre GPUs idle at about 8-15 % of their power limit in P0 and server CPU packages
# at 10-30 % of their peak; 5 % stays below both, so the prior never makes load look idle.
PRIOR_SHARE = 0.05


def fitted_intercept(samples: Sequence[tuple[float, float]]) -> float | None:
    """Power at zero utilization from (utilization, power) samples, or None if the line fit has
    too little spread to mean anything or is not physical (slope or intercept not positive, or an
    intercept above the lowest power seen)."""
    if len(samples) < MIN_FIT_SAMPLES:
        return None
    utils = [u for u, _ in samples]
    if max(utils) - min(utils) < MIN_FIT_SPREAD:
        return None
    powers = [p for _, p in samples]
    n = len(samples)
    mean_u = sum(utils) / n
    mean_p = sum(powers) / n
    var_u = sum((u - mean_u) ** 2 for u in utils)
    cov = sum((u - mean_u) * (p - mean_p) for u, p in samples)
    slope = cov / var_u
    intercept = mean_p - slope * mean_u
    if slope <= 0 or not 0 < intercept <= min(powers):
        return None
    return intercept


class IdleBaseline:
    """One device's idle power: configured, learned from idleness, or the prior."""

    def __init__(
        self,
        fixed_w: float | None = None,
        window: int = DEFAULT_WINDOW,
        fixed_origin: IdleOrigin = IdleOrigin.CONFIGURED,
    ) -> None:
        self.fixed_w = fixed_w
        self.fixed_origin = fixed_origin  # what a fixed baseline is: configured, or a model's
        self._samples: deque[tuple[float, float]] = deque(maxlen=window)
        self._idle_powers: deque[float] = deque(maxlen=window)
        self._rated_w: float | None = None
        self._peak_w = 0.0
        self._learned: tuple[float, IdleOrigin] | None = None

    def observe(self, utilization: float | None, power_w: float, rated_w: float | None) -> None:
        """One interval: the device's mean power and utilization (None: not known)."""
        if self.fixed_w is not None or not power_w >= 0:
            return
        if rated_w is not None and rated_w > 0:
            self._rated_w = rated_w
        self._peak_w = max(self._peak_w, power_w)
        if utilization is not None:
            self._samples.append((utilization, power_w))
            if utilization <= IDLE_UTILIZATION:
                self._idle_powers.append(power_w)
        self._learned = None

    @property
    def watts(self) -> float:
        return self.current()[0]

    @property
    def origin(self) -> IdleOrigin:
        return self.current()[1]

    def current(self) -> tuple[float, IdleOrigin]:
        if self.fixed_w is not None:
            return self.fixed_w, self.fixed_origin
        if self._learned is None:
            self._learned = self._learn()
        return self._learned

    def _learn(self) -> tuple[float, IdleOrigin]:
        if len(self._idle_powers) >= MIN_IDLE_SAMPLES:
            return statistics.median(self._idle_powers), IdleOrigin.LEARNED
        intercept = fitted_intercept(self._samples)
        if intercept is not None:
            return intercept, IdleOrigin.LEARNED
        return PRIOR_SHARE * (self._rated_w or self._peak_w), IdleOrigin.PRIOR
