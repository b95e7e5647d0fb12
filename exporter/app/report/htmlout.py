"""The report as one self-contained HTML page: the table, inline SVG plots and the notes. No
script, no external file: a finance team opens it from a mail attachment, offline."""

from __future__ import annotations

from datetime import datetime
from html import escape

from exporter.app.report.compute import Report
from exporter.app.report.figures import columns, decimal, plot_data
from exporter.app.report.period import Period
from exporter.app.report.svg import bars, stacked_days

STYLE = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1100px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.node td { color: #555; font-style: italic; }
tr.total td { font-weight: bold; border-top: 2px solid #333; }
svg { display: block; margin: 1.5em 0; font-size: 12px; }
svg text.title { font-size: 15px; font-weight: bold; }
svg text.note { fill: #666; }
.notes li { color: #844; }
"""


def render_html(report: Report, period: Period, source: str, made: datetime) -> str:
    cols = columns(report)
    head = "".join(f"<th>{escape(c.title)}</th>" for c in cols)
    body = []
    for row in [*report.rows, report.total]:
        cls = (
            ' class="total"'
            if row is report.total
            else ' class="node"'
            if row.namespace.startswith("(")
            else ""
        )
        cells = "".join(f'<td class="n">{decimal(c.value(row), c.places)}</td>' for c in cols)
        body.append(f"<tr{cls}><td>{escape(row.namespace)}</td>{cells}</tr>")
    plots = plot_data(report)
    figures = [
        bars("Energy per namespace", plots.energy, "kWh"),
        bars("Facility energy per namespace (x PUE)", plots.facility, "kWh"),
        stacked_days("Daily energy", plots.days, plots.trend, "kWh"),
        bars("Idle GPU hours (allocated, idle for the alert's duration)", plots.idle_hours, "h"),
        bars("Idle GPU cost", plots.idle_cost, ""),
    ]
    notes = "".join(f"<li>{escape(n)}</li>" for n in report.notes) or "<li>none</li>"
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>wattprobe report {escape(period.label)}</title>
<style>{STYLE}</style></head>
<body>
<h1>Energy and cost per namespace, {escape(period.label)}</h1>
<p>From {period.start:%Y-%m-%d %H:%M} to {period.end:%Y-%m-%d %H:%M} UTC, read from
{escape(source)} on {made:%Y-%m-%d %H:%M} UTC. Node energy measured:
{decimal(report.node_energy_j / 3_600_000, 6)} kWh, the sum of every row: "(node)" is what
stays on the nodes (idle, system and kernel work).</p>
<table><thead><tr><th>Namespace</th>{head}</tr></thead><tbody>
{"".join(body)}
</tbody></table>
{"".join(figures)}
<h2>Notes</h2><ul class="notes">{notes}</ul>
<p>How these figures are computed: docs/report.md in wattprobe.</p>
</body></html>
"""
