"""Print docs/faq.md's estimate table: the agent's model beside boaviztapi's own functions,
Cloud Carbon Footprint's line and the old constant, at 0, 10, 50 and 100 % load.

Run: `.venv/bin/python -m tests.support.estimatetable` (needs the test extra's boaviztapi);
`.venv/bin/python -m tests.support.estimatetable cost` prints what the model costs the agent.
"""

from __future__ import annotations

import resource
import statistics
import sys
import time
import warnings

from exporter.sources.power.cpumodel.data import CCF_AVERAGE_W_PER_VCPU, CCF_W_PER_VCPU, tables
from exporter.sources.power.cpumodel.lookup import estimate_for, match_cpu, match_instance

ROWS = (
    ("aws", "m5.xlarge"),
    ("aws", "c6g.large"),
    ("aws", "c5a.xlarge"),
    ("azure", "Standard_D2ads_v5"),
    ("azure", "Standard_E8s_v5"),
    ("gcp", "n2-standard-4"),
    ("gcp", "c3-standard-4"),
    ("gcp", "c4a-standard-2"),
)
LOADS = (0, 10, 50, 100)


def _fmt(values: list[float]) -> str:
    return " / ".join(f"{v:.2f}" for v in values)


def main() -> None:
    warnings.simplefilter("ignore")
    from boaviztapi.data.archetype import get_cloud_instance_archetype  # noqa: PLC0415
    from boaviztapi.dto.device.device import Cloud, mapper_cloud_instance  # noqa: PLC0415
    from boaviztapi.dto.usage.usage import UsageCloud  # noqa: PLC0415

    t = tables()
    print(
        "| instance (host CPU) | basis | ours CPU W | Boavizta CPU W | CCF W | old W "
        "| memory W, ours / Boavizta |"
    )
    print("|---|---|---|---|---|---|---|")
    for provider, name in ROWS:
        inst = match_instance(name)
        assert inst is not None
        est = estimate_for("", name, inst.vcpu, None, 0)
        arch = get_cloud_instance_archetype(inst.name, provider)
        boa_cpu, boa_ram = [], []
        for load in LOADS:
            usage = UsageCloud(time_workload=load)
            dto = Cloud(provider=provider, instance_type=inst.name, usage=usage)
            model = mapper_cloud_instance(dto, archetype=arch)
            model.model_power_consumption()
            boa_cpu.append(float(model.platform.cpu.usage.avg_power.value))
            boa_ram.append(sum(float(r.usage.avg_power.value) for r in model.platform.ram))
        platform = t.platform(inst.platform)
        spec = match_cpu(platform.cpu_name) if platform else None
        coef = CCF_W_PER_VCPU.get(spec.family) if spec else None
        ccf = "-"
        if coef is not None:
            ccf = _fmt([inst.vcpu * (coef[0] + (coef[1] - coef[0]) * x / 100) for x in LOADS])
        alo, ahi = CCF_AVERAGE_W_PER_VCPU
        old = _fmt([inst.vcpu * (alo + (ahi - alo) * x / 100) for x in LOADS])
        ours = _fmt([est.power(x / 100) for x in LOADS])
        mem = f"{_fmt([est.dram_w(x / 100) for x in (0, 100)])} / {_fmt([boa_ram[0], boa_ram[-1]])}"
        cpu = platform.cpu_name if platform else "?"
        row = (f"{name} ({inst.vcpu} vCPU, {cpu})", est.basis, ours, _fmt(boa_cpu), ccf, old, mem)
        print("| " + " | ".join(row) + " |")


def cost() -> None:
    """Start-up cost (tables parsed, index built, one fit) and the per-interval curve; run in a
    fresh process so the first call is the agent's first."""
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    tables()
    t1 = time.perf_counter()
    est = estimate_for("Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz", None, 4, None, 16 << 30)
    t2 = time.perf_counter()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    calls = []
    for i in range(10_000):
        a = time.perf_counter()
        est.power(i / 10_000)
        calls.append(time.perf_counter() - a)
    print(
        f"tables {1e3 * (t1 - t0):.1f} ms, first estimate {1e3 * (t2 - t1):.1f} ms, "
        f"max RSS +{(rss1 - rss0) / 1024:.1f} MiB, power(u) median "
        f"{1e6 * statistics.median(calls):.2f} us"
    )


if __name__ == "__main__":
    cost() if sys.argv[1:] == ["cost"] else main()
