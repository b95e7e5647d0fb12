"""The report as CSV: one row per namespace, the node row "(node)" and "(total)"; exact decimals."""

from __future__ import annotations

import csv
import io

from exporter.app.report.compute import Report
from exporter.app.report.figures import columns, decimal


def render_csv(report: Report) -> str:
    cols = columns(report)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["namespace", *(c.name for c in cols)])
    for row in [*report.rows, report.total]:
        writer.writerow([row.namespace, *(decimal(c.value(row), c.places) for c in cols)])
    return out.getvalue()
