"""The soak: container churn while /metrics is scraped, for 10 minutes by default.

    python -m tests.benchmarks.soak                      # 10,000 cycles over 600 s
    python -m tests.benchmarks.soak --duration 3600 --cycles 60000

What it does and measures: tests/support/soak.py. The figures are in docs/benchmarks-soak.md. Exits
1
when a pass criterion fails (a scrape error, a counter back, a container never seen, series not
back to the baseline, RSS growth of 10 % or more).
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from pathlib import Path

from tests.support.fixturehost import FixtureHost
from tests.support.paths import FIXTURES
from tests.support.soak import SoakOptions, soak


def main() -> None:
    defaults = SoakOptions()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=defaults.cycles)
    parser.add_argument("--duration", type=float, default=defaults.duration_s, help="seconds")
    parser.add_argument("--lifetime", type=float, default=defaults.lifetime_s, help="seconds")
    parser.add_argument("--interval", type=float, default=defaults.interval_s, help="seconds")
    parser.add_argument("--retention", type=float, default=defaults.retention_s, help="seconds")
    parser.add_argument("--scrapers", type=int, default=defaults.scrapers)
    args = parser.parse_args()
    options = SoakOptions(
        cycles=args.cycles,
        duration_s=args.duration,
        lifetime_s=args.lifetime,
        interval_s=args.interval,
        retention_s=args.retention,
        scrapers=args.scrapers,
    )
    print(f"python {platform.python_version()}, {platform.machine()}: {options}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        host = FixtureHost.copy_of(FIXTURES, Path(tmp) / "host")
        figures = soak(host, options, Path(tmp))
    print(figures.table())
    failed = [
        what
        for what, bad in (
            ("scrape errors", figures.scrape_errors != 0),
            ("counters went back", figures.counters_back != 0),
            ("containers not seen", figures.containers_seen != figures.cycles),
            ("series not back to baseline", figures.end_series != figures.baseline_series),
            ("RSS growth >= 10 %", not figures.rss_growth < 0.10),
        )
        if bad
    ]
    if failed:
        print(f"FAILED: {', '.join(failed)}; first errors: {figures.errors}")
        sys.exit(1)
    print("PASSED")


if __name__ == "__main__":
    main()
