"""Fixtures for the NVML tests: the fake libnvidia-ml.so.1 built with gcc, and its scenarios."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.sources.gpu.nvml.build import LIBRARY, SCENARIO_ENV, build_fake_nvml
from tests.sources.gpu.nvml.scenario import Scenario
from tests.support.realparts import require_binary

LoadScenario = Callable[[str], Scenario]


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the fake libnvidia-ml.so.1: put it on LD_LIBRARY_PATH."""
    gcc = require_binary("gcc")
    return build_fake_nvml(tmp_path_factory.mktemp("fake-nvml"), gcc)


@pytest.fixture(scope="session")
def fake_nvml_in_process(fake_nvml_dir: Path) -> Path:
    """Loads the fake into this process. pynvml's dlopen("libnvidia-ml.so.1") then finds it by
    its soname, exactly as a subprocess finds it through LD_LIBRARY_PATH."""
    ctypes.CDLL(str(fake_nvml_dir / LIBRARY), mode=ctypes.RTLD_GLOBAL)
    return fake_nvml_dir


@pytest.fixture
def scenario(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_nvml_in_process: Path
) -> LoadScenario:
    """Copies a fixture scenario and points the in-process fake at it."""

    def load(name: str) -> Scenario:
        loaded = Scenario.from_fixture(name, tmp_path / f"{name}.nvml")
        monkeypatch.setenv(SCENARIO_ENV, str(loaded.path))
        return loaded

    return load


@pytest.fixture
def exporter_env(fake_nvml_dir: Path) -> Callable[[Scenario], dict[str, str]]:
    """The environment that makes an exporter subprocess load the fake with a scenario."""

    def env(scenario: Scenario) -> dict[str, str]:
        return {"LD_LIBRARY_PATH": str(fake_nvml_dir), **scenario.env()}

    return env
