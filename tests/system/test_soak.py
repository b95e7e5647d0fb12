"""A short soak (tests/support/soak.py): 1,500 container start/stop cycles in about 45 s while two
scrapers read /metrics thousands of times. Zero scrape errors, no counter back, every container
seen, the series count back to its baseline after the retention, RSS growth under 10 %.
The 10-minute, 10,000-cycle run: python -m tests.benchmarks.soak (docs/benchmarks-soak.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fixturehost import FixtureHost
from tests.support.soak import SoakOptions, soak

SHORT = SoakOptions(
    cycles=1_500,
    duration_s=45.0,
    lifetime_s=1.0,
    retention_s=1.5,
    scrape_pause_s=0.02,
    warm_fraction=0.3,
)


@pytest.mark.slow
def test_short_soak(host: FixtureHost, tmp_path: Path) -> None:
    figures = soak(host, SHORT, tmp_path)
    print(f"\n{figures.table()}")
    assert figures.scrape_errors == 0, figures.errors
    assert figures.counters_back == 0, figures.errors
    assert figures.scrapes >= 1_000, figures
    assert figures.containers_seen == SHORT.cycles, figures
    assert figures.peak_series > figures.baseline_series
    assert figures.end_series == figures.baseline_series, figures
    assert figures.rss_growth < 0.10, figures.table()
