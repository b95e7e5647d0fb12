"""`wattprobe top --once` and without a terminal: screens printed, errors as one line."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

import pytest

from tests.app.top.busynode import BUSY_PODS, BusyNode
from tests.support.fixturehost import FixtureHost
from tests.support.running import REPO, free_port


def top(args: Sequence[str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "top", *args],
        cwd=REPO,
        env={**os.environ, "LD_LIBRARY_PATH": "", "COLUMNS": "80"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.smoke
def test_once_prints_every_row_after_the_first_interval(host: FixtureHost) -> None:
    with BusyNode(host, None):
        result = top(["--once", *host.args(), "--interval", "0.5s", "--power.idle", "0"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("wattprobe top  this node")
    assert max(len(line) for line in lines) <= 80
    header = lines.index(next(line for line in lines if line.startswith("POD ")))
    name_width = lines[header].index("NAMESPACE")
    rows = [
        line[:name_width].strip() for line in lines[header + 1 :] if not line.startswith("sources:")
    ]
    assert rows[:3] == BUSY_PODS
    # --once lists every workload: the fixture's 8 pods and 3 other buckets, nothing cut
    assert not any(line.startswith("+") for line in lines)
    assert {"system_processes", "kernel_processes", "container 9a9a9a9a9a9a"} <= set(rows)
    sources = next(line for line in lines if line.startswith("sources:"))
    assert "nvml" in sources.partition("n/a:")[2].split()  # the node has no NVIDIA GPU
    assert "Traceback" not in result.stderr


def test_once_from_an_unreachable_exporter_fails_in_one_line() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = top(["--once", "--from", url])
    assert result.returncode == 1
    assert result.stderr.strip() == f"wattprobe top: cannot read {url}/metrics: Connection refused"
    assert not result.stdout
    assert "Traceback" not in result.stdout + result.stderr


@pytest.mark.parametrize("url", ["ftp://node:28390", "node:28390", "http://"])
def test_from_needs_an_http_url(url: str) -> None:
    result = top(["--from", url])
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--from" in result.stderr and "Traceback" not in result.stderr
