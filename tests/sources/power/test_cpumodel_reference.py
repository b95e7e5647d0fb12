"""The estimate agrees with boaviztapi's own functions, run in-process (a test-only dependency).

For cloud instance types (AWS, Azure, GCP) and CPU models, at 0, 10, 50 and 100 % load: the
agent's CPU watts within 2 % of the CPU power boaviztapi gives the instance (its
`platform.cpu.usage.avg_power` after `model_power_consumption`), and its memory watts within 2 %
of boaviztapi's RAM power. The agent's data is the generated boavizta.json; boaviztapi reads its
own CSVs and fits its curves with scipy, so a wrong column, scale or fit shows here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from exporter.sources.power.cpumodel.lookup import CPU, INSTANCE, MODEL_RANGE, estimate_for
from tests.support.realparts import missing

# scipy's OptimizeWarning: boaviztapi fits 4 parameters to 4 points, so no covariance
pytestmark = pytest.mark.filterwarnings("ignore::Warning:boaviztapi.*")

LOADS = (0, 10, 50, 100)
TOLERANCE = 0.02

# (provider, instance type as the node label spells it, the basis the agent must use)
INSTANCES = (
    ("aws", "m5.xlarge", INSTANCE),  # Xeon Platinum 8175M, Skylake, 2 sockets
    ("aws", "c5.2xlarge", INSTANCE),
    ("aws", "m6i.large", INSTANCE),  # Ice Lake 8375C
    ("aws", "c5a.xlarge", INSTANCE),  # EPYC 7R32: no EPYC curve, Boavizta's default refitted
    ("aws", "c6g.large", INSTANCE),  # Graviton2
    ("aws", "m7g.large", INSTANCE),  # Graviton3
    ("azure", "Standard_D2ads_v5", INSTANCE),  # EPYC 7763; the label's Standard_ prefix
    ("azure", "Standard_E8s_v5", INSTANCE),  # Xeon Platinum 8370C
    ("gcp", "n2-standard-4", INSTANCE),  # the row's threads, not the host's, divide
    ("gcp", "e2-standard-4", INSTANCE),
    ("gcp", "n2d-standard-2", INSTANCE),  # EPYC 7B12
    ("gcp", "c3-standard-4", MODEL_RANGE),  # Sapphire Rapids 8481C: no TDP, Xeon Platinum curve
)
# (/proc/cpuinfo's model name, the commercial name boaviztapi is given, the agent's basis). The
# agent reads the first; boaviztapi's fuzzy match misses raw Intel cpuinfo names ("(R)", "CPU @
# 2.50GHz" lower its score below its threshold: it then uses its default curve), so it gets the
# name a user would type, and the test also checks both land on the same row. The node is one
# whole package (node threads = the row's threads).
CPUS = (
    ("Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz", "Intel Xeon Platinum 8175M", CPU),
    ("Intel(R) Xeon(R) Gold 6348 CPU @ 2.60GHz", "Intel Xeon Gold 6348", CPU),  # a's bound binds
    ("Intel(R) Xeon(R) Silver 4314 CPU @ 2.40GHz", "Intel Xeon Silver 4314", CPU),
    ("Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz", "Intel Xeon E5-2686 v4", CPU),
    ("AMD EPYC 7763 64-Core Processor", "AMD EPYC 7763", CPU),
    ("AMD EPYC 7R13 Processor", "AMD EPYC 7R13", CPU),
)


@pytest.fixture(scope="module")
def boa() -> Iterator[Any]:
    try:
        from boaviztapi.data.archetype import (  # noqa: PLC0415
            get_cloud_instance_archetype,
        )
        from boaviztapi.dto.component.cpu import CPU as CpuDto  # noqa: PLC0415, N811
        from boaviztapi.dto.component.cpu import mapper_cpu  # noqa: PLC0415
        from boaviztapi.dto.device.device import Cloud, mapper_cloud_instance  # noqa: PLC0415
        from boaviztapi.dto.usage.usage import Usage, UsageCloud  # noqa: PLC0415
    except ImportError:
        missing("boaviztapi (pyproject's test extra)")

    class Boa:
        @staticmethod
        def instance(provider: str, name: str, load: int) -> tuple[float, float, int]:
            arch = get_cloud_instance_archetype(name.lower().removeprefix("standard_"), provider)
            assert arch, name
            dto = Cloud(provider=provider, instance_type=name, usage=UsageCloud(time_workload=load))
            model = mapper_cloud_instance(dto, archetype=arch)
            model.model_power_consumption()
            cpu = model.platform.cpu.usage.avg_power.value
            ram = sum(r.usage.avg_power.value for r in model.platform.ram)
            return float(cpu), float(ram), int(model.vcpu.value)

        @staticmethod
        def cpu(name: str, load: int) -> tuple[float, int, str]:
            model = mapper_cpu(CpuDto(name=name, usage=Usage(time_workload=load)))
            watts = float(model.model_power_consumption().value)
            model._complete_from_name()  # the row its fuzzy match found (filled lazily)
            return watts, int(model.threads.value), str(model.name.value)

    yield Boa


def _close(ours: float, theirs: float) -> bool:
    return abs(ours - theirs) <= TOLERANCE * abs(theirs)


@pytest.mark.parametrize(("provider", "name", "basis"), INSTANCES)
def test_instance_matches_boaviztapi(boa: Any, provider: str, name: str, basis: str) -> None:
    rows = []
    est = None
    for load in LOADS:
        cpu_w, ram_w, vcpu = boa.instance(provider, name, load)
        est = estimate_for("", name, vcpu, None, 0)
        rows.append((load, est.power(load / 100), cpu_w, est.dram_w(load / 100), ram_w))
    assert est is not None and est.basis == basis, est
    bad = [r for r in rows if not (_close(r[1], r[2]) and _close(r[3], r[4]))]
    assert not bad, f"{name} (load, ours cpu, boavizta cpu, ours ram, boavizta ram): {bad}"


@pytest.mark.parametrize(("model_name", "commercial", "basis"), CPUS)
def test_cpu_matches_boaviztapi(boa: Any, model_name: str, commercial: str, basis: str) -> None:
    rows = []
    for load in LOADS:
        theirs, threads, row = boa.cpu(commercial, load)
        est = estimate_for(model_name, None, threads, None, 0)
        assert (est.basis, est.cpu_model) == (basis, row), est
        rows.append((load, est.power(load / 100), theirs))
    bad = [r for r in rows if not _close(r[1], r[2])]
    assert not bad, f"{model_name} (load, ours, boavizta): {bad}"
