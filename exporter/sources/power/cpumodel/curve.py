"""Power as a function of CPU load: Boavizta's logarithmic CPU curve, fitted to a TDP the way
boaviztapi fits it, and the straight lines of the older models.

Boavizta models one CPU package as P(x) = a * ln(b * (x + c)) + d, x the load in percent, with
(a, b, c, d) per model range fitted on SPECpower results. Given a CPU's TDP it refits the curve
to the points (0, 10, 50, 100 %) -> TDP * (0.12, 0.32, 0.75, 1.02), starting from the range's
curve, each parameter bounded to [p - 2|p|, p + 2|p|] (scipy's curve_fit). a * ln(b) + d is one
constant, so the curve is a * ln(x + c) + k: for a fixed c the best (a, k) is a linear least
squares, and one bounded scan over c finds the fit without scipy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

_SCAN = 400  # c values scanned (log-spaced) before the golden-section refinement
_REFINE = 60


@dataclass(frozen=True, slots=True)
class LogCurve:
    """Watts of one CPU package at load x percent: max(a * ln(x + c) + k, floor_w)."""

    a: float
    c: float
    k: float
    floor_w: float = 1.0  # boaviztapi's MIN_POWER: a fitted curve never goes below 1 W

    @classmethod
    def from_profile(cls, a: float, b: float, c: float, d: float, floor_w: float) -> LogCurve:
        return cls(a=a, c=c, k=a * math.log(b) + d, floor_w=floor_w)

    def watts(self, load_pct: float) -> float:
        x = min(max(load_pct, 0.0), 100.0)
        return max(self.a * math.log(x + self.c) + self.k, self.floor_w)


@dataclass(frozen=True, slots=True)
class Fit:
    """The base curve's parameters and the points it is refitted to."""

    a0: float
    c0: float
    loads: tuple[float, ...]
    watts: tuple[float, ...]


def _best_ak(
    ts: Sequence[float], ys: Sequence[float], a_lo: float, a_hi: float
) -> tuple[float, float, float]:
    """(a, k, squared error) of y ~ a * t + k with a in [a_lo, a_hi]: the objective is a convex
    quadratic, so clipping a and refitting k gives the bounded optimum."""
    n = len(ts)
    mt = sum(ts) / n
    my = sum(ys) / n
    var = sum((t - mt) ** 2 for t in ts)
    cov = sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True))
    a = cov / var if var > 0 else a_lo
    a = min(max(a, a_lo), a_hi)
    k = my - a * mt
    err = sum((a * t + k - y) ** 2 for t, y in zip(ts, ys, strict=True))
    return a, k, err


def _error_at(fit: Fit, c: float, a_lo: float, a_hi: float) -> tuple[float, float, float]:
    ts = [math.log(x + c) for x in fit.loads]
    return _best_ak(ts, fit.watts, a_lo, a_hi)


def fit_log_curve(fit: Fit, floor_w: float) -> LogCurve:
    """Least-squares a * ln(x + c) + k through fit's points, a and c within Boavizta's bounds."""
    a_lo, a_hi = max(0.0, fit.a0 - 2 * abs(fit.a0)), fit.a0 + 2 * abs(fit.a0)
    c_lo, c_hi = max(0.0, fit.c0 - 2 * abs(fit.c0)), fit.c0 + 2 * abs(fit.c0)
    c_lo = max(c_lo, 1e-6 * max(c_hi, 1.0))  # ln(0 + c) needs c > 0
    if c_hi <= c_lo:
        a, k, _ = _error_at(fit, c_lo, a_lo, a_hi)
        return LogCurve(a=a, c=c_lo, k=k, floor_w=floor_w)
    ratio = c_hi / c_lo
    grid = [c_lo * ratio ** (i / (_SCAN - 1)) for i in range(_SCAN)]
    errs = [_error_at(fit, c, a_lo, a_hi)[2] for c in grid]
    best = min(range(_SCAN), key=errs.__getitem__)
    lo, hi = grid[max(best - 1, 0)], grid[min(best + 1, _SCAN - 1)]
    inv_phi = (math.sqrt(5) - 1) / 2
    for _ in range(_REFINE):  # golden section between the scan's neighbours
        m1 = hi - inv_phi * (hi - lo)
        m2 = lo + inv_phi * (hi - lo)
        if _error_at(fit, m1, a_lo, a_hi)[2] <= _error_at(fit, m2, a_lo, a_hi)[2]:
            hi = m2
        else:
            lo = m1
    c = (lo + hi) / 2
    a, k, _ = _error_at(fit, c, a_lo, a_hi)
    return LogCurve(a=a, c=c, k=k, floor_w=floor_w)


@dataclass(frozen=True, slots=True)
class NodeCurve:
    """A node's CPU power: `share` of a package's curve (the node's threads over the package's),
    as a function of the node's busy fraction u in 0..1."""

    package: LogCurve
    share: float

    def watts(self, busy: float) -> float:
        return self.share * self.package.watts(100.0 * busy)

    @property
    def idle_w(self) -> float:
        return self.watts(0.0)

    @property
    def max_w(self) -> float:
        return self.watts(1.0)


@dataclass(frozen=True, slots=True)
class LinearCurve:
    """P = idle + (max - idle) * u: Cloud Carbon Footprint's per-vCPU model and the flags."""

    idle_w: float
    max_w: float

    def watts(self, busy: float) -> float:
        u = min(max(busy, 0.0), 1.0)
        return self.idle_w + (self.max_w - self.idle_w) * u


@dataclass(frozen=True, slots=True)
class MemoryCurve:
    """Boavizta's memory model: full_w at full load, idle_ratio of it at idle, linear between."""

    full_w: float
    idle_ratio: float

    def watts(self, busy: float) -> float:
        u = min(max(busy, 0.0), 1.0)
        return self.full_w * (self.idle_ratio + (1.0 - self.idle_ratio) * u)

    @property
    def idle_w(self) -> float:
        return self.watts(0.0)

    @property
    def max_w(self) -> float:
        return self.watts(1.0)
