"""Scenario files for the fake NVML: key=value lines (see fake_nvml.c for the keys).

Tests copy a fixture from tests/fixtures/nvml/, point $WATTPROBE_FAKE_NVML_SCENARIO at the copy,
change values and write() it; the fake re-reads the file when it changes (atomic rename, so a
reader never sees half a file).
"""

from __future__ import annotations

import os
from pathlib import Path

from tests.sources.gpu.nvml.build import SCENARIO_ENV
from tests.support.paths import FIXTURES

FIXTURES = FIXTURES / "nvml"


def parse(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


class Scenario:
    def __init__(self, path: Path, values: dict[str, str]) -> None:
        self.path = path
        self.values = values

    @classmethod
    def from_fixture(cls, name: str, path: Path) -> Scenario:
        """A writable copy of tests/fixtures/nvml/<name>.nvml at path (written at once)."""
        scenario = cls(path, parse((FIXTURES / f"{name}.nvml").read_text()))
        scenario.write()
        return scenario

    def env(self) -> dict[str, str]:
        return {SCENARIO_ENV: str(self.path)}

    def write(self) -> None:
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text("".join(f"{k}={v}\n" for k, v in self.values.items()))
        os.replace(tmp, self.path)

    def __getitem__(self, key: str) -> str:
        return self.values[key]

    def __setitem__(self, key: str, value: str | int) -> None:
        self.values[key] = str(value)

    def __delitem__(self, key: str) -> None:
        del self.values[key]

    def __contains__(self, key: object) -> bool:
        return key in self.values

    def number(self, key: str) -> int:
        return int(self.values[key], 0)

    def add(self, key: str, delta: int) -> None:
        self[key] = self.number(key) + delta

    def add_energy_j(self, gpu: int, joules: float) -> None:
        self.add(f"gpu.{gpu}.energy_mj", round(joules * 1000))

    def add_event(self, gpu: int, xid: int) -> None:
        n = 0
        while f"event.{n}.xid" in self.values:
            n += 1
        self[f"event.{n}.gpu"] = gpu
        self[f"event.{n}.xid"] = xid

    def gpu_count(self) -> int:
        n = 0
        while f"gpu.{n}.uuid" in self.values:
            n += 1
        return n
