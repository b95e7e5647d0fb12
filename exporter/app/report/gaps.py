"""Which days of the period lack data: the report refuses to bill from holes."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date


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
