"""Inline SVG plots for the HTML page: no script, no font or file fetched, so the page renders the
same offline, in a mail client's viewer or printed."""

from __future__ import annotations

from html import escape

# colour-blind-safe palette (Okabe-Ito), the node row grey
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
NODE_COLOUR = "#999999"
WIDTH = 760
BAR_H = 22
LABEL_W = 200


def _num(value: float) -> str:
    return f"{value:,.2f}" if abs(value) < 1000 else f"{value:,.0f}"


def bars(title: str, items: list[tuple[str, float]], unit: str) -> str:
    """Horizontal bars, one per (label, value); negative values (a node row can be) drawn as 0."""
    height = 40 + BAR_H * max(len(items), 1) + 10
    top = max([v for _, v in items] + [0.0]) or 1.0
    room = WIDTH - LABEL_W - 120
    parts = [_head(title, height)]
    if not items:
        parts.append('<text x="10" y="50" class="note">nothing in this period</text>')
    for i, (label, value) in enumerate(items):
        y = 40 + i * BAR_H
        w = max(value, 0.0) / top * room
        parts.append(
            f'<text x="{LABEL_W - 8}" y="{y + 15}" text-anchor="end">{escape(label)}</text>'
            f'<rect x="{LABEL_W}" y="{y + 3}" width="{w:.1f}" height="{BAR_H - 6}" '
            f'fill="{NODE_COLOUR if label.startswith("(") else PALETTE[0]}">'
            f"<title>{escape(label)}: "
            f"{_num(value)} {escape(unit)}</title></rect>"
            f'<text x="{LABEL_W + w + 6:.1f}" y="{y + 15}">{_num(value)} {escape(unit)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def stacked_days(
    title: str, days: list[str], series: list[tuple[str, list[float]]], unit: str
) -> str:
    """One column per day, stacked by series (name, value per day), with a legend."""
    plot_h, left, bottom = 220, 60, 40
    height = 40 + plot_h + bottom + 20 * ((len(series) + 3) // 4)
    totals = [sum(max(v[i], 0.0) for _, v in series) for i in range(len(days))]
    top = max([*totals, 0.0]) or 1.0
    step = (WIDTH - left - 10) / max(len(days), 1)
    parts = [_head(title, height)]
    parts.append(
        f'<line x1="{left}" y1="{40 + plot_h}" x2="{WIDTH - 10}" y2="{40 + plot_h}" stroke="#333"/>'
    )
    parts.append(f'<text x="{left - 6}" y="48" text-anchor="end">{_num(top)}</text>')
    parts.append(f'<text x="{left - 6}" y="{40 + plot_h}" text-anchor="end">0</text>')
    parts.append(f'<text x="10" y="30" class="note">{escape(unit)} per day</text>')
    for i, day in enumerate(days):
        x, y = left + i * step, 40.0 + plot_h
        for j, (name, values) in enumerate(series):
            h = max(values[i], 0.0) / top * plot_h
            y -= h
            colour = NODE_COLOUR if name.startswith("(") else PALETTE[j % len(PALETTE)]
            parts.append(
                f'<rect x="{x + 1:.1f}" y="{y:.1f}" width="{max(step - 2, 1):.1f}" '
                f'height="{h:.1f}" fill="{colour}"><title>{escape(day)} {escape(name)}: '
                f"{_num(values[i])} {escape(unit)}</title></rect>"
            )
        if len(days) <= 12 or i % max(len(days) // 8, 1) == 0:
            parts.append(
                f'<text x="{x + step / 2:.1f}" y="{40 + plot_h + 16}" text-anchor="middle">'
                f"{escape(day[5:])}</text>"
            )
    for j, (name, _) in enumerate(series):
        x, y = 10 + (j % 4) * 185, 40 + plot_h + bottom + 20 * (j // 4)
        colour = NODE_COLOUR if name.startswith("(") else PALETTE[j % len(PALETTE)]
        parts.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{colour}"/>')
        parts.append(f'<text x="{x + 18}" y="{y}">{escape(name)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def _head(title: str, height: int) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label="{escape(title)}">'
        f'<text x="10" y="18" class="title">{escape(title)}</text>'
    )
