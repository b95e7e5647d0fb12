"""Debian's real prometheus scrapes a running exporter; rate() of the energy counters is power."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import StartExporter
from tests.support.fixturehost import FixtureHost
from tests.support.promserver import Prometheus, start_prometheus

PACKAGE_W = 100.0
DRAM_W = 10.0


class PowerDriver:
    """Advances RAPL counters as a function of wall-clock time, and one process's CPU time."""

    def __init__(self, host: FixtureHost) -> None:
        self.host = host
        self.stop = threading.Event()
        self.base = {d: host.energy_uj(d) for d in ("intel-rapl:0", "intel-rapl:0:1")}
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        start = time.monotonic()
        while not self.stop.wait(0.1):
            elapsed = time.monotonic() - start
            self.host.set_energy_uj(
                "intel-rapl:0", self.base["intel-rapl:0"] + round(PACKAGE_W * elapsed * 1e6)
            )
            self.host.set_energy_uj(
                "intel-rapl:0:1", self.base["intel-rapl:0:1"] + round(DRAM_W * elapsed * 1e6)
            )
            self.host.add_process_ticks(1001, 3)
            self.host.add_process_ticks(1101, 1)
            self.host.add_cpu_ticks(busy=4, idle=36)


@pytest.fixture
def driven(host: FixtureHost) -> Iterator[FixtureHost]:
    driver = PowerDriver(host)
    driver.thread.start()
    yield host
    driver.stop.set()
    driver.thread.join(timeout=5)


def value(result: list[dict[str, object]]) -> float:
    assert len(result) == 1, result
    return float(result[0]["value"][1])  # type: ignore[index]


def test_prometheus_rate_of_energy_is_the_driven_power(
    driven: FixtureHost, exporter: StartExporter, tmp_path: Path
) -> None:
    proc = exporter(*driven.args(), "--interval", "1s", "--power.idle", "0")
    prom: Prometheus = start_prometheus(tmp_path / "prom", [f"127.0.0.1:{proc.port}"])
    try:
        prom.wait_for_samples(
            'wattprobe_node_energy_joules_total{device="intel-rapl:0",mode="active"}',
            24,
            timeout=90,
        )
        node = 'wattprobe_node_energy_joules_total{source="rapl",mode="active"'
        package = value(prom.query(f'rate({node},device="intel-rapl:0"}}[20s])'))
        dram = value(prom.query(f'rate({node},device="intel-rapl:0:1"}}[20s])'))
        assert package == pytest.approx(PACKAGE_W, rel=0.08)
        assert dram == pytest.approx(DRAM_W, rel=0.08)
        # the same sums balance in Prometheus: containers == node, per zone
        for zone in ("package", "dram"):
            containers = value(
                prom.query(
                    f'sum(rate(wattprobe_container_energy_joules_total{{zone="{zone}",mode="active"}}[20s]))'
                )
            )
            total = value(prom.query(f'sum(rate({node},zone="{zone}"}}[20s]))'))
            assert containers == pytest.approx(total, rel=1e-6)
        # nginx did 3 of every 4 ticks: it gets three quarters of the package power
        nginx_id = "a1" * 32
        series = (
            f'wattprobe_container_energy_joules_total{{zone="package",container_id="{nginx_id}"}}'
        )
        nginx = value(prom.query(f"rate({series}[20s])"))
        assert nginx == pytest.approx(0.75 * PACKAGE_W, rel=0.1)
        assert value(prom.query("up")) == 1.0
    finally:
        prom.stop()
