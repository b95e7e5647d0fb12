"""Property tests of the report's arithmetic (exporter/app/report/compute.py), from answers in
Prometheus' shape: the rows (namespaces and the node row) add up to the nodes' measured energy
exactly, and every factor applies per node."""

from __future__ import annotations

import dataclasses
import math
from datetime import date
from fractions import Fraction
from typing import get_type_hints

from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.app.report.chunk import NODE_ROW
from exporter.app.report.compute import Row, compute, total_of
from exporter.app.report.fetch import FACTORS, NAMED
from exporter.app.report.parse import parse_chunk
from exporter.app.report.query import Sample

NODES = ("n1", "n2", "n3")
NAMESPACES = ("ns-a", "ns-b", "ns-c", "kube-system")
ZONES = ("package", "dram", "core")
joules = st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)


def sample(value: float, **labels: str) -> Sample:
    # the float's exact value (the client reads Prometheus' decimal strings exactly; here exact
    # binary values let math.fsum, exact over floats, be the reference)
    return Sample(labels, Fraction(value))


@st.composite
def day_answers(draw: st.DrawFn) -> dict[str, list[Sample]]:
    answers: dict[str, list[Sample]] = {name: [] for name in (*NAMED, *FACTORS)}
    for node in draw(st.lists(st.sampled_from(NODES), min_size=1, unique=True)):
        zones = draw(st.lists(st.sampled_from(ZONES), min_size=1, unique=True))
        attributed = draw(st.lists(st.sampled_from(zones), unique=True))
        answers["node_energy"] += [sample(draw(joules), node=node, zone=z) for z in zones]
        answers["attributed_zones"] += [sample(1.0, node=node, zone=z) for z in attributed]
        if draw(st.booleans()):
            answers["gpu_energy"].append(sample(draw(joules), node=node))
        for ns in draw(st.lists(st.sampled_from(NAMESPACES), unique=True)):
            answers["pod_energy"].append(sample(draw(joules), node=node, namespace=ns))
        if draw(st.booleans()):
            answers["pue"].append(sample(draw(st.floats(1, 3)), node=node))
        if draw(st.booleans()):
            answers["carbon"].append(sample(draw(st.floats(0, 1000)), node=node))
        for currency in draw(st.lists(st.sampled_from(("EUR", "USD")), max_size=2, unique=True)):
            answers["energy_price"].append(
                sample(draw(st.floats(0, 2)), node=node, currency=currency)
            )
            answers["energy_price_samples"].append(
                sample(float(draw(st.integers(1, 1440))), node=node, currency=currency)
            )
    return answers


def measured(answers: dict[str, list[Sample]]) -> list[float]:
    """The nodes' energy as the report defines it, from the raw answers: attributed zones
    (never "gpu" from node series) plus GPUs."""
    attributed = {(s.labels["node"], s.labels["zone"]) for s in answers["attributed_zones"]}
    zones = [
        float(s.value)
        for s in answers["node_energy"]
        if (s.labels["node"], s.labels["zone"]) in attributed
    ]
    return zones + [float(s.value) for s in answers["gpu_energy"]]


@settings(deadline=None, max_examples=150)
@given(st.lists(day_answers(), min_size=1, max_size=4))
def test_rows_add_up_to_the_measured_energy(days: list[dict[str, list[Sample]]]) -> None:
    chunks = [parse_chunk(date(2025, 3, i + 1), a) for i, a in enumerate(days)]
    report = compute(chunks)
    node_total = sum((Fraction(v) for a in days for v in measured(a)), Fraction(0))
    assert sum((r.energy_j for r in report.rows), Fraction(0)) == node_total == report.node_energy_j
    assert report.total.energy_j == node_total
    # exact, hence equal to fsum's correctly rounded sum of the inputs
    assert float(report.total.energy_j) == math.fsum(v for a in days for v in measured(a))
    # the daily trend holds the same energy, day by day
    for chunk, answers in zip(chunks, days, strict=True):
        day_total = sum(report.daily.get(chunk.day, {}).values(), Fraction(0))
        assert day_total == sum((Fraction(v) for v in measured(answers)), Fraction(0))
    # no namespace appears that no pod had
    names = {s.labels["namespace"] for a in days for s in a["pod_energy"]}
    assert {r.namespace for r in report.rows} <= names | {NODE_ROW}


@settings(deadline=None, max_examples=150)
@given(st.lists(day_answers(), min_size=1, max_size=3))
def test_factors_apply_per_node(days: list[dict[str, list[Sample]]]) -> None:
    """Facility energy, cost per currency and carbon of all rows together are the nodes' own
    energy times the nodes' own factors (PUE taken as 1 where absent, price weighted by its
    samples, nothing where there is no price or intensity)."""
    report = compute(parse_chunk(date(2025, 3, i + 1), a) for i, a in enumerate(days))
    facility, carbon = Fraction(0), Fraction(0)
    cost: dict[str, Fraction] = {}
    for answers in days:
        chunk = parse_chunk(date(2025, 3, 1), answers)
        for node in chunk.nodes:
            e = chunk.node_energy(node)
            f = e * chunk.pue.get(node, Fraction(1))
            facility += f
            carbon += f / 3_600_000 * chunk.carbon.get(node, Fraction(0))
            counts = {
                s.labels["currency"]: s.value
                for s in answers["energy_price_samples"]
                if s.labels["node"] == node
            }
            for s in answers["energy_price"]:
                if s.labels["node"] == node:
                    c = s.labels["currency"]
                    cost[c] = cost.get(c, Fraction(0)) + f / 3_600_000 * s.value * counts[c] / sum(
                        counts.values()
                    )
    assert report.total.facility_j == facility
    assert report.total.carbon_g == carbon
    assert {c: v for c, v in report.total.cost.items()} == {c: v for c, v in cost.items()}


def test_same_node_name_in_two_clusters_keeps_its_own_factors() -> None:
    answers: dict[str, list[Sample]] = {name: [] for name in (*NAMED, *FACTORS)}
    for cluster, pue in (("eu", 1.5), ("us", 1.25)):
        answers["node_energy"].append(sample(3.6e6, cluster=cluster, node="w1", zone="package"))
        answers["attributed_zones"].append(sample(1.0, cluster=cluster, node="w1", zone="package"))
        answers["pod_energy"].append(sample(3.6e6, cluster=cluster, node="w1", namespace="ns"))
        answers["pue"].append(sample(pue, cluster=cluster, node="w1"))
    report = compute([parse_chunk(date(2025, 3, 1), answers)])
    (row,) = (r for r in report.rows if r.namespace == "ns")
    assert row.kwh == 2
    assert row.facility_kwh == Fraction(11, 4)  # 1.5 + 1.25, not 2 x either


# Every field of a report row, from the dataclass itself: a field added to Row is generated and
# checked here without a change to this test (a field of a new type fails until it is taught).
_ROW_HINTS = {
    f.name: get_type_hints(Row)[f.name] for f in dataclasses.fields(Row) if f.name != "namespace"
}
_amounts = st.builds(Fraction, st.integers(0, 10**15), st.integers(1, 10**6))
_STRATEGIES: dict[object, st.SearchStrategy[object]] = {
    Fraction: _amounts,
    dict[str, Fraction]: st.dictionaries(st.sampled_from(("EUR", "USD", "JPY")), _amounts),
}


@st.composite
def report_rows(draw: st.DrawFn) -> Row:
    row = Row(draw(st.sampled_from((*NAMESPACES, NODE_ROW))))
    for name, hint in _ROW_HINTS.items():
        setattr(row, name, draw(_STRATEGIES[hint]))
    return row


def test_every_row_field_has_a_strategy() -> None:
    assert set(_ROW_HINTS.values()) <= set(_STRATEGIES), "teach the total test the new type"


@given(st.lists(report_rows(), max_size=8))
def test_every_field_of_the_total_is_the_sum_over_the_rows(rows: list[Row]) -> None:
    """The total row a customer reads: each field (energy, facility energy, carbon, unpriced
    energy, GPU-hours, idle and unpriced GPU-hours, and each currency of each cost) is exactly
    the sum of that field over the rows."""
    total = total_of(rows)
    assert total.namespace == "(total)"
    for name, hint in _ROW_HINTS.items():
        got = getattr(total, name)
        if hint is Fraction:
            assert got == sum((getattr(r, name) for r in rows), Fraction(0)), name
        else:
            currencies = {c for r in rows for c in getattr(r, name)}
            expected = {
                c: sum((getattr(r, name).get(c, Fraction(0)) for r in rows), Fraction(0))
                for c in currencies
            }
            assert got == expected, name
