"""The report's arithmetic for whole GPUs, idle GPU minutes, the notes and the days, by hand
(tests/app/report/test_mig_price.py has MIG devices, test_compute_props.py the energy sums)."""

from __future__ import annotations

from datetime import date
from fractions import Fraction

from exporter.app.report.compute import compute
from exporter.app.report.fetch import FACTORS, NAMED
from exporter.app.report.parse import parse_chunk
from exporter.app.report.query import Sample

H100, A100 = "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB"


def s(value: float | str, **labels: str) -> Sample:
    return Sample(labels, Fraction(value))


def whole(namespace: str, node: str, uuid: str, minutes: int) -> Sample:
    return s(minutes, node=node, namespace=namespace, uuid=uuid, gpu_instance="", mig_device="")


def answers() -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {name: [] for name in (*NAMED, *FACTORS)}
    out["gpu_models"] = [
        s(1, node="n1", uuid="GPU-A", model=H100),
        s(1, node="n2", uuid="GPU-B", model=A100),
    ]
    out["gpu_hour_price"] = [
        s("2.5", node="n1", currency="EUR", model=H100, resource=""),  # the model's entry wins
        s("9", node="n1", currency="EUR", model="", resource="nvidia.com/gpu"),
        s("7", node="n2", currency="USD", model="NVIDIA L4", resource=""),  # another model's
        s("1.5", node="n2", currency="USD", model="", resource="nvidia.com/gpu"),
    ]
    out["gpu_minutes"] = [
        whole("ml", "n1", "GPU-A", 120),
        whole("web", "n2", "GPU-B", 60),
        whole("web", "n2", "GPU-C", 30),  # no model known: the resource's price
        whole("batch", "n3", "GPU-D", 60),  # no price on n3 at all
    ]
    out["idle_gpu_minutes"] = [s(30, node="n1", namespace="ml", uuid="GPU-A")]
    # energy on n1 only, no factors there: notes say what is missing
    out["node_energy"] = [s(3_600_000, node="n1", zone="package")]
    out["attributed_zones"] = [s(1, node="n1", zone="package")]
    out["pod_energy"] = [
        s(1_800_000, node="n1", namespace="ml"),
        s(720_000, node="n1", namespace="web"),
    ]
    # pods on n4, whose node energy is missing: their energy is taken as the node's
    out["pod_energy"].append(s(360_000, node="n4", namespace="batch"))
    return out


def test_whole_gpus_idle_minutes_notes_and_days() -> None:
    day = date(2025, 3, 1)
    report = compute([parse_chunk(day, answers())])
    rows = {r.namespace: r for r in report.rows}
    assert [r.namespace for r in report.rows] == ["ml", "web", "batch", "(node)"]
    ml, web, batch, node = rows["ml"], rows["web"], rows["batch"], rows["(node)"]
    assert (ml.gpu_hours, ml.gpu_cost) == (Fraction(2), {"EUR": Fraction(5)})
    assert (ml.idle_gpu_hours, ml.idle_gpu_cost) == (Fraction(1, 2), {"EUR": Fraction(5, 4)})
    assert (web.gpu_hours, web.gpu_cost) == (Fraction(3, 2), {"USD": Fraction(9, 4)})
    assert batch.gpu_cost == {}
    assert (batch.gpu_hours, batch.unpriced_gpu_hours) == (Fraction(1), Fraction(1))
    assert [ml.energy_j, web.energy_j, batch.energy_j] == [1_800_000, 720_000, 360_000]
    assert ml.kwh == Fraction(1, 2) and ml.facility_kwh == Fraction(1, 2)  # no PUE: IT energy
    assert node.energy_j == 3_600_000 - 1_800_000 - 720_000
    assert ml.cost == {}
    assert [ml.carbon_g, ml.unpriced_j] == [0, 1_800_000]
    assert report.node_energy_j == 3_600_000 + 360_000
    assert report.daily == {
        day: {"ml": 1_800_000, "web": 720_000, "(node)": 1_080_000, "batch": 360_000}
    }
    assert report.currencies == ["EUR", "USD"]
    assert report.notes == [
        "no GPU-hour price for n3 GPU GPU-D: its hours have no cost (column unpriced_gpu_hours)",
        "no PUE for n1, n4: their facility energy is their IT energy (no overhead counted)",
        "no carbon intensity for n1, n4: their energy has no carbon figure",
        "no energy price for n1, n4: their energy has no cost (column unpriced_kwh)",
        "no node energy for n4 on some days, only pods' energy: their pods' energy is taken as"
        " theirs",
    ]


def test_two_days_add_up_in_every_column() -> None:
    """Each day's unpriced energy, idle and unpriced GPU hours add to the row's, not replace it."""
    days = [date(2025, 3, 1), date(2025, 3, 2)]
    report = compute([parse_chunk(day, answers()) for day in days])
    rows = {r.namespace: r for r in report.rows}
    assert rows["ml"].unpriced_j == 2 * 1_800_000
    assert rows["ml"].idle_gpu_hours == 1
    assert rows["batch"].unpriced_gpu_hours == 2
    assert rows["ml"].gpu_cost == {"EUR": Fraction(10)}
    assert list(report.daily) == days
