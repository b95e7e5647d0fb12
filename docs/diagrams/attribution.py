"""Draw docs/attribution.svg: one interval of attribution, with the worked example's numbers.

    python docs/diagrams/attribution.py > docs/attribution.svg     (or: make docs)

The numbers are computed here from the example's inputs (the same as in docs/attribution.md),
so the picture always adds up; tests/project/test_docs.py checks the committed SVG is this output.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from xml.sax.saxutils import escape

INTERVAL_S = 5.0
# CPU: two sockets' package counters, and a fixed idle power per socket
PACKAGE_J = {"intel-rapl:0": 250.0, "intel-rapl:1": 200.0}
PACKAGE_IDLE_W = 24.0
CPU_SECONDS = {  # container -> (pod, CPU seconds in the interval)
    "nginx": ("pod A", 3.0),
    "envoy": ("pod A", 1.0),
    "python": ("pod B", 4.0),
    "system_processes": ("", 1.5),
    "kernel_processes": ("", 0.5),
}
# GPU 0, time-sliced: its energy counter, its idle power, per-process SM utilization
GPU_J = 1500.0
GPU_IDLE_W = 60.0
SM_PERCENT = {"python": ("pod B", 60.0), "notebook": ("pod C", 20.0)}

WIDTH, HEIGHT = 1120, 630
BOX_W, BOX_H = 210, 44
WIDE = 235  # the idle boxes spell out their rule
COLUMNS = (20, 255, 490, 745, 940)
INK, MUTED, CPU, GPU, IDLE = "#1f2933", "#616e7c", "#2f6fb3", "#3f8f4f", "#9aa5b1"


@dataclass(frozen=True)
class Box:
    x: float
    y: float
    lines: tuple[str, ...]
    color: str
    w: float = BOX_W
    h: float = BOX_H

    @property
    def left(self) -> tuple[float, float]:
        return self.x, self.y + self.h / 2

    @property
    def right(self) -> tuple[float, float]:
        return self.x + self.w, self.y + self.h / 2


def _num(value: float) -> str:
    return f"{value:g}"


def box_svg(b: Box) -> str:
    out = [
        f'<rect x="{_num(b.x)}" y="{_num(b.y)}" width="{_num(b.w)}" height="{_num(b.h)}" '
        f'rx="6" fill="white" stroke="{b.color}" stroke-width="1.5"/>'
    ]
    first = b.y + b.h / 2 - (len(b.lines) - 1) * 8 + 4
    for i, line in enumerate(b.lines):
        weight = ' font-weight="bold"' if i == 0 else ""
        fill = INK if i == 0 else MUTED
        out.append(
            f'<text x="{_num(b.x + 10)}" y="{_num(first + 16 * i)}" fill="{fill}"{weight}>'
            f"{escape(line)}</text>"
        )
    return "\n".join(out)


def arrow_svg(a: tuple[float, float], b: tuple[float, float], color: str, label: str = "") -> str:
    (x1, y1), (x2, y2) = a, b
    mid = (x1 + x2) / 2
    path = (
        f'<path d="M{_num(x1)},{_num(y1)} C{_num(mid)},{_num(y1)} {_num(mid)},{_num(y2)} '
        f'{_num(x2 - 6)},{_num(y2)}" fill="none" stroke="{color}" stroke-width="1.4" '
        f'marker-end="url(#arrow-{color[1:]})"/>'
    )
    if not label:
        return path
    return path + (
        f'\n<text x="{_num(mid)}" y="{_num((y1 + y2) / 2 - 4)}" fill="{color}" '
        f'text-anchor="middle" font-size="11">{escape(label)}</text>'
    )


def render() -> str:
    package_j = sum(PACKAGE_J.values())
    package_idle = min(PACKAGE_IDLE_W * INTERVAL_S * len(PACKAGE_J), package_j)
    package_active = package_j - package_idle
    cpu_total = sum(s for _, s in CPU_SECONDS.values())
    gpu_idle = min(GPU_IDLE_W * INTERVAL_S, GPU_J)
    gpu_active = GPU_J - gpu_idle
    sm_total = sum(p for _, p in SM_PERCENT.values())

    parts: list[str] = []
    boxes: list[Box] = []

    def add(b: Box) -> Box:
        boxes.append(b)
        return b

    # column 1: what the sources measured
    sockets = [
        add(Box(COLUMNS[0], 70 + 60 * i, (f"RAPL {dev}", f"package +{_num(j)} J"), CPU))
        for i, (dev, j) in enumerate(PACKAGE_J.items())
    ]
    gpu_src = add(Box(COLUMNS[0], 430, ("NVML GPU 0", f"energy counter +{_num(GPU_J)} J"), GPU))
    # column 2: per zone kind, summed over devices
    package = add(
        Box(
            COLUMNS[1], 100, ("zone package", f"{_num(package_j)} J over {_num(INTERVAL_S)} s"), CPU
        )
    )
    gpu_zone = add(Box(COLUMNS[1], 430, ("zone gpu, gpu=0", f"{_num(GPU_J)} J"), GPU))
    # column 3: idle and active
    idle_rule = f"min({_num(PACKAGE_IDLE_W)} W x 2 x {_num(INTERVAL_S)} s, {_num(package_j)} J)"
    p_idle = add(
        Box(
            COLUMNS[2],
            40,
            ("idle, stays on the node", f"{idle_rule} = {_num(package_idle)} J"),
            IDLE,
            w=WIDE,
        )
    )
    p_active = add(Box(COLUMNS[2], 160, ("active", f"{_num(package_active)} J"), CPU, w=WIDE))
    gpu_rule = f"min({_num(GPU_IDLE_W)} W x {_num(INTERVAL_S)} s, {_num(GPU_J)} J)"
    g_idle = add(
        Box(
            COLUMNS[2],
            380,
            ("idle, stays on the node", f"{gpu_rule} = {_num(gpu_idle)} J"),
            IDLE,
            w=WIDE,
        )
    )
    g_active = add(Box(COLUMNS[2], 480, ("active", f"{_num(gpu_active)} J"), GPU, w=WIDE))
    # column 4: containers by their share of the interval's activity
    containers: dict[str, Box] = {}
    pod_j: dict[str, dict[str, float]] = {}
    for i, (name, (pod, seconds)) in enumerate(CPU_SECONDS.items()):
        share = seconds / cpu_total
        joules = package_active * share
        containers[name] = add(
            Box(
                COLUMNS[3],
                30 + 56 * i,
                (name + (f" ({pod})" if pod else ""), f"{share:.0%} of CPU time: {_num(joules)} J"),
                CPU,
                w=180,
            )
        )
        if pod:
            pod_j.setdefault(pod, {}).setdefault("package", 0.0)
            pod_j[pod]["package"] += joules
    gpu_containers: dict[str, Box] = {}
    for i, (name, (pod, sm)) in enumerate(SM_PERCENT.items()):
        share = sm / sm_total
        joules = gpu_active * share
        gpu_containers[name] = add(
            Box(
                COLUMNS[3],
                420 + 60 * i,
                (f"{name} ({pod})", f"{share:.0%} of SM use: {_num(joules)} J"),
                GPU,
                w=180,
            )
        )
        pod_j.setdefault(pod, {}).setdefault("gpu", 0.0)
        pod_j[pod]["gpu"] += joules
    # column 5: pods, the sum of their containers, zone by zone
    pods: dict[str, Box] = {}
    for i, (pod, zones) in enumerate(sorted(pod_j.items())):
        lines = ", ".join(f"{zone} {_num(j)} J" for zone, j in sorted(zones.items()))
        pods[pod] = add(Box(COLUMNS[4], 90 + 130 * i, (pod, lines), INK, w=170))

    for s in sockets:
        parts.append(arrow_svg(s.right, package.left, CPU))
    parts.append(arrow_svg(gpu_src.right, gpu_zone.left, GPU))
    parts.append(arrow_svg(package.right, p_idle.left, IDLE))
    parts.append(arrow_svg(package.right, p_active.left, CPU))
    parts.append(arrow_svg(gpu_zone.right, g_idle.left, IDLE))
    parts.append(arrow_svg(gpu_zone.right, g_active.left, GPU))
    for b in containers.values():
        parts.append(arrow_svg(p_active.right, b.left, CPU))
    for b in gpu_containers.values():
        parts.append(arrow_svg(g_active.right, b.left, GPU))
    for name, (pod, _) in CPU_SECONDS.items():
        if pod:
            parts.append(arrow_svg(containers[name].right, pods[pod].left, CPU))
    for name, (pod, _) in SM_PERCENT.items():
        parts.append(arrow_svg(gpu_containers[name].right, pods[pod].left, GPU))

    return document(parts + [box_svg(b) for b in boxes], package_j, package_active, package_idle)


def document(body: list[str], package_j: float, package_active: float, package_idle: float) -> str:
    """The SVG around the boxes and arrows: column headings, notes, arrow heads."""
    headings = ("measured", "zone (devices summed)", "idle / active", "containers", "pods")
    head = [
        f'<text x="{_num(x)}" y="18" fill="{MUTED}" font-weight="bold">{escape(h)}</text>'
        for x, h in zip(COLUMNS, headings, strict=True)
    ]
    notes = [
        f"Per zone, active + idle = measured ({_num(package_j)} J = {_num(package_active)} J + "
        f"{_num(package_idle)} J), and the containers' active joules add up to the node's.",
        "A pod is the sum of its containers. Zones are never added to each other (package "
        "contains core).",
        "Idle power comes from --power.idle (learned from idleness or given); CPU idle stays on "
        "the node, a GPU's goes to its holders (--attribution.idle).",
    ]
    foot = [
        f'<text x="20" y="{HEIGHT - 56 + 18 * i}" fill="{MUTED}">{escape(n)}</text>'
        for i, n in enumerate(notes)
    ]
    markers = "\n".join(
        f'<marker id="arrow-{c[1:]}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        f'markerHeight="7" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="{c}"/></marker>'
        for c in (CPU, GPU, IDLE)
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="Helvetica, Arial, sans-serif" '
        'font-size="13" role="img">\n'
        "<title>How wattprobe attributes one interval of energy</title>\n"
        "<desc>RAPL and NVML energy per zone is split into idle and active; active energy goes "
        "to containers by their share of CPU time (CPU zones) or SM utilization (GPUs); pods sum "
        "their containers. Generated by docs/diagrams/attribution.py.</desc>\n"
        f"<defs>\n{markers}\n</defs>\n"
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="#fbfcfd"/>\n'
        + "\n".join(head + body + foot)
        + "\n</svg>\n"
    )


if __name__ == "__main__":
    sys.stdout.write(render())
