from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from tests.support import running
from tests.support.fixturehost import FixtureHost
from tests.support.paths import FIXTURES
from tests.support.running import ExporterProcess, start_exporter

# CI replays the same examples on every run, so a landing never depends on luck; locally every
# run explores new ones (and keeps failures in .hypothesis/ to replay them: a case found that way
# becomes an explicit @example). No deadline in either: the machines are shared (2 cores, many
# jobs), and a slow example is not a wrong one (speed is measured by `make bench`).
settings.register_profile("ci", derandomize=True, print_blob=True, deadline=None)
settings.register_profile("local", deadline=None)
# `make mutate` (tests/mutate): the same examples for every mutant, so a rerun gives the same
# verdicts, few of them and no shrinking (a mutant needs only to fail, not a minimal example)
settings.register_profile(
    "mutate",
    derandomize=True,
    deadline=None,
    database=None,
    max_examples=30,
    phases=(Phase.explicit, Phase.generate),
)
if os.environ.get("WATTPROBE_HYPOTHESIS_PROFILE") == "mutate":
    settings.load_profile("mutate")
else:
    settings.load_profile("ci" if os.environ.get("CI") == "true" else "local")

StartExporter = Callable[..., ExporterProcess]


@pytest.fixture(autouse=True, scope="module")
def _container_series(request: pytest.FixtureRequest) -> Iterator[None]:
    """Exporters started by a module marked container_series serve per-container series
    (--collector.container); every other module's run serve's defaults (tests/running.py).
    Module scope, so that module-scoped exporters get it too."""
    if request.node.get_closest_marker("container_series") is None:
        yield
        return
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(running, "TEST_ARGS", running.CONTAINER_SERIES)
        yield


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
