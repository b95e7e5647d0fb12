"""The report's columns and how their figures are written (shared by CSV, HTML and PNG)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from exporter.app.report.compute import Report, Row


def decimal(value: Fraction, places: int) -> str:
    """value rounded half to even at `places` decimals, exactly: Fraction's round() works on the
    exact value, so there is no float and no double rounding on the way."""
    scaled = round(value * 10**places)
    digits = str(abs(scaled)).rjust(places + 1, "0")
    text = f"{digits[:-places]}.{digits[-places:]}" if places else digits
    return "-" + text if scaled < 0 else text


@dataclass(frozen=True)
class Column:
    name: str
    title: str
    places: int
    value: Callable[[Row], Fraction]


def _per(currency: str, amounts: Callable[[Row], dict[str, Fraction]]) -> Callable[[Row], Fraction]:
    return lambda r: amounts(r).get(currency, Fraction(0))


def columns(report: Report) -> list[Column]:
    cols = [
        Column("kwh", "Energy (kWh)", 6, lambda r: r.kwh),
        Column("facility_kwh", "Facility energy (kWh, x PUE)", 6, lambda r: r.facility_kwh),
    ]
    for c in report.currencies:
        cols.append(Column(f"cost_{c}", f"Energy cost ({c})", 4, _per(c, lambda r: r.cost)))
    cols += [
        Column("carbon_kg", "Carbon (kg CO2e)", 6, lambda r: r.carbon_g / 1000),
        Column(
            "unpriced_kwh", "Energy without a price (kWh)", 6, lambda r: r.unpriced_j / 3_600_000
        ),
        Column("gpu_hours", "GPU hours allocated", 4, lambda r: r.gpu_hours),
    ]
    for c in report.currencies:
        cols.append(Column(f"gpu_cost_{c}", f"GPU cost ({c})", 4, _per(c, lambda r: r.gpu_cost)))
    cols.append(Column("idle_gpu_hours", "Idle GPU hours", 4, lambda r: r.idle_gpu_hours))
    for c in report.currencies:
        cols.append(
            Column(
                f"idle_gpu_cost_{c}",
                f"Idle GPU cost ({c})",
                4,
                _per(c, lambda r: r.idle_gpu_cost),
            )
        )
    cols.append(
        Column("unpriced_gpu_hours", "GPU hours without a price", 4, lambda r: r.unpriced_gpu_hours)
    )
    return cols


TREND_SERIES = 6  # namespaces drawn apart in the daily trend; the rest are "(other)"


@dataclass(frozen=True)
class PlotData:
    """What the plots show, the same in HTML and PNG."""

    energy: list[tuple[str, float]]  # namespace (and node row), kWh
    facility: list[tuple[str, float]]
    days: list[str]
    trend: list[tuple[str, list[float]]]  # series, kWh per day
    idle_hours: list[tuple[str, float]]
    idle_cost: list[tuple[str, float]]  # "namespace (CUR)"


def plot_data(report: Report) -> PlotData:
    kwh = 3_600_000
    rows = report.rows
    days = sorted(report.daily)
    named = [r.namespace for r in rows if not r.namespace.startswith("(")][:TREND_SERIES]
    trend: list[tuple[str, list[float]]] = [
        (ns, [float(report.daily[d].get(ns, 0) / kwh) for d in days]) for ns in named
    ]
    others = [
        float(
            sum(
                (
                    j
                    for ns, j in report.daily[d].items()
                    if ns not in named and not ns.startswith("(")
                ),
                Fraction(0),
            )
            / kwh
        )
        for d in days
    ]
    if any(others):
        trend.append(("(other namespaces)", others))
    node = [float(report.daily[d].get("(node)", 0) / kwh) for d in days]
    if any(node):
        trend.append(("(node)", node))
    idle = [r for r in rows if r.idle_gpu_hours]
    return PlotData(
        energy=[(r.namespace, float(r.kwh)) for r in rows],
        facility=[(r.namespace, float(r.facility_kwh)) for r in rows],
        days=[str(d) for d in days],
        trend=trend,
        idle_hours=[(r.namespace, float(r.idle_gpu_hours)) for r in idle],
        idle_cost=[
            (f"{r.namespace} ({c})", float(v))
            for r in idle
            for c, v in sorted(r.idle_gpu_cost.items())
        ],
    )
