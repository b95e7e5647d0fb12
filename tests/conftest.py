from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.fixturehost import FixtureHost
from tests.support.paths import FIXTURES
from tests.support.running import ExporterProcess, start_exporter

# CI replays the same examples on every run, so a landing never depends on luck; locally every
# run explores new ones (and keeps failures in .hypothesis/ to replay them).
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")

StartExporter = Callable[..., ExporterProcess]


@pytest.fixture
def host(tmp_path: Path) -> FixtureHost:
    """A writable copy of the checked-in sys/proc fixture trees."""
    return FixtureHost.copy_of(FIXTURES, tmp_path / "host")


@pytest.fixture
def exporter(tmp_path: Path) -> Iterator[StartExporter]:
    """Starts `wattprobe serve ARGS...` subprocesses on free loopback ports; stops them after."""
    started: list[ExporterProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> ExporterProcess:
        proc = start_exporter(list(args), log_dir=tmp_path, env=env)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.stop()
