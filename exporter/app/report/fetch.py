"""Runs the report's queries: one chunk per UTC day and batch of nodes, so no single query
covers the whole fleet for the whole month, and the progress bar moves per chunk."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from exporter.app.report import ReportError
from exporter.app.report.chunk import Chunk
from exporter.app.report.parse import parse_chunk
from exporter.app.report.period import Period
from exporter.app.report.promql import Queries, node_matcher
from exporter.app.report.query import Client, Sample

# the per-chunk expressions, by the name compute.parse_chunk reads them under
FACTORS = {"pue": "wattprobe_node_pue", "carbon": "wattprobe_carbon_intensity_grams_per_kwh"}
NAMED = (
    "pod_energy",
    "node_energy",
    "attributed_zones",
    "gpu_energy",
    "energy_price",
    "energy_price_samples",
    "gpu_models",
    "gpu_hour_price",
    "gpu_minutes",
    "idle_gpu_minutes",
    "mig_resources",
    "mig_shares",
)


@dataclass(frozen=True)
class Plan:
    selector: str  # the user's matchers, e.g. job="wattprobe", cluster="eu-1"
    nodes_per_query: int
    idle_for_ms: int


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000)


def list_nodes(client: Client, plan: Plan, period: Period) -> list[str]:
    q = Queries(plan.selector, _ms(period.end) - _ms(period.start), plan.idle_for_ms)
    nodes = sorted(
        s.labels.get("node", "") for s in client.instant(q.nodes(), period.end.timestamp())
    )
    if not nodes:
        raise ReportError(
            f"no wattprobe_node_energy_joules_total{{{plan.selector}}} in {period.label}: "
            "wrong Prometheus, selector or period?"
        )
    if "" in nodes:
        raise ReportError(
            "energy series without a node label: the report is per node (docs/report.md)"
        )
    return nodes


def chunk_answers(client: Client, queries: Queries, at: float) -> dict[str, list[Sample]]:
    answers = {name: client.instant(getattr(queries, name)(), at) for name in NAMED}
    for name, metric in FACTORS.items():
        answers[name] = client.instant(queries.factor(metric), at)
    return answers


def fetch(
    client: Client,
    plan: Plan,
    period: Period,
    nodes: list[str],
    advance: Callable[[str], None] = lambda _what: None,
) -> list[Chunk]:
    """Every chunk of the period; advance(description) is called after each one."""
    batches = [
        nodes[i : i + plan.nodes_per_query] for i in range(0, len(nodes), plan.nodes_per_query)
    ]
    chunks = []
    for start, end in period.days():
        for i, batch in enumerate(batches, 1):
            selector = ", ".join(m for m in (plan.selector, node_matcher(batch)) if m)
            queries = Queries(selector, _ms(end) - _ms(start), plan.idle_for_ms)
            try:
                answers = chunk_answers(client, queries, end.timestamp())
            except ReportError as exc:
                if "too many samples" in str(exc) and len(batch) > 1:
                    raise ReportError(f"{exc} (try a smaller --nodes-per-query)") from None
                raise
            chunks.append(parse_chunk(start.date(), answers))
            advance(f"{start:%Y-%m-%d}, nodes {i}/{len(batches)}")
    return chunks
