"""Delivery through the edge forwarder, checked against wattprobe's own interval counter.

The ground truth is the agent's wattprobe_intervals_total read from its /metrics around each
event (tests/monitoring/test_edge_vmagent.py, and the 10-minute soak in
tests/benchmarks/edge_queue.py):
every count the agent showed while a forwarder ran must reach the receiver, once, in order,
and increase() over the run must be exact across the agent's restarts.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.edgeforwarder import (
    Forwarder,
    Receiver,
    Shipped,
    raw_samples,
    shipped_forwarder,
    start_forwarder,
    wait_until,
)
from tests.support.fixturehost import FixtureHost
from tests.support.running import ExporterProcess, _interval_count, start_exporter

NODE = "edge-node-1"
# wattprobe's --interval as the edge DaemonSet ships it (serve's default, scraped every 1 s by
# the forwarder: each interval is read about 5 times). vmagent 1.79 drops the one block (one
# 1 s scrape) its sender holds when it is stopped or killed while the receiver is unreachable
# (docs/install.md, "What a restart costs"): at this pairing that never costs an interval.
AGENT_INTERVAL = "5s"
SERIES = f'wattprobe_intervals_total{{job="wattprobe",node="{NODE}",instance="{NODE}"}}'


@dataclass
class Truth:
    """wattprobe's interval counts as the test read them, per agent lifetime (a restarted
    agent starts counting again: a counter reset)."""

    epochs: list[list[int]] = field(default_factory=lambda: [[]])
    # counts that were on the agent's /metrics only while no forwarder ran (between the read
    # just before a stop and the read just after the new forwarder was ready): nothing could
    # scrape them, so no queue can deliver them; the counter carries their increase
    unscrapable: list[set[int]] = field(default_factory=lambda: [set()])

    def read(self, agent: ExporterProcess) -> int:
        count = int(_interval_count(agent.metrics()))
        self.epochs[-1].append(count)
        return count

    def restarted(self) -> None:
        self.epochs.append([])
        self.unscrapable.append(set())

    def down(self, before: int, after: int) -> None:
        self.unscrapable[-1] |= set(range(before + 1, after))

    def expected(self) -> list[set[int]]:
        """Every count from the first read to the last one, per lifetime, less the ones no
        forwarder was up to scrape."""
        return [
            set(range(min(e), max(e) + 1)) - gone
            for e, gone in zip(self.epochs, self.unscrapable, strict=True)
            if e
        ]


def received_points(receiver: Receiver) -> list[tuple[float, float]]:
    samples = raw_samples(receiver.api, SERIES, 900)
    assert len(samples) == 1, f"one series for the node, with node and instance: {samples}"
    (points,) = samples.values()
    return points


def _epochs(points: list[tuple[float, float]]) -> list[list[float]]:
    """The received values split where the counter went down (the agent's restarts)."""
    out: list[list[float]] = [[points[0][1]]] if len(points) == 1 else [[]]
    for (_, a), (_, b) in itertools.pairwise(points):
        if not out[-1]:
            out[-1].append(a)
        if b < a:
            out.append([])
        out[-1].append(b)
    return out


def check_delivery(points: list[tuple[float, float]], truth: Truth, receiver: Receiver) -> None:
    stamps = [t for t, _ in points]
    assert stamps == sorted(set(stamps)), "duplicate or out-of-order samples at the receiver"
    got = _epochs(points)
    want = truth.expected()
    assert len(got) == len(want), (
        f"{len(got) - 1} counter resets, the agent restarted {len(want) - 1} times"
    )
    # a restart leaves no forwarder for at most a few seconds (vmagent waits up to 5 s for a
    # request in flight on SIGTERM): at most 2 of the agent's 5 s intervals per restart
    assert all(len(gone) <= 2 * 2 for gone in truth.unscrapable), truth.unscrapable
    for n, (values, expected) in enumerate(zip(got, want, strict=True)):
        assert all(b >= a for a, b in itertools.pairwise(values)), f"lifetime {n}: {values}"
        lost = sorted(expected - {int(v) for v in values})
        assert not lost, f"lifetime {n}: intervals {lost} never reached the receiver"
    # increase() over exactly the received span (no extrapolation): the counted intervals, the
    # reset included; resets() sees each agent restart once
    span_s = stamps[-1] - stamps[0]
    at = stamps[-1]
    (inc,) = receiver.api.query(f"increase({SERIES}[{span_s * 1000:.0f}ms])", at=at)
    (resets,) = receiver.api.query(f"resets({SERIES}[{span_s * 1000:.0f}ms])", at=at)
    counted = sum(e[-1] - e[0] for e in got) + sum(e[0] for e in got[1:])
    assert float(inc["value"][1]) == pytest.approx(counted), (inc, counted)
    assert int(float(resets["value"][1])) == len(want) - 1


@dataclass
class Stack:
    host: FixtureHost
    tmp: Path
    shipped: Shipped = field(default_factory=shipped_forwarder)
    truth: Truth = field(default_factory=Truth)

    def agent(self, port: int | None = None) -> ExporterProcess:
        """wattprobe serve on the fixture host; `port`: the same node's agent again. The caller
        stops it (by its process)."""
        args = [*self.host.args(), "--interval", AGENT_INTERVAL]
        return start_exporter(args, log_dir=self.tmp, port=port)

    def forwarder(self, agent_port: int, url: str, port: int | None = None) -> Forwarder:
        return start_forwarder(
            self.shipped,
            self.tmp / "forwarder",
            agent_port=agent_port,
            receiver_url=url,
            node=NODE,
            port=port,
        )


def settle(receiver: Receiver, truth: Truth, agent: ExporterProcess, timeout: float) -> None:
    """Wait until the receiver holds the agent's current count in its current lifetime (the
    backlog replayed)."""
    target = truth.read(agent)
    lifetimes = len(truth.epochs)

    def arrived() -> bool:
        samples = raw_samples(receiver.api, SERIES, 900)
        if len(samples) != 1:
            return False
        got = _epochs(next(iter(samples.values())))
        return len(got) >= lifetimes and max(got[lifetimes - 1]) >= target

    wait_until(arrived, timeout, "replay", interval=1.0)


# the forwarder's scrape interval plus its -remoteWrite.flushInterval, with a margin: a count
# on display this long has been scraped and its block handed to the queue
SCRAPED_AND_FLUSHED_S = 2.5


def scrape_seen(agent: ExporterProcess, truth: Truth) -> int:
    """The last count the forwarder is sure to hold before it goes down: read the agent's
    count, then wait for a scrape and a flush. A count that appears during the wait may still
    be in the forwarder's memory (scraped less than a flush interval before a SIGKILL, which
    loses it as a power cut would), so the caller passes the first read to Truth.down and the
    later counts are left out of what must arrive."""
    seen = truth.read(agent)
    time.sleep(SCRAPED_AND_FLUSHED_S)
    truth.read(agent)
    return seen
