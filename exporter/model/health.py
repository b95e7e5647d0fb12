"""What the exposition shows of each device's meter (exporter/accounting/meter.py): its read
health, its rejected readings by reason and its idle baseline with where it came from."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

UNREADABLE = "unreadable"  # the source could not read or parse the device this interval
IMPLAUSIBLE = "implausible"  # out of range, or a jump the device cannot draw in the time
RESET = "reset"  # a counter went back without a wrap
REJECT_REASONS = (UNREADABLE, IMPLAUSIBLE, RESET)


class IdleOrigin(StrEnum):
    """Where an idle baseline comes from."""

    LEARNED = "learned"
    CONFIGURED = "configured"
    PRIOR = "prior"
    MODEL = "model"  # a model's power at zero load (the estimate, exporter/sources/power/cpumodel)


@dataclass(frozen=True, slots=True)
class MeterHealth:
    """One meter: read health, rejections, idle baseline."""

    up: bool
    rejected: tuple[tuple[str, int], ...]  # (reason, count), cumulative
    idle_w: float
    idle_origin: IdleOrigin
