"""`wattprobe report`: per-namespace energy, facility energy, cost, carbon and GPU hours over a
period, read from Prometheus and written as CSV, a self-contained HTML page or a PNG.

Modules, one job each: period (what time span), query (the Prometheus HTTP API client), promql
(the expressions), fetch (the queries per day and node batch), chunk (one day's answers), parse
(answers to a chunk), gaps (missing days), compute (pure: chunks to rows), figures (columns and
rounding), csvout, htmlout, svg (inline plots), png (matplotlib, optional), command (the whole
run, with its progress bar). docs/report.md describes the figures.
"""

from __future__ import annotations


class ReportError(Exception):
    """A failure the user is told about in one line (exit 1): never a traceback."""
