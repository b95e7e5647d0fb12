"""The Prometheus text format (0.0.4), written like prometheus_client's generate_latest but with
each distinct label set formatted once and reused while it keeps appearing.

generate_latest validates and escapes every label name and value of every sample on every
render; for a node with a few hundred containers that was most of the render's cost
(docs/benchmarks.md). The output is byte for byte what generate_latest writes with its default
escaping (tests/exposition/test_text.py compares the two), so the renderer can change without any
scraper noticing.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import (
    UNDERSCORES,
    escape_label_name,
    escape_metric_name,
)

# OpenMetrics-only samples that the classic format moves into gauges of their own
_OM_SUFFIXES = ("_created", "_gsum", "_gcount")

LabelKey = tuple[tuple[str, str], ...]


def go_float(value: float) -> str:
    """A sample value as Go's strconv writes it (what Prometheus clients agree on): +Inf, -Inf,
    NaN, and exponent notation from 1e+06 up for positive numbers past six integer digits."""
    value = float(value)
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:
        digits = f"{text[0]}.{text[1:dot]}{text[dot + 1 :]}".rstrip("0.")
        return f"{digits}e+{dot - 1:02d}"
    return text


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _format_labels(key: LabelKey) -> str:
    if not key:
        return ""
    inner = ",".join(
        f'{escape_label_name(name, UNDERSCORES)}="{_escape_value(value)}"' for name, value in key
    )
    return "{" + inner + "}"


def _help(name: str, doc: str) -> str:
    escaped = doc.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {escaped}\n"


class TextRenderer:
    """Keeps the formatted label sets of the last render; render() reuses and refreshes them.

    Not thread-safe: one renderer per cache, used under its lock.
    """

    def __init__(self) -> None:
        self._labels: dict[LabelKey, str] = {}

    def render(self, families: Iterable[Metric]) -> bytes:
        previous = self._labels
        current: dict[LabelKey, str] = {}
        out: list[str] = []
        names: dict[str, str] = {}

        def line(name: str, labels: dict[str, str], value: float, ts: object) -> str:
            key = tuple(sorted(labels.items()))
            text = current.get(key)
            if text is None:
                text = previous.get(key)
                if text is None:
                    text = _format_labels(key)
                current[key] = text
            stamp = "" if ts is None else f" {int(float(ts) * 1000):d}"  # type: ignore[arg-type]
            escaped = names.get(name)
            if escaped is None:
                escaped = names[name] = escape_metric_name(name, UNDERSCORES)
            return f"{escaped}{text} {go_float(value)}{stamp}\n"

        for metric in families:
            name, kind = metric.name, metric.type
            if kind == "counter":
                name += "_total"
            elif kind == "info":
                name, kind = name + "_info", "gauge"
            elif kind == "stateset":
                kind = "gauge"
            elif kind == "gaugehistogram":
                kind = "histogram"
            elif kind == "unknown":
                kind = "untyped"
            escaped = escape_metric_name(name, UNDERSCORES)
            out.append(_help(escaped, metric.documentation))
            out.append(f"# TYPE {escaped} {kind}\n")
            extra: dict[str, list[str]] = {}
            for s in metric.samples:
                text = line(s.name, s.labels, s.value, s.timestamp)
                for suffix in _OM_SUFFIXES:
                    if s.name == metric.name + suffix:
                        extra.setdefault(suffix, []).append(text)
                        break
                else:
                    out.append(text)
            for suffix, lines in sorted(extra.items()):
                om_name = escape_metric_name(metric.name + suffix, UNDERSCORES)
                out.append(_help(om_name, metric.documentation))
                out.append(f"# TYPE {om_name} gauge\n")
                out.extend(lines)
        self._labels = current  # label sets that did not appear this time are dropped
        return "".join(out).encode("utf-8")
