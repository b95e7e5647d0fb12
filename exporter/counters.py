"""Deltas of hardware energy counters: wraparound, resets and implausible jumps."""

from __future__ import annotations

# No single power domain we read (a CPU package, a DRAM channel, a GPU) draws more than this.
# A delta that implies more is a reset or garbage, never energy to hand out.
MAX_PLAUSIBLE_POWER_W = 5_000.0


def counter_delta_uj(
    prev_uj: int,
    cur_uj: int,
    max_range_uj: int | None,
    dt_s: float,
    max_power_w: float = MAX_PLAUSIBLE_POWER_W,
) -> int | None:
    """Energy in microjoules between two readings of a cumulative counter.

    Returns None when the step cannot be trusted (counter reset by a driver reload, a value
    that jumped further than the domain can draw): the caller re-baselines and counts nothing
    for that interval rather than inventing a negative or giant delta. Pass max_range_uj=None
    when a lower value must not be read as a wrap (e.g. after a gap in the readings).
    """
    limit_uj = max_power_w * max(dt_s, 1e-3) * 1e6
    if cur_uj >= prev_uj:
        delta = cur_uj - prev_uj
        return delta if delta <= limit_uj else None
    if max_range_uj is not None and max_range_uj > prev_uj:
        # The counter ran past max_range and restarted at zero. One wrap is all we can see:
        # two wraps within an interval would need ~max_range of energy, which the limit rules out.
        wrapped = max_range_uj - prev_uj + cur_uj
        if wrapped <= limit_uj:
            return wrapped
    return None


def integrate_power_j(prev_w: float, cur_w: float, dt_s: float) -> float:
    """Energy over an interval from power read at its two ends (trapezoid rule)."""
    return max(0.0, (prev_w + cur_w) / 2.0) * max(dt_s, 0.0)
