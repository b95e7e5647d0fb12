"""Generate exporter/sources/power/cpumodel/boavizta.json from the installed boaviztapi.

`make estimate-data` runs it; tests/sources/power/test_cpumodel_data.py regenerates it and fails
on drift.
boaviztapi is a test-only dependency (pyproject's test extra pins it): the agent reads the JSON
this writes and never imports boaviztapi, its web server or its numeric stack.

Only the columns the agent's estimate needs are kept: per CPU model its TDP, threads, family and
model range; per model range the fitted load curve; per cloud instance type its vCPUs, memory and
host platform; per platform its CPU and socket count; and the few constants of Boavizta's CPU and
memory power models (TDP ratios at 0/10/50/100 % load, the per-DIMM memory model).
"""

from __future__ import annotations

import ast
import csv
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

PINNED = "2.5.0"  # keep in step with pyproject.toml's test extra
LICENCE = "AGPL-3.0-only"  # boaviztapi's LICENSE (GNU Affero GPL v3); see docs/faq.md
PROVIDERS = ("aws", "azure", "gcp")
REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "exporter" / "sources" / "power" / "cpumodel" / "boavizta.json"
FORMAT = 1
# the files read, relative to boaviztapi's data directory
SOURCES = (
    "crowdsourcing/cpu_specs.csv",
    "consumption_profile/cpu/cpu_profile.csv",
    "consumption_profile/ram/memory_type.csv",
    "archetypes/components/cpu.csv",
    "archetypes/server.csv",
    *(f"archetypes/cloud/{p}.csv" for p in PROVIDERS),
)


class WrongVersion(RuntimeError):
    pass


def data_dir() -> Path:
    version = metadata.version("boaviztapi")
    if version != PINNED:
        raise WrongVersion(f"boaviztapi {version} installed, the data is pinned to {PINNED}")
    import boaviztapi  # noqa: PLC0415  (test-only dependency: imported only when generating)

    # its production data, whatever BOAVIZTAPI_USE_TEST_DATA says
    return Path(boaviztapi.data_dir_prod)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _num(text: str) -> float | None:
    """A CSV cell as a number; Boavizta writes `default;min;max` triples, of which the default
    is the value its models use."""
    text = text.strip().split(";")[0]
    if not text:
        return None
    return float(text)


def _int(text: str) -> int | None:
    value = _num(text)
    return None if value is None else round(value)


def _constants() -> dict[str, Any]:
    """Boavizta's model constants, taken from its code (they live in classes, not in CSVs)."""
    from boaviztapi.models.consumption_profile import consumption_profile as cp  # noqa: PLC0415

    cpu = cp.CPUConsumptionProfileModel
    ram = cp.RAMConsumptionProfileModel
    return {
        "cpu_tdp_loads": list(cpu._TDP_RATIOS_WORKLOAD),
        "cpu_tdp_ratios": list(cpu._TDP_RATIOS),
        "cpu_min_power_w": float(cp.MIN_POWER),
        "ram_dimm_base_w": ram.dimm_base_power,
        "ram_dimm_w_per_gb": ram.dimm_power_per_gb,
        "ram_idle_ratio": ram.idle_power_ratio,
        "ram_typical_dimm_gb": dict(ram.typical_dimm_capacity),
        "ram_default_type": ram.default_memory_type,
    }


def _default_profile(rows: Iterable[Mapping[str, str]]) -> dict[str, float]:
    row = next(r for r in rows if r["id"] == "DEFAULT")
    params = ast.literal_eval(row["CONSUMPTION_PROFILE.params"])
    return {k: float(params[k]) for k in "abcd"}


def build(root: Path) -> dict[str, Any]:
    cpus = [
        [
            r["name"],
            r["manufacturer"],
            r["code_name"],
            r["model_range"],
            _num(r["tdp"]),
            _int(r["threads"]),
        ]
        for r in _rows(root / "crowdsourcing/cpu_specs.csv")
    ]
    profiles = [
        [r["manufacturer"], r["model_range"], *(float(r[k]) for k in "abcd")]
        for r in _rows(root / "consumption_profile/cpu/cpu_profile.csv")
    ]
    memory_types = {
        r["cpu_family"]: r["memory_type"]
        for r in _rows(root / "consumption_profile/ram/memory_type.csv")
    }
    instances: dict[str, list[list[object]]] = {}
    used: set[str] = set()
    for provider in PROVIDERS:
        rows = _rows(root / f"archetypes/cloud/{provider}.csv")
        instances[provider] = [
            [r["id"], _int(r["vcpu"]), _num(r["memory"]), r["platform"]] for r in rows
        ]
        used.update(r["platform"] for r in rows)
    platforms = {
        r["id"]: [r["CPU.name"], _int(r["CPU.units"]) or 1, _int(r["CPU.threads"])]
        for r in _rows(root / "archetypes/server.csv")
        if r["id"] in used
    }
    files = {name: hashlib.sha256((root / name).read_bytes()).hexdigest()[:16] for name in SOURCES}
    return {
        "format": FORMAT,
        "source": {
            "distribution": "boaviztapi",
            "version": PINNED,
            "licence": LICENCE,
            "generator": "tests/support/estimatedata.py (make estimate-data)",
            "sha256_16": files,
        },
        "constants": _constants(),
        "default_profile": _default_profile(_rows(root / "archetypes/components/cpu.csv")),
        "profiles": profiles,
        "memory_type_by_family": memory_types,
        "cpus": cpus,
        "platforms": dict(sorted(platforms.items())),
        "instances": instances,
    }


def render(data: Mapping[str, Any]) -> str:
    """JSON with one table row per line: small diffs when Boavizta updates a row."""
    out = ["{"]
    items = list(data.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        out.append(f"  {json.dumps(key)}: {_block(value, '  ')}{comma}")
    out.append("}")
    return "\n".join(out) + "\n"


def _block(value: object, indent: str) -> str:
    inner = indent + "  "
    if isinstance(value, list) and value and isinstance(value[0], list):
        rows = [inner + json.dumps(v, ensure_ascii=False) for v in value]
        return "[\n" + ",\n".join(rows) + f"\n{indent}]"
    if isinstance(value, dict) and any(isinstance(v, (list, dict)) for v in value.values()):
        rows = [f"{inner}{json.dumps(k)}: {_block(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(rows) + f"\n{indent}}}"
    return json.dumps(value, ensure_ascii=False, sort_keys=False)


def generated() -> str:
    return render(build(data_dir()))


def main() -> int:
    OUT.write_text(generated(), encoding="utf-8")
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
