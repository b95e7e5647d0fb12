"""Pure arithmetic from Prometheus answers to the report's rows.

Everything is a Fraction (Prometheus' decimal strings read exactly), so the rows add up exactly:
per node and day, the pods' energy plus the node row (what stays on the node: idle, system and
kernel work, energy not attributed) equals the node's measured energy, and each factor multiplies
per node before anything is summed across nodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import date
from fractions import Fraction

from exporter.app.report.chunk import J_PER_KWH, NODE_ROW, WHOLE_GPU_RESOURCE, ZERO, Chunk, Held


def _add(
    into: dict[str, Fraction], currency_amounts: Mapping[str, Fraction], times: Fraction
) -> None:
    for currency, amount in currency_amounts.items():
        into[currency] = into.get(currency, ZERO) + amount * times


@dataclass
class Row:
    """One namespace (or the node row) over the whole period."""

    namespace: str
    energy_j: Fraction = ZERO
    facility_j: Fraction = ZERO
    cost: dict[str, Fraction] = field(default_factory=dict)  # per currency
    carbon_g: Fraction = ZERO
    unpriced_j: Fraction = ZERO  # energy on nodes without a price: no cost, never a made-up one
    gpu_hours: Fraction = ZERO
    idle_gpu_hours: Fraction = ZERO
    gpu_cost: dict[str, Fraction] = field(default_factory=dict)
    idle_gpu_cost: dict[str, Fraction] = field(default_factory=dict)
    unpriced_gpu_hours: Fraction = ZERO

    @property
    def kwh(self) -> Fraction:
        return self.energy_j / J_PER_KWH

    @property
    def facility_kwh(self) -> Fraction:
        return self.facility_j / J_PER_KWH


@dataclass
class Report:
    rows: list[Row]  # namespaces by energy, largest first, then the node row
    total: Row
    daily: dict[date, dict[str, Fraction]]  # day -> namespace -> energy in J
    node_energy_j: Fraction
    notes: list[str]

    @property
    def currencies(self) -> list[str]:
        found = {c for r in self.rows for d in (r.cost, r.gpu_cost, r.idle_gpu_cost) for c in d}
        return sorted(found)


def gpu_price(chunk: Chunk, node: str, uuid: str) -> dict[str, Fraction]:
    """A GPU's price per hour by currency: its model's entry, else the whole-GPU resource's."""
    entries = chunk.gpu_prices.get(node, ())
    model = chunk.gpu_model.get((node, uuid))
    by_model = {p.currency: p.per_hour for p in entries if model is not None and p.model == model}
    if by_model:
        return by_model
    return {p.currency: p.per_hour for p in entries if p.resource == WHOLE_GPU_RESOURCE}


def device_price(chunk: Chunk, held: Held) -> dict[str, Fraction]:
    """What a namespace pays per hour for what it held: a whole GPU its gpu_price; a MIG device
    the entry for the resource it was allocated as (not nvidia.com/gpu: that is the whole GPU's
    price), else its GPU's price times its GPU instance's share; {} where neither is known (as
    the showback rules, docs/showback.md)."""
    if not held.mig_device:
        return gpu_price(chunk, held.node, held.uuid)
    resource = chunk.mig_resource.get((held.node, held.uuid, held.mig_device), "")
    entries = chunk.gpu_prices.get(held.node, ())
    if resource and resource != WHOLE_GPU_RESOURCE:
        by_resource = {p.currency: p.per_hour for p in entries if p.resource == resource}
        if by_resource:
            return by_resource
    share = chunk.mig_share.get((held.node, held.uuid, held.gpu_instance))
    if share is None:
        return {}
    return {c: p * share for c, p in gpu_price(chunk, held.node, held.uuid).items()}


def _energy_into(
    row: Row, chunk: Chunk, node: str, joules: Fraction, missing: dict[str, set[str]]
) -> None:
    pue = chunk.pue.get(node)
    if pue is None:
        missing["PUE"].add(node)
    facility = joules * (pue if pue is not None else 1)
    row.energy_j += joules
    row.facility_j += facility
    carbon = chunk.carbon.get(node)
    if carbon is None:
        missing["carbon intensity"].add(node)
    else:
        row.carbon_g += facility / J_PER_KWH * carbon
    prices = chunk.price.get(node)
    if not prices:
        missing["energy price"].add(node)
        row.unpriced_j += joules
    else:
        _add(row.cost, prices, facility / J_PER_KWH)


def compute(chunks: Iterable[Chunk]) -> Report:
    rows: dict[str, Row] = {}
    daily: dict[date, dict[str, Fraction]] = defaultdict(lambda: defaultdict(Fraction))
    missing: dict[str, set[str]] = defaultdict(set)
    notes: list[str] = []
    node_total = ZERO

    def row(namespace: str) -> Row:
        return rows.setdefault(namespace, Row(namespace))

    for chunk in chunks:
        energies, pods_of = chunk.node_energies(), chunk.pods_by_node()
        for node in sorted(energies.keys() | pods_of.keys()):
            pods = dict(pods_of.get(node, {}))
            measured = energies.get(node)
            if measured is None:
                missing["node energy"].add(node)
                measured = sum(pods.values(), ZERO)
            node_total += measured
            # the node row is the rest, even when negative (pods' counters ahead of the node's
            # by a scrape): clamping it would break the sum
            pods[NODE_ROW] = measured - sum(pods.values(), ZERO)
            for namespace, joules in pods.items():
                _energy_into(row(namespace), chunk, node, joules, missing)
                daily[chunk.day][namespace] += joules
        for held, minutes in chunk.gpu_minutes.items():
            r, hours = row(held.namespace), minutes / 60
            price = device_price(chunk, held)
            r.gpu_hours += hours
            _add(r.gpu_cost, price, hours)
            if not price:
                r.unpriced_gpu_hours += hours
                what = f" MIG device {held.mig_device}" if held.mig_device else ""
                missing["GPU-hour price"].add(f"{held.node} GPU {held.uuid}{what}")
        for (node, namespace, uuid), minutes in chunk.idle_minutes.items():
            r, hours = row(namespace), minutes / 60
            r.idle_gpu_hours += hours
            _add(r.idle_gpu_cost, gpu_price(chunk, node, uuid), hours)
    for what, nodes in sorted(missing.items()):
        notes.append(f"no {what} for {', '.join(sorted(nodes))}" + _consequence(what))
    ordered = sorted(
        (r for n, r in rows.items() if n != NODE_ROW), key=lambda r: (-r.energy_j, r.namespace)
    )
    if NODE_ROW in rows:
        ordered.append(rows[NODE_ROW])
    return Report(
        ordered,
        total_of(ordered),
        {d: dict(v) for d, v in sorted(daily.items())},
        node_total,
        notes,
    )


def _consequence(what: str) -> str:
    return {
        "PUE": ": their facility energy is their IT energy (no overhead counted)",
        "energy price": ": their energy has no cost (column unpriced_kwh)",
        "carbon intensity": ": their energy has no carbon figure",
        "GPU-hour price": ": its hours have no cost (column unpriced_gpu_hours)",
        "node energy": " on some days, only pods' energy: their pods' energy is taken as theirs",
    }.get(what, "")


def total_of(rows: Iterable[Row]) -> Row:
    """The total row: every field of Row but its name summed over the rows (money per currency).

    The fields come from the dataclass, so a field added to Row is in the total without a change
    here (tests/app/report/test_compute_props.py checks each field against the rows' sum).
    """
    total = Row("(total)")
    for r in rows:
        for f in fields(Row):
            if f.name == "namespace":
                continue
            mine, theirs = getattr(total, f.name), getattr(r, f.name)
            if isinstance(mine, dict):
                _add(mine, theirs, Fraction(1))
            else:
                setattr(total, f.name, mine + theirs)
    return total
