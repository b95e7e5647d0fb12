"""Prometheus answers (query.Sample lists, by promql.Queries' method names) to a Chunk."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import date
from fractions import Fraction

from exporter.app.report.chunk import MAX_SHARE_DENOMINATOR, ZERO, Chunk, GpuPrice, Held
from exporter.app.report.query import Sample


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
        gpu_minutes={
            Held(*k): v
            for k, v in _by(
                answers["gpu_minutes"], "node", "namespace", "uuid", "gpu_instance", "mig_device"
            ).items()
        },
        idle_minutes=_by3(answers["idle_gpu_minutes"], "node", "namespace", "uuid"),
        gpu_model={(n, u): m for n, u, m in _by(answers["gpu_models"], "node", "uuid", "model")},
        gpu_prices={n: tuple(p) for n, p in gpu_prices.items()},
        mig_resource={
            (s.labels.get("node", ""), s.labels.get("uuid", ""), s.labels.get("mig_device", "")): (
                s.labels.get("resource", "")
            )
            for s in answers["mig_resources"]
        },
        mig_share={
            (n, u, g): v.limit_denominator(MAX_SHARE_DENOMINATOR)
            for (n, u, g), v in _by(answers["mig_shares"], "node", "uuid", "gpu_instance").items()
        },
    )
