"""A Frame -> one screen of `wattprobe top`, sized to the terminal (80x24 is the smallest planned).

Everything is laid out line by line: each section knows how many lines it takes, so the screen
never scrolls, whatever the number of zones, GPUs and pods. Tables never wrap; long names are cut
with an ellipsis.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from exporter.app.top.frame import Frame, Row, SortKey, View, ZonePower, sort_rows
from exporter.app.top.scrape import GpuState, SourceState

MIN_WORKLOAD_ROWS = 5
# widths of the workload table's columns after the name: namespace, CPU W, GPU W, IDLE W, CPUS,
# GPUS (watts fit in 5 characters: 999.9 or 12345)
WORKLOAD_COLUMNS = (14, 6, 6, 6, 5, 6)
MAX_ZONE_LINES = 4
ZONES_PER_LINE = 2
GIB = 2**30

KEYS = (
    ("c", "CPU W", SortKey.CPU),
    ("g", "GPU W", SortKey.GPU),
    ("i", "IDLE W", SortKey.IDLE),
    ("n", "name", SortKey.NAME),
)
SORT_LABEL = {
    SortKey.CPU: "CPU power",
    SortKey.GPU: "GPU power",
    SortKey.IDLE: "idle power",
    SortKey.NAME: "name",
}


@dataclass(frozen=True)
class Screen:
    """What the screen shows besides the measurements."""

    source: str  # "this node" or the URL read
    sort: SortKey = SortKey.CPU
    view: View = View.PODS
    waiting: str = ""  # what the first frame waits for, e.g. "measuring the first interval"
    problem: str = ""  # the latest error, one line


def _line(text: str | Text, style: str = "") -> Text:
    line = text if isinstance(text, Text) else Text(text, style=style)
    line.no_wrap = True
    line.overflow = "ellipsis"
    return line


def _table(width: int) -> Table:
    return Table(
        box=None,
        padding=(0, 1),
        collapse_padding=True,  # one space between columns
        pad_edge=False,
        show_edge=False,
        expand=True,
        width=width,
        header_style="bold reverse",
    )


def middle_ellipsis(text: str, width: int) -> str:
    """Cut in the middle: generated pod names differ at their end ("web-7d9f8-xk2p4")."""
    if len(text) <= width:
        return text
    tail = (width - 1) // 2
    return text[: width - 1 - tail] + "\u2026" + text[len(text) - tail :]


def _watts(w: float | None) -> str:
    if w is None or not math.isfinite(w):
        return "-"
    return f"{w:.1f}" if w < 1000 else f"{w:.0f}"


def _clock(wall: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(wall)) if wall else "--:--:--"


# -- sections ----------------------------------------------------------------------------


HEADER_NAME = "wattprobe top"
MIN_SOURCE = 28  # the URL read (--from) is cut in the middle down to this before the right side


def header(frame: Frame | None, screen: Screen, width: int) -> list[RenderableType]:
    """Name, source, and on the right the interval and the time it ends. The time is what a
    reader checks first (is this live?): the URL read is cut before it, then CPU busy and
    "avg over" go, so the clock stays on screen at 80 columns."""
    rights = [""]
    if frame is not None:
        clock = _clock(frame.wall_time)
        span = f"avg over {frame.seconds:.1f}s to {clock}"
        busy = f"CPU busy {frame.cpu_usage:.0%}  " if frame.cpu_usage is not None else ""
        rights = [f"{busy}{span}", span, f"{frame.seconds:.1f}s to {clock}", clock]
    fixed = len(HEADER_NAME) + 2 + 1  # two spaces before the source, at least one after it
    right = next(
        (r for r in rights if width - fixed - len(r) >= min(MIN_SOURCE, len(screen.source))),
        rights[-1],
    )
    source = middle_ellipsis(screen.source, max(width - fixed - len(right), 1))
    left = Text(HEADER_NAME, style="bold")
    left.append(f"  {source}", style="cyan")
    gap = max(width - len(left) - len(right), 1)
    left.append(" " * gap + right)
    return [_line(left)]


def zone_entry(z: ZonePower) -> list[Text]:
    devices = f" x{z.devices}" if z.devices > 1 else ""
    style = "yellow" if z.estimated else ""
    return [
        Text(f"{z.zone}{devices}", style=style),
        Text(f"{_watts(z.watts)} W", style=style or "bold"),
        Text("ESTIMATED" if z.estimated else z.source, style=style or "dim"),
    ]


def node_section(frame: Frame | None, width: int, max_lines: int) -> list[RenderableType]:
    title = Text("NODE POWER by zone", style="bold")
    title.append(" (measured unless ESTIMATED)", style="bold")
    title.append("  zones overlap: never add them up", style="dim")
    out: list[RenderableType] = [_line(title)]
    zones = frame.zones if frame is not None else ()
    if not zones:
        out.append(_line("  no power readings yet (see sources below)", "dim"))
        return out
    lines = min(math.ceil(len(zones) / ZONES_PER_LINE), max_lines)
    shown = zones[: lines * ZONES_PER_LINE]
    if len(shown) < len(zones):
        shown = zones[: lines * ZONES_PER_LINE - 1]  # the last cell says how many more
    grid = Table.grid(padding=(0, 1), expand=True)
    for _ in range(ZONES_PER_LINE):
        grid.add_column(no_wrap=True, overflow="ellipsis", ratio=1)
        grid.add_column(no_wrap=True, justify="right", width=9)
        grid.add_column(no_wrap=True, overflow="ellipsis", width=9)
    cells = [zone_entry(z) for z in shown]
    if len(shown) < len(zones):
        cells.append([Text(f"+{len(zones) - len(shown)} more", style="dim"), Text(""), Text("")])
    for i in range(0, len(cells), ZONES_PER_LINE):
        row = [c for entry in cells[i : i + ZONES_PER_LINE] for c in entry]
        row += [Text("")] * (3 * ZONES_PER_LINE - len(row))
        grid.add_row(*row)
    out.append(grid)
    return out


def node_lines(frame: Frame | None) -> int:
    zones = len(frame.zones) if frame is not None else 0
    return 1 + max(min(math.ceil(zones / ZONES_PER_LINE), MAX_ZONE_LINES), 1)


def _gpu_cells(g: GpuState) -> list[str]:
    model = g.model.removeprefix("NVIDIA ").strip() or g.uuid
    if g.lost:
        return [g.index, model, "LOST", "", "", ""]
    util = f"{g.utilization:.0%}" if g.utilization is not None else "-"
    if g.memory_used is not None and g.memory_total:
        memory = f"{g.memory_used / GIB:.1f}/{g.memory_total / GIB:.0f} GiB"
    else:
        memory = "-"
    temp = f"{g.temperature:.0f} C" if g.temperature is not None else "-"
    power = f"{g.power_w:.0f}" if g.power_w is not None else "-"
    if g.power_limit_w:
        power += f"/{g.power_limit_w:.0f} W"
    elif g.power_w is not None:
        power += " W"
    return [g.index, model, util, memory, temp, power]


def gpu_section(gpus: Sequence[GpuState], width: int, rows: int) -> list[RenderableType]:
    table = _table(width)
    table.add_column("GPU", width=3, no_wrap=True)
    table.add_column("MODEL", ratio=1, no_wrap=True, overflow="ellipsis")
    table.add_column("UTIL", width=4, justify="right", no_wrap=True)
    table.add_column("MEMORY", width=14, justify="right", no_wrap=True)
    table.add_column("TEMP", width=5, justify="right", no_wrap=True)
    table.add_column("POWER/LIMIT", width=13, justify="right", no_wrap=True)
    shown = list(gpus[:rows]) if len(gpus) <= rows else list(gpus[: max(rows - 1, 1)])
    for g in shown:
        style = "red" if g.lost else ""
        table.add_row(*_gpu_cells(g), style=style)
    if len(shown) < len(gpus):
        table.add_row("", f"+{len(gpus) - len(shown)} more GPUs", "", "", "", "", style="dim")
    return [table]


def workload_section(
    frame: Frame | None, screen: Screen, width: int, rows: int
) -> list[RenderableType]:
    noun = "PODS" if screen.view is View.PODS else "CONTAINERS"
    title = Text(f"{noun} by {SORT_LABEL[screen.sort]}", style="bold")
    if frame is not None and frame.cpu_zones:
        title.append(f"   CPU W = {'+'.join(frame.cpu_zones)} active", style="dim")
    title.append("   IDLE W = billed idle", style="dim")
    table = _table(width)
    name_width = max(width - sum(WORKLOAD_COLUMNS) - len(WORKLOAD_COLUMNS), 8)
    table.add_column(noun[:-1], width=name_width, no_wrap=True, overflow="ellipsis")
    table.add_column("NAMESPACE", width=14, no_wrap=True, overflow="ellipsis")
    table.add_column("CPU W", width=6, justify="right", no_wrap=True)
    table.add_column("GPU W", width=6, justify="right", no_wrap=True)
    table.add_column("IDLE W", width=6, justify="right", no_wrap=True)
    table.add_column("CPUS", width=5, justify="right", no_wrap=True)
    table.add_column("GPUS", width=6, no_wrap=True, overflow="ellipsis")
    ordered: list[Row] = sort_rows(frame.rows(screen.view), screen.sort) if frame else []
    shown = ordered[:rows] if len(ordered) <= rows else ordered[: max(rows - 1, 0)]
    for r in shown:
        table.add_row(
            middle_ellipsis(r.name, name_width),
            r.namespace or "-",
            _watts(r.cpu_w),
            _watts(r.gpu_w) if r.gpus or r.gpu_w else "-",
            _watts(r.idle_w) if r.idle_w else "-",
            f"{r.cpu_cores:.2f}",
            ",".join(r.gpus) or "-",
        )
    if len(shown) < len(ordered):
        table.add_row(f"+{len(ordered) - len(shown)} more", "", "", "", "", "", "", style="dim")
    return [_line(title), table]


def sources_line(sources: Sequence[SourceState]) -> Text:
    """Failures, then what works, then what the node has none of, as one short "n/a:" group:
    the line is cut from the right on a narrow terminal, so the least telling part goes last."""
    line = Text("sources: ", style="bold")
    if not sources:
        line.append("not read yet", style="dim")
    for s in sources:
        if not s.up and s.reason != "absent":
            line.append(f"{s.source} FAIL ({s.reason})", style="bold red")
            line.append("  ")
    for s in sources:
        if s.up:
            line.append(f"{s.source} ok", style="green")
            line.append("  ")
    absent = [s.source for s in sources if not s.up and s.reason == "absent"]
    if absent:
        line.append(f"n/a: {' '.join(absent)}", style="dim")
    return _line(line)


def keys_line(screen: Screen) -> Text:
    line = Text()
    for key, label, sort in KEYS:
        line.append(f" {key} ", style="reverse bold" if sort is screen.sort else "reverse")
        line.append(f" {label}  ")
    other = "containers" if screen.view is View.PODS else "pods"
    line.append(" v ", style="reverse")
    line.append(f" {other}  ")
    line.append(" q ", style="reverse")
    line.append(" quit")
    return _line(line)


# -- the screen --------------------------------------------------------------------------


def render(
    frame: Frame | None,
    screen: Screen,
    sources: Sequence[SourceState],
    width: int,
    height: int | None,
) -> RenderableType:
    """The screen, exactly height lines high; height None: every row, as tall as it needs."""
    parts: list[RenderableType] = header(frame, screen, width)
    footer: list[RenderableType] = [sources_line(sources)]
    if screen.problem:
        footer.append(_line(screen.problem, "bold red"))
    footer.append(keys_line(screen))
    if frame is None:
        parts += [Text(""), _line(f"  {screen.waiting or 'waiting for data'}...", "bold")]
        blank = max(height - len(parts) - len(footer), 0) if height is not None else 0
        return Group(*parts, *[Text("")] * blank, *footer)

    parts += node_section(frame, width, MAX_ZONE_LINES)
    workloads = len(frame.rows(screen.view))
    if height is None:
        if frame.gpus:
            parts += gpu_section(frame.gpus, width, len(frame.gpus))
        parts += workload_section(frame, screen, width, workloads)
        return Group(*parts, *footer)

    used = 1 + node_lines(frame) + len(footer)
    workload_overhead = 2  # title and table header
    gpu_overhead = 1 if frame.gpus else 0
    room = max(height - used - workload_overhead - gpu_overhead, 0)
    gpu_rows = 0
    if frame.gpus:
        gpu_rows = max(min(len(frame.gpus), room - min(workloads, MIN_WORKLOAD_ROWS)), 1)
        parts += gpu_section(frame.gpus, width, gpu_rows)
        gpu_rows = min(gpu_rows, len(frame.gpus))
    workload_rows = max(room - gpu_rows, 0)
    parts += workload_section(frame, screen, width, workload_rows)
    blank = max(height - used - gpu_overhead - gpu_rows - workload_overhead - workload_rows, 0)
    blank += workload_rows - min(workloads, workload_rows)
    return Group(*parts, *[Text("")] * blank, *footer)
