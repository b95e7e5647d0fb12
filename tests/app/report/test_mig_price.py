"""How `wattprobe report` prices MIG devices (docs/showback.md#gpu-hour-prices), from answers as
Prometheus gives them: the same precedence as the showback recording rules."""

from __future__ import annotations

from datetime import date
from fractions import Fraction

from exporter.app.report.compute import compute
from exporter.app.report.fetch import FACTORS, NAMED
from exporter.app.report.parse import parse_chunk
from exporter.app.report.query import Sample

H100 = "NVIDIA H100 80GB HBM3"


def s(value: float | str, **labels: str) -> Sample:
    return Sample(labels, Fraction(value))


def held(pod_ns: str, minutes: int, gi: str, mig: str) -> Sample:
    return s(minutes, node="n", namespace=pod_ns, uuid="GPU-0", gpu_instance=gi, mig_device=mig)


def answers() -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {name: [] for name in (*NAMED, *FACTORS)}
    out["gpu_models"] = [s(1, node="n", uuid="GPU-0", model=H100)]
    out["gpu_hour_price"] = [
        s("3.5", node="n", currency="EUR", model=H100, resource=""),
        s("9", node="n", currency="EUR", model="", resource="nvidia.com/gpu"),
        s("0.11", node="n", currency="EUR", model="", resource="nvidia.com/mig-1g.10gb"),
    ]
    out["gpu_minutes"] = [
        held("priced-by-resource", 60, "9", "MIG-a"),
        held("priced-by-share", 60, "1", "MIG-b"),
        held("single-strategy", 60, "5", "MIG-c"),
        held("no-share", 60, "", "gpu-0-mig-1g10gb-7-0"),
    ]
    out["mig_resources"] = [
        s(1, node="n", uuid="GPU-0", mig_device="MIG-a", resource="nvidia.com/mig-1g.10gb"),
        s(1, node="n", uuid="GPU-0", mig_device="MIG-b", resource="nvidia.com/mig-3g.40gb"),
        # the device plugin's single strategy names MIG devices nvidia.com/gpu: that entry is
        # the whole GPU's price, never the slice's
        s(1, node="n", uuid="GPU-0", mig_device="MIG-c", resource="nvidia.com/gpu"),
    ]
    # the gauge's floats (3/7 is not a decimal): read back as the exact fraction
    out["mig_shares"] = [
        s(1 / 7, node="n", uuid="GPU-0", gpu_instance="9"),
        s(3 / 7, node="n", uuid="GPU-0", gpu_instance="1"),
        s(2 / 7, node="n", uuid="GPU-0", gpu_instance="5"),
    ]
    return out


def test_mig_devices_by_resource_else_by_share_else_unpriced() -> None:
    report = compute([parse_chunk(date(2025, 3, 1), answers())])
    rows = {r.namespace: r for r in report.rows}
    assert rows["priced-by-resource"].gpu_cost == {"EUR": Fraction("0.11")}
    assert rows["priced-by-share"].gpu_cost == {"EUR": Fraction("1.5")}  # 3.5 x 3/7, exactly
    assert rows["single-strategy"].gpu_cost == {"EUR": Fraction(1)}  # 3.5 x 2/7
    assert rows["no-share"].gpu_cost == {}
    assert rows["no-share"].unpriced_gpu_hours == 1
    assert all(r.gpu_hours == 1 for r in rows.values())
    assert report.total.gpu_cost == {"EUR": Fraction("2.61")}  # the namespaces' sum
    assert report.notes == [
        "no GPU-hour price for n GPU GPU-0 MIG device gpu-0-mig-1g10gb-7-0: its hours have no "
        "cost (column unpriced_gpu_hours)"
    ]
