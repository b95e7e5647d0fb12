"""The estimate's lookup and curves: the fallback order, name matching, the fit, the memory model.

Agreement with boaviztapi itself is test_cpumodel_reference.py; these run without it.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.sources.power.cpumodel.curve import Fit, LinearCurve, LogCurve, fit_log_curve
from exporter.sources.power.cpumodel.data import CCF_W_PER_VCPU, tables
from exporter.sources.power.cpumodel.lookup import (
    AVERAGE,
    BASES,
    CCF,
    CPU,
    FLAGS,
    GIB,
    INSTANCE,
    MODEL_RANGE,
    estimate_for,
    match_cpu,
    match_instance,
    normalise,
)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz", "intel xeon platinum 8175m"),
        ("AMD EPYC 7763 64-Core Processor", "amd epyc 7763"),
        ("Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz", "intel xeon e5-2686 v4"),
        ("  ", ""),
    ],
)
def test_normalise(raw: str, clean: str) -> None:
    assert normalise(raw) == clean


def test_cpu_match_needs_the_same_model_numbers() -> None:
    v4 = match_cpu("Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz")
    assert v4 is not None and (v4.name, v4.family) == ("Intel Xeon E5-2686 v4", "Broadwell")
    old = match_cpu("Intel(R) Xeon(R) CPU E5-2686 @ 2.30GHz")
    assert old is not None and old.family == "Sandy Bridge"
    assert match_cpu("Intel(R) Xeon(R) Gold 6999 CPU @ 2.0GHz") is None  # no such CPU
    assert match_cpu("QEMU Virtual CPU version 2.5+") is None
    assert match_cpu("") is None


def test_instance_match_ignores_case_separators_and_azure_prefix() -> None:
    azure = match_instance("Standard_D2ads_v5")
    assert azure is not None and (azure.provider, azure.name, azure.vcpu) == (
        "azure",
        "d2ads_v5",
        2,
    )
    aws = match_instance("M5.XLARGE")
    assert aws is not None and (aws.provider, aws.vcpu, aws.memory_gb) == ("aws", 4, 16.0)
    assert match_instance("m5.xlargeish") is None  # no edit-distance guess
    assert match_instance("") is None


def test_fallback_order() -> None:
    inst = estimate_for("whatever the VM says", "m5.xlarge", 4, None, 0)
    assert (inst.basis, inst.cpu_model, inst.instance_type) == (
        INSTANCE,
        "Intel Xeon Platinum 8175M",
        "m5.xlarge",
    )
    cpu = estimate_for("Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz", None, 4, None, 16 * GIB)
    assert cpu.basis == CPU
    assert cpu.power(0.5) == pytest.approx(inst.power(0.5))  # same CPU, same share
    # the instance's CPU has no TDP: its model range's curve (GCP C3, Sapphire Rapids 8481C)
    assert estimate_for("", "c3-standard-4", 4, None, 0).basis == MODEL_RANGE
    # an unknown Xeon Gold: the Gold curve, over the range's median threads
    gold = estimate_for("Intel(R) Xeon(R) Gold 6999 CPU @ 2.0GHz", None, 4, None, 0)
    assert gold.basis == MODEL_RANGE and "Xeon Gold" in gold.detail
    # no TDP and no range curve, a known microarchitecture: CCF's line
    naples = estimate_for("AMD EPYC 7251 8-Core Processor", None, 4, None, 0)
    lo, hi = CCF_W_PER_VCPU["Naples"]
    assert (naples.basis, naples.idle_w, naples.max_w) == (CCF, 4 * lo, 4 * hi)
    # nothing known: the old averages
    unknown = estimate_for("Google Axion", "no-such-type", 2, None, 0)
    assert (unknown.basis, unknown.idle_w, unknown.max_w) == (AVERAGE, 1.48, 7.0)
    assert any("no-such-type" in h for h in unknown.hints)


def test_flags_replace_the_curve_by_a_line() -> None:
    est = estimate_for("", "m5.xlarge", 4, None, 0, idle_w=10.0)
    model = estimate_for("", "m5.xlarge", 4, None, 0)
    assert est.basis == FLAGS and est.idle_w == 10.0 and est.max_w == model.max_w
    assert est.power(0.5) == pytest.approx((10.0 + model.max_w) / 2)


def test_share_is_node_threads_over_package_threads() -> None:
    one = estimate_for("AMD EPYC 7763 64-Core Processor", None, 128, None, 0)
    two = estimate_for("AMD EPYC 7763 64-Core Processor", None, 256, None, 0)  # two sockets
    vm = estimate_for("AMD EPYC 7763 64-Core Processor", None, 2, None, 0)
    assert two.power(0.3) == pytest.approx(2 * one.power(0.3))
    assert vm.power(0.3) == pytest.approx(one.power(0.3) * 2 / 128)
    # Boavizta's TDP points for one whole package
    assert one.idle_w == pytest.approx(0.12 * 280, rel=0.02)
    assert one.max_w == pytest.approx(1.02 * 280, rel=0.02)


def test_memory_follows_boaviztas_dimm_model() -> None:
    # 16 GiB of DDR4 (Skylake): half a 32 GB DIMM of 3 + 0.055 * 32 W, 70 % of it at idle
    est = estimate_for("Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz", None, 4, None, 16 * GIB)
    assert est.dram is not None
    assert est.dram_w(1.0) == pytest.approx(0.5 * (3 + 0.055 * 32))
    assert est.dram_w(0.0) == pytest.approx(0.7 * 0.5 * (3 + 0.055 * 32))
    # DDR5 (Sapphire Rapids): 64 GB DIMMs
    c3 = estimate_for("", "c3-standard-4", 4, None, 0)
    assert c3.dram_w(1.0) == pytest.approx(16 / 64 * (3 + 0.055 * 64))
    assert estimate_for("", None, 2, None, 0).dram is None  # memory unknown: no zone


@settings(deadline=None, max_examples=40)
@given(
    a=st.floats(1.0, 400.0),
    c=st.floats(1.0, 60.0),
    k=st.floats(-300.0, 50.0),
)
def test_fit_recovers_a_curve_through_its_own_points(a: float, c: float, k: float) -> None:
    loads = (0.0, 10.0, 50.0, 100.0)
    watts = tuple(a * math.log(x + c) + k for x in loads)
    got = fit_log_curve(Fit(a0=a, c0=c, loads=loads, watts=watts), floor_w=-math.inf)
    for x, w in zip(loads, watts, strict=True):
        assert got.watts(x) == pytest.approx(w, rel=1e-4, abs=1e-6)


def test_fit_keeps_a_within_its_bounds() -> None:
    loads = (0.0, 10.0, 50.0, 100.0)
    watts = tuple(1000 * r for r in (0.12, 0.32, 0.75, 1.02))
    got = fit_log_curve(Fit(a0=10.0, c0=20.0, loads=loads, watts=watts), floor_w=1.0)
    assert got.a == pytest.approx(30.0)  # a0 + 2|a0|: the bound binds


def test_curves_clamp_their_input() -> None:
    curve = LogCurve(a=100.0, c=20.0, k=-310.0, floor_w=1.0)
    assert curve.watts(-5) == curve.watts(0) and curve.watts(150) == curve.watts(100)
    assert curve.watts(0) == 1.0  # 100 ln 20 - 310 < 1 W: the floor
    line = LinearCurve(1.0, 3.0)
    assert (line.watts(-1), line.watts(0.5), line.watts(2)) == (1.0, 2.0, 3.0)


@settings(deadline=None, max_examples=60)
@given(
    name=st.one_of(
        st.text(max_size=60),
        st.sampled_from([c.name for c in tables().cpus[::50]]),
    ),
    instance=st.one_of(
        st.none(), st.text(max_size=20), st.sampled_from(["m5.xlarge", "n2-standard-4"])
    ),
    threads=st.integers(0, 512),
    memory=st.integers(0, 4 << 40),
)
def test_any_input_gives_a_sane_model(
    name: str, instance: str | None, threads: int, memory: int
) -> None:
    est = estimate_for(name, instance, threads, None, memory)
    assert est.basis in BASES
    points = [est.power(u / 10) for u in range(11)]
    assert all(math.isfinite(p) and p > 0 for p in points)
    assert points == sorted(points)  # more load never costs less
    assert 0 <= est.dram_w(0.0) <= est.dram_w(1.0)
