"""The tables the estimate reads: boavizta.json (generated from boaviztapi by
tests/support/estimatedata.py, shipped as package data) and Cloud Carbon Footprint's coefficients.

Loading parses the JSON into frozen records once; nothing here imports boaviztapi.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

FORMAT = 1
DATA_FILE = "boavizta.json"


@dataclass(frozen=True, slots=True)
class CpuSpec:
    """One row of Boavizta's cpu_specs.csv: a CPU package."""

    name: str
    manufacturer: str
    family: str  # code name (microarchitecture): Skylake, Milan, Graviton2...
    model_range: str  # Xeon Platinum, EPYC...
    tdp_w: float | None
    threads: int | None  # hardware threads of one package


@dataclass(frozen=True, slots=True)
class Profile:
    """A model range's load curve, a * ln(b * (x + c)) + d watts at x percent."""

    manufacturer: str
    model_range: str
    a: float
    b: float
    c: float
    d: float


@dataclass(frozen=True, slots=True)
class Platform:
    """A cloud host: its CPU model, sockets, and threads per CPU where Boavizta states them."""

    cpu_name: str
    units: int
    threads: int | None


@dataclass(frozen=True, slots=True)
class Instance:
    provider: str
    name: str
    vcpu: int
    memory_gb: float
    platform: str


@dataclass(frozen=True, slots=True)
class RamModel:
    dimm_base_w: float
    dimm_w_per_gb: float
    idle_ratio: float
    typical_dimm_gb: tuple[tuple[str, float], ...]
    default_type: str

    def dimm_gb(self, memory_type: str) -> float:
        return dict(self.typical_dimm_gb)[memory_type]


@dataclass(frozen=True, slots=True)
class Tables:
    version: str  # boaviztapi's version the data comes from
    licence: str
    cpus: tuple[CpuSpec, ...]
    profiles: tuple[Profile, ...]
    default_profile: Profile
    tdp_loads: tuple[float, ...]
    tdp_ratios: tuple[float, ...]
    min_power_w: float
    ram: RamModel
    memory_type_by_family: tuple[tuple[str, str], ...]
    platforms: tuple[tuple[str, Platform], ...]
    instances: tuple[Instance, ...]

    def platform(self, name: str) -> Platform | None:
        return dict(self.platforms).get(name)

    def memory_type(self, family: str) -> str:
        """Boavizta's rule: the family's memory type, else its base family's ("Ice Lake-SP" is
        "Ice Lake"), else DDR4."""
        types = dict(self.memory_type_by_family)
        return (
            types.get(family)
            or types.get(family.split("-", maxsplit=1)[0])
            or self.ram.default_type
        )


# Cloud Carbon Footprint's per-vCPU coefficients (watts at 0 % and 100 % load) by
# microarchitecture, from its SPECpower-derived AWS table (cloud-carbon-coefficients, Apache-2.0,
# as carried in Kepler's data/power_data.csv), keyed by Boavizta's family names. CCF's averages
# for an unknown microarchitecture are the old constants, 0.74 and 3.5 W.
CCF_W_PER_VCPU: dict[str, tuple[float, float]] = {
    "Graviton": (0.474, 1.693),
    "Graviton2": (0.474, 1.693),
    "Ivy Bridge": (3.037, 8.249),
    "Sandy Bridge": (2.169, 8.575),
    "Haswell": (1.901, 6.013),
    "Broadwell": (0.713, 3.685),
    "Skylake": (0.645, 4.193),
    "Cascade Lake": (0.639, 3.967),
    "Coffee Lake": (1.138, 5.422),
    "Naples": (0.823, 2.553),  # EPYC 1st Gen
    "Rome": (0.474, 1.693),  # EPYC 2nd Gen
}
CCF_AVERAGE_W_PER_VCPU = (0.74, 3.5)
CCF_MEMORY_W_PER_GB = 0.392  # CCF's memory coefficient, for comparison in docs/faq.md


def _profile(row: list[Any]) -> Profile:
    m, r, a, b, c, d = row
    return Profile(str(m), str(r), float(a), float(b), float(c), float(d))


def parse(raw: dict[str, Any]) -> Tables:
    if raw.get("format") != FORMAT:
        raise ValueError(f"{DATA_FILE}: format {raw.get('format')!r}, expected {FORMAT}")
    k = raw["constants"]
    dp = raw["default_profile"]
    return Tables(
        version=str(raw["source"]["version"]),
        licence=str(raw["source"]["licence"]),
        cpus=tuple(
            CpuSpec(
                name=str(n),
                manufacturer=str(m or ""),
                family=str(f or ""),
                model_range=str(r or ""),
                tdp_w=None if t is None else float(t),
                threads=None if th is None else int(th),
            )
            for n, m, f, r, t, th in raw["cpus"]
        ),
        profiles=tuple(_profile(row) for row in raw["profiles"]),
        default_profile=Profile("", "", dp["a"], dp["b"], dp["c"], dp["d"]),
        tdp_loads=tuple(float(x) for x in k["cpu_tdp_loads"]),
        tdp_ratios=tuple(float(x) for x in k["cpu_tdp_ratios"]),
        min_power_w=float(k["cpu_min_power_w"]),
        ram=RamModel(
            dimm_base_w=float(k["ram_dimm_base_w"]),
            dimm_w_per_gb=float(k["ram_dimm_w_per_gb"]),
            idle_ratio=float(k["ram_idle_ratio"]),
            typical_dimm_gb=tuple((t, float(g)) for t, g in k["ram_typical_dimm_gb"].items()),
            default_type=str(k["ram_default_type"]),
        ),
        memory_type_by_family=tuple(raw["memory_type_by_family"].items()),
        platforms=tuple(
            (str(name), Platform(str(cpu or ""), int(units), None if th is None else int(th)))
            for name, (cpu, units, th) in raw["platforms"].items()
        ),
        instances=tuple(
            Instance(provider, str(n), int(v), float(mem), str(p))
            for provider, rows in raw["instances"].items()
            for n, v, mem, p in rows
        ),
    )


@cache
def tables() -> Tables:
    """The shipped tables, parsed once (read-only afterwards)."""
    text = resources.files(__package__).joinpath(DATA_FILE).read_text(encoding="utf-8")
    return parse(json.loads(text))
