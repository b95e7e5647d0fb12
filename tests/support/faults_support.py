"""Helpers for fault-injection tests: watch a running exporter's counters across intervals."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from tests.support.running import Samples, parse_samples, select

EPS_J = 1e-6  # float noise allowed on a sum of joules


def node_energy(samples: Samples, source: str, device: str) -> float:
    """A node zone's measured energy (active + idle), or 0 before its series exists."""
    return sum(
        select(samples, "wattprobe_node_energy_joules_total", source=source, device=device).values()
    )


def source_up(samples: Samples, source: str) -> tuple[float, str]:
    """(value, reason) of wattprobe_source_up for one source."""
    found = select(samples, "wattprobe_source_up", source=source)
    assert len(found) == 1, f"{source}: {found}"
    labels, value = next(iter(found.items()))
    return value, dict(labels)["reason"]


class Serving(Protocol):
    """An exporter under test: a subprocess (tests.support.running) or in-process
    (tests.support.inprocess)."""

    def wait_next_interval(self, timeout: float = 30.0) -> str: ...


@dataclass
class CounterWatch:
    """Scrapes an exporter once per new interval and checks that no counter ever went back.

    Every sample whose name ends in _total is compared with the previous scrape.
    """

    exporter: Serving
    last: Samples = field(default_factory=dict)
    scrapes: int = 0

    def next(self, intervals: int = 2) -> Samples:
        """Samples after `intervals` new intervals (2: a change made now has been read)."""
        body = ""
        for _ in range(intervals):
            body = self.exporter.wait_next_interval()
        return self.check(parse_samples(body))

    def check(self, samples: Samples) -> Samples:
        for key, value in samples.items():
            name = key[0]
            assert not math.isnan(value), key
            if name.endswith("_total") and key in self.last:
                assert value >= self.last[key] - EPS_J, (
                    f"{key} went back: {self.last[key]} -> {value}"
                )
        self.last = samples
        self.scrapes += 1
        return samples
