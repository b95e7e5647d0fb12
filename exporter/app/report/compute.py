"""Pure arithmetic from Prometheus answers to the report's rows.

Everything is a Fraction (Prometheus' decimal strings read exactly), so the rows add up exactly:
per node and day, the pods' energy plus the node row (what stays on the node: idle, system and
kernel work, energy not attributed) equals the node's measured energy, and each factor multiplies
per node before anything is summed across nodes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from fractions import Fraction

from exporter.app.report.query import Sample

J_PER_KWH = Fraction(3_600_000)
NODE_ROW = "(node)"  # what stays on the node: not a namespace
GPU_ZONE = "gpu"
# a GPU priced by its model first; else by the device plugin's resource for a whole GPU
WHOLE_GPU_RESOURCE = "nvidia.com/gpu"
ZERO = Fraction(0)


@dataclass(frozen=True)
class GpuPrice:
    currency: str
    model: str
    resource: str
    per_hour: Fraction


@dataclass(frozen=True)
class Chunk:
    """One day's answers for a batch of nodes, keyed by node (and namespace, zone, GPU)."""

    day: date
    pod_j: Mapping[tuple[str, str], Fraction]  # (node, namespace)
    node_zone_j: Mapping[tuple[str, str], Fraction]  # (node, zone)
    attributed: frozenset[tuple[str, str]]  # (node, zone) split among workloads
    gpu_j: Mapping[str, Fraction]
    pue: Mapping[str, Fraction]
    carbon: Mapping[str, Fraction]  # gCO2e per kWh
    price: Mapping[str, Mapping[str, Fraction]]  # node -> currency -> price per kWh
    gpu_minutes: Mapping[tuple[str, str, str], Fraction]  # (node, namespace, uuid)
    idle_minutes: Mapping[tuple[str, str, str], Fraction]
    gpu_model: Mapping[tuple[str, str], str]  # (node, uuid)
    gpu_prices: Mapping[str, tuple[GpuPrice, ...]]

    def node_energy(self, node: str) -> Fraction:
        """The node's IT energy: its zone kinds split among workloads, plus its GPUs."""
        return self.node_energies().get(node, ZERO)

    def node_energies(self) -> dict[str, Fraction]:
        """node_energy of every node with measured energy, in one pass."""
        out = dict.fromkeys(self.nodes, ZERO)
        for (node, zone), joules in self.node_zone_j.items():
            if (node, zone) in self.attributed and zone != GPU_ZONE:
                out[node] += joules
        for node, joules in self.gpu_j.items():
            out[node] += joules
        return out

    def pods_by_node(self) -> dict[str, dict[str, Fraction]]:
        """node -> namespace -> pod energy, in one pass."""
        out: dict[str, dict[str, Fraction]] = defaultdict(dict)
        for (node, namespace), joules in self.pod_j.items():
            out[node][namespace] = joules
        return dict(out)

    @property
    def nodes(self) -> frozenset[str]:
        """Nodes with measured energy in this chunk."""
        return frozenset(n for n, _ in self.node_zone_j) | frozenset(self.gpu_j)


def _by(samples: Iterable[Sample], *keys: str) -> dict[tuple[str, ...], Fraction]:
    out: dict[tuple[str, ...], Fraction] = {}
    for s in samples:
        out[tuple(s.labels.get(k, "") for k in keys)] = s.value
    return out


def _by1(samples: Iterable[Sample], key: str) -> dict[str, Fraction]:
    return {s.labels.get(key, ""): s.value for s in samples}


def _by2(samples: Iterable[Sample], a: str, b: str) -> dict[tuple[str, str], Fraction]:
    return {(s.labels.get(a, ""), s.labels.get(b, "")): s.value for s in samples}


def _by3(samples: Iterable[Sample], a: str, b: str, c: str) -> dict[tuple[str, str, str], Fraction]:
    return {
        (s.labels.get(a, ""), s.labels.get(b, ""), s.labels.get(c, "")): s.value for s in samples
    }


def weighted_prices(
    avg: Iterable[Sample], count: Iterable[Sample]
) -> dict[str, dict[str, Fraction]]:
    """Price per node and currency, each currency weighted by the share of the chunk's samples
    it had (a node whose currency changed within the day pays each for its share)."""
    counts = _by2(count, "node", "currency")
    totals: dict[str, Fraction] = defaultdict(Fraction)
    for (node, _), n in counts.items():
        totals[node] += n
    out: dict[str, dict[str, Fraction]] = defaultdict(dict)
    for s in avg:
        node, currency = s.labels.get("node", ""), s.labels.get("currency", "")
        share = (
            counts.get((node, currency), ZERO) / totals[node] if totals.get(node) else Fraction(1)
        )
        out[node][currency] = s.value * share
    return dict(out)


def _cluster_node(sample: Sample) -> Sample:
    """The node key as "cluster/node" where the series has a cluster label (multi-cluster)."""
    cluster = sample.labels.get("cluster", "")
    if not cluster:
        return sample
    return Sample(
        {**sample.labels, "node": f"{cluster}/{sample.labels.get('node', '')}"}, sample.value
    )


def parse_chunk(day: date, raw: Mapping[str, list[Sample]]) -> Chunk:
    """A Chunk from the answers to promql.Queries' expressions, keyed by the method's name."""
    answers = {name: [_cluster_node(s) for s in samples] for name, samples in raw.items()}
    gpu_prices: dict[str, list[GpuPrice]] = defaultdict(list)
    for s in answers["gpu_hour_price"]:
        gpu_prices[s.labels.get("node", "")].append(
            GpuPrice(
                s.labels.get("currency", ""),
                s.labels.get("model", ""),
                s.labels.get("resource", ""),
                s.value,
            )
        )
    return Chunk(
        day=day,
        pod_j=_by2(answers["pod_energy"], "node", "namespace"),
        node_zone_j=_by2(answers["node_energy"], "node", "zone"),
        attributed=frozenset(_by2(answers["attributed_zones"], "node", "zone")),
        gpu_j=_by1(answers["gpu_energy"], "node"),
        pue=_by1(answers["pue"], "node"),
        carbon=_by1(answers["carbon"], "node"),
        price=weighted_prices(answers["energy_price"], answers["energy_price_samples"]),
        gpu_minutes=_by3(answers["gpu_minutes"], "node", "namespace", "uuid"),
        idle_minutes=_by3(answers["idle_gpu_minutes"], "node", "namespace", "uuid"),
        gpu_model={(n, u): m for n, u, m in _by(answers["gpu_models"], "node", "uuid", "model")},
        gpu_prices={n: tuple(p) for n, p in gpu_prices.items()},
    )


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
        for kind, table in (("gpu", chunk.gpu_minutes), ("idle", chunk.idle_minutes)):
            for (node, namespace, uuid), minutes in table.items():
                r = row(namespace)
                hours = minutes / 60
                price = gpu_price(chunk, node, uuid)
                if kind == "gpu":
                    r.gpu_hours += hours
                    _add(r.gpu_cost, price, hours)
                    if not price:
                        r.unpriced_gpu_hours += hours
                        missing["GPU-hour price"].add(f"{node} GPU {uuid}")
                else:
                    r.idle_gpu_hours += hours
                    _add(r.idle_gpu_cost, price, hours)
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
    total = Row("(total)")
    for r in rows:
        total.energy_j += r.energy_j
        total.facility_j += r.facility_j
        total.carbon_g += r.carbon_g
        total.unpriced_j += r.unpriced_j
        total.gpu_hours += r.gpu_hours
        total.idle_gpu_hours += r.idle_gpu_hours
        total.unpriced_gpu_hours += r.unpriced_gpu_hours
        for mine, theirs in (
            (total.cost, r.cost),
            (total.gpu_cost, r.gpu_cost),
            (total.idle_gpu_cost, r.idle_gpu_cost),
        ):
            _add(mine, theirs, Fraction(1))
    return total


def missing_days(days: list[date], present: Mapping[date, frozenset[str]]) -> list[str]:
    """Why the data is partial, one line each: days no node has data, and days inside a node's
    span (its first to its last day with data) where it has none. A node that joins or leaves
    within the period is not partial."""
    problems = []
    empty = [d for d in days if not present.get(d)]
    if empty and len(empty) < len(days):
        problems.append("no energy data at all on " + _days_text(empty))
    nodes = sorted({n for ns in present.values() for n in ns})
    for node in nodes:
        have = [d for d in days if node in present.get(d, frozenset())]
        gaps = [
            d
            for d in days
            if have[0] < d < have[-1] and node not in present.get(d, frozenset()) and d not in empty
        ]
        if gaps:
            problems.append(f"node {node} has no energy data on " + _days_text(gaps))
    return problems


def _days_text(days: list[date]) -> str:
    shown = ", ".join(str(d) for d in days[:5])
    return shown + (f" and {len(days) - 5} more days" if len(days) > 5 else "")
