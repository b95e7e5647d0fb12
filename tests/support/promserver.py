"""Debian's prometheus scraping wattprobe targets: the config writer over
tests.support.monitoringstack."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.monitoringstack import Daemon, PrometheusAPI
from tests.support.monitoringstack import start_prometheus as start_daemon
from tests.support.realparts import require_binary


@dataclass
class Prometheus:
    daemon: Daemon
    api: PrometheusAPI

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api.call("/api/v1/query", {"query": expr})["result"]
        return result

    def wait_for_samples(self, expr: str, count: int, timeout: float = 60.0) -> None:
        """Until `count_over_time(expr)` reaches count (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.daemon.proc.poll() is not None:
                raise AssertionError(f"prometheus exited:\n{self.daemon.log()}")
            got = self.query(f"count_over_time({expr}[10m])")
            if got and max(float(r["value"][1]) for r in got) >= count:
                return
            time.sleep(0.5)
        raise AssertionError(f"fewer than {count} samples of {expr} after {timeout}s")

    def stop(self) -> None:
        self.daemon.stop()


def start_prometheus(
    workdir: Path, targets: list[str], *, scrape_interval: str = "1s"
) -> Prometheus:
    """A prometheus scraping the targets as job "wattprobe" every scrape_interval."""
    binary = require_binary("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    config.write_text(
        f"global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: {scrape_interval}\n"
        "scrape_configs:\n  - job_name: wattprobe\n    static_configs:\n"
        f"      - targets: {json.dumps(targets)}\n"
    )
    daemon = start_daemon(binary, config, workdir)
    return Prometheus(daemon, PrometheusAPI(daemon.url))
