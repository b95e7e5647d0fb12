"""`wattprobe report` as one function: read, check for gaps, compute, write."""

from __future__ import annotations

import sys
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import TextIO

from exporter.app.report import ReportError
from exporter.app.report.compute import Report, compute
from exporter.app.report.csvout import render_csv
from exporter.app.report.fetch import NAMED, Plan, fetch, list_nodes
from exporter.app.report.gaps import missing_days
from exporter.app.report.htmlout import render_html
from exporter.app.report.period import Period
from exporter.app.report.png import write_png
from exporter.app.report.query import Client

FORMATS = ("csv", "html", "png")


@dataclass(frozen=True)
class Options:
    prometheus: str
    period: Period
    out: Path
    fmt: str
    selector: str = ""
    timeout_s: float = 30.0
    nodes_per_query: int = 100
    idle_for_s: int = 3600
    allow_partial: bool = False


def check_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{url!r} is not an http:// or https:// URL")
    return url


@contextmanager
def _progress(total: int, stream: TextIO) -> Iterator[Callable[[str], None]]:
    """A rich progress bar on a terminal; nothing elsewhere (a pipe, a CI log)."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    if not tty:
        yield lambda _what: None
        return
    from rich.console import Console  # noqa: PLC0415 (only on a terminal)
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    bar = Progress(
        TextColumn("querying Prometheus {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeRemainingColumn(),
        console=Console(file=stream),
        transient=True,
    )
    with bar:
        task = bar.add_task("", total=total)
        yield lambda what: bar.update(task, advance=1, description=what)


def build(options: Options, stream: TextIO | None = None) -> Report:
    client = Client(options.prometheus, options.timeout_s)
    plan = Plan(options.selector, options.nodes_per_query, options.idle_for_s * 1000)
    nodes = list_nodes(client, plan, options.period)
    days = options.period.days()
    batches = -(-len(nodes) // options.nodes_per_query)
    # stderr when called, not when imported (tests swap it)
    with _progress(len(days) * batches, stream or sys.stderr) as advance:
        chunks = fetch(client, plan, options.period, nodes, advance)
    present: dict[date, frozenset[str]] = {}
    for chunk in chunks:
        present[chunk.day] = present.get(chunk.day, frozenset()) | chunk.nodes
    problems = missing_days([d.date() for d, _ in days], present)
    report = compute(chunks)
    if problems and not options.allow_partial:
        raise ReportError(
            "partial data: " + "; ".join(problems) + " (Prometheus down or retention too short? "
            "--allow-partial writes the report anyway, with these notes)"
        )
    report.notes[:0] = [f"partial data: {p}" for p in problems]
    return report


def run(options: Options, stream: TextIO | None = None, now: datetime | None = None) -> Report:
    report = build(options, stream)
    made = now or datetime.now(UTC)
    try:
        if options.fmt == "png":
            write_png(report, options.period, options.out)
        else:
            text = (
                render_csv(report)
                if options.fmt == "csv"
                else render_html(report, options.period, options.prometheus, made)
            )
            options.out.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write {options.out}: {exc.strerror or exc}") from None
    return report


__all__ = ["FORMATS", "NAMED", "Options", "check_url", "run"]
