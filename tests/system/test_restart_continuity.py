"""Counter continuity across an exporter restart, through a real Prometheus (docs/reliability.md).

wattprobe's counters live in the process: a restarted exporter starts them from zero, and
Prometheus' rate()/increase() read a lower value as a counter reset and count the new value from
zero. The only energy lost is what no exporter counted: from the old process's last scrape to
the new process's first reading (its baseline). This test restarts the exporter mid-run on the
same address while Debian's prometheus scrapes it every second, and checks that increase() over
a window spanning the restart equals the energy the fixture's RAPL counter advanced in that
window, less at most the restart gap's energy, that Prometheus saw the reset, and that rate()
is never negative. Twice: a clean stop (SIGTERM, a rolling update) and kill -9 (an OOM kill, a
node agent crash), after which the new process must start clean on the same port, its counters
start again once (exactly one reset in the window) and process_start_time_seconds moves.
"""

from __future__ import annotations

import bisect
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.fixturehost import FixtureHost
from tests.support.promserver import Prometheus, start_prometheus
from tests.support.running import ExporterProcess, free_port, start_exporter

WATTS = 20.0
TICK_S = 0.05
INTERVAL_S = 0.5
SCRAPE_S = 1.0
RUN_S = 12.0
DEVICE = "intel-rapl:0"
ENERGY = f'wattprobe_node_energy_joules_total{{source="rapl",device="{DEVICE}"}}'
# Prometheus extrapolates increase() to the window's edges from the samples inside it: at a
# constant 20 W that is exact up to the tick's jitter, a few joules
EXTRAPOLATION_J = 5.0


@dataclass
class Ticker:
    """Advances the fixture's RAPL package counter at WATTS; logs (wall time, joules so far)."""

    host: FixtureHost
    log: list[tuple[float, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        total = 0.0
        self.log.append((time.time(), total))
        while not self.stop.wait(TICK_S):
            self.host.add_energy_j(DEVICE, WATTS * TICK_S)
            total += WATTS * TICK_S
            self.log.append((time.time(), total))

    def joules_at(self, t: float) -> float:
        """The counter's advance at wall time t (linear between ticks)."""
        times = [x for x, _ in self.log]
        i = bisect.bisect_right(times, t)
        if i == 0:
            return 0.0
        if i == len(self.log):
            return self.log[-1][1]
        (t0, j0), (t1, j1) = self.log[i - 1], self.log[i]
        return j0 + (j1 - j0) * (t - t0) / (t1 - t0)


@pytest.fixture
def prometheus_for(tmp_path: Path) -> Iterator[tuple[int, Prometheus]]:
    port = free_port()
    prom = start_prometheus(tmp_path / "prom", [f"127.0.0.1:{port}"], scrape_interval="1s")
    try:
        yield port, prom
    finally:
        prom.stop()


START = "process_start_time_seconds"


def wait_for_new_start(prom: Prometheus, before: float, timeout: float = 30.0) -> None:
    """Until Prometheus has scraped a process_start_time_seconds later than before."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = prom.query(START)
        if got and float(got[0]["value"][1]) > before:
            return
        time.sleep(0.25)
    raise AssertionError(f"process_start_time_seconds still {before} after {timeout}s")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_restart_mid_run_is_a_reset_that_increase_counts(
    host: FixtureHost, tmp_path: Path, prometheus_for: tuple[int, Prometheus], how: str
) -> None:
    port, prom = prometheus_for
    args = [*host.args(), "--interval", f"{INTERVAL_S}s"]
    ticker = Ticker(host)
    thread = threading.Thread(target=ticker.run, daemon=True)
    thread.start()
    first: ExporterProcess | None = None
    second: ExporterProcess | None = None
    try:
        for name in ("first", "second"):
            (tmp_path / name).mkdir()
        first = start_exporter(args, tmp_path / "first", port=port)
        first.wait_next_interval()
        prom.wait_for_samples(ENERGY, 3)
        window_start = time.time()  # inside the first process's life: little extrapolation
        time.sleep(RUN_S)
        stopped_at = time.time()
        first_start = float(prom.api.query(START)[0]["value"][1])
        if how == "sigkill":
            first.proc.send_signal(signal.SIGKILL)  # no shutdown code runs at all
            first.proc.wait(timeout=15)
            assert first.proc.returncode == -signal.SIGKILL
        else:
            first.stop()
            assert first.proc.returncode == 0, first.log()
        time.sleep(2.0)  # the exporter is down for a while, as in a rolling update
        second = start_exporter(args, tmp_path / "second", port=port)
        second.wait_next_interval()
        counting_again_at = time.time()  # the new process has its baseline: counting resumes
        wait_for_new_start(prom, first_start)
        time.sleep(RUN_S)
        ticker.stop.set()
        thread.join(5)
        time.sleep(3 * SCRAPE_S)  # the last increments scraped
        window_end = time.time()
    finally:
        ticker.stop.set()
        for proc in (first, second):
            if proc is not None:
                proc.stop()

    window_ms = int((window_end - window_start) * 1000)  # PromQL durations are whole units
    window_start = window_end - window_ms / 1000
    drawn = ticker.joules_at(window_end) - ticker.joules_at(window_start)
    # not counted by anyone: the old process's increments after its last scrape, the downtime,
    # the new process's start-up until its baseline reading
    gap_j = WATTS * (counting_again_at - stopped_at + SCRAPE_S + INTERVAL_S)
    result = prom.api.query(f"sum(increase({ENERGY}[{window_ms}ms]))", at=window_end)
    counted = float(result[0]["value"][1])
    print(f"\nincrease() {counted:.1f} J; drawn {drawn:.1f} J; gap bound {gap_j:.1f} J")
    assert drawn - gap_j - EXTRAPOLATION_J <= counted <= drawn + EXTRAPOLATION_J, (
        f"increase() {counted:.1f} J, drawn {drawn:.1f} J, restart gap at most {gap_j:.1f} J"
    )
    assert counted > drawn / 2  # the second process's energy is in it, not just the first's
    resets = prom.api.query(f"max(resets({ENERGY}[{window_ms}ms]))", at=window_end)
    # Prometheus saw the restart as one counter reset, and only one: nothing else went back
    assert float(resets[0]["value"][1]) == 1
    assert second is not None and "Traceback" not in second.log(), second.log()
    # the new process's start time is what Prometheus holds at the end, later than the first's
    later = float(prom.api.query(START, at=window_end)[0]["value"][1])
    assert later > first_start, (later, first_start)
    rates = prom.api.query_range(
        f"min(rate({ENERGY}[3s]))", window_start, window_end, step=SCRAPE_S
    )
    values = [float(v) for series in rates for _, v in series["values"]]
    assert values and min(values) >= 0.0, values
    assert max(values) < WATTS * 2  # and no spike at the restart
