"""Debian's prometheus on 127.0.0.1 with a temp config and TSDB, stopped by PID."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.realparts import require_binary
from tests.running import free_port


@dataclass
class Prometheus:
    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as resp:
            payload = json.loads(resp.read())
        assert payload["status"] == "success", payload
        return payload["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.api("query", query=expr)
        result: list[dict[str, Any]] = data["result"]
        return result

    def wait_for_samples(self, expr: str, count: int, timeout: float = 60.0) -> None:
        """Until `count_over_time(expr)` reaches count (bounded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"prometheus exited:\n{self.log_path.read_text()}")
            try:
                got = self.query(f"count_over_time({expr}[10m])")
                if got and max(float(r["value"][1]) for r in got) >= count:
                    return
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"fewer than {count} samples of {expr} after {timeout}s")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def start_prometheus(
    workdir: Path,
    targets: list[str],
    *,
    scrape_interval: str = "1s",
    rule_files: list[Path] | None = None,
    extra_config: str = "",
) -> Prometheus:
    binary = require_binary("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    rules = "".join(f"  - {p}\n" for p in rule_files or [])
    config.write_text(
        f"global:\n  scrape_interval: {scrape_interval}\n  evaluation_interval: {scrape_interval}\n"
        + (f"rule_files:\n{rules}" if rules else "")
        + "scrape_configs:\n  - job_name: wattprobe\n    static_configs:\n"
        + f"      - targets: {json.dumps(targets)}\n"
        + extra_config
    )
    port = free_port()
    log_path = workdir / "prometheus.log"
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    prom = Prometheus(proc, port, log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as resp:
                if resp.status == 200:
                    return prom
        except OSError:
            time.sleep(0.2)
    prom.stop()
    raise AssertionError(f"prometheus not ready:\n{log_path.read_text()}")
