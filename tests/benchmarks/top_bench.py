"""What one refresh of `wattprobe top` costs on a large node: reading, computing, drawing.

    python -m tests.benchmarks.top_bench            # print the figures
    python -m tests.benchmarks.top_bench --write    # and rewrite docs/benchmarks-top.md

The node: 8 GPUs, 6 RAPL zones, 300 pods of 3 containers each (900 containers), as the exporter's
collector renders them. `--from` parses the exposition text; in-process `top` renders the
Snapshot through the collector instead. The figures are per refresh (once per interval).
"""

from __future__ import annotations

import argparse
import io
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from rich.console import Console

from exporter.app.top.feeds import interval_marker
from exporter.app.top.frame import frame_between
from exporter.app.top.render import Screen, render
from exporter.app.top.scrape import from_snapshot, from_text
from exporter.exposition.collector import SnapshotCollector
from exporter.model.snapshot import ContainerCounters, NodeZoneEnergy, Snapshot
from tests.app.top.snapshots import container, gpu, snapshot

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "benchmarks-top.md"
COMMAND = "python -m tests.benchmarks.top_bench --write"
PODS, CONTAINERS_PER_POD, GPUS = 300, 3, 8


def node(sequence: int, scale: float) -> Snapshot:
    zones = [
        NodeZoneEnergy(zone, f"intel-rapl:{s}{suffix}", "rapl", 100.0 * scale, 50.0 * scale)
        for s in (0, 1)
        for zone, suffix in (("package", ""), ("core", ":0"), ("dram", ":1"))
    ]
    containers: list[ContainerCounters] = []
    for p in range(PODS):
        for c in range(CONTAINERS_PER_POD):
            n = p * CONTAINERS_PER_POD + c
            amounts = {("package", ""): scale * (n + 1), ("dram", ""): scale}
            if p < 2 * GPUS:
                amounts[("gpu", str(p % GPUS))] = 10.0 * scale
            containers.append(
                container(
                    n % 250,
                    amounts,
                    scale * c,
                    pod_uid=f"{p:08x}-0000-4000-8000-{n:012x}",
                    name=f"container-{c}",
                    pod=f"inference-{p}-7d9f8c6b5-xk2p4",
                    namespace=f"team-{p % 12}",
                )
            )
    return snapshot(
        sequence,
        1000.0 + 5 * sequence,
        node=zones,
        containers=containers,
        gpus=[gpu(i, 1000.0 * scale) for i in range(GPUS)],
    )


def exposition(snap: Snapshot) -> str:
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snap))
    return generate_latest(registry).decode()


def timed(fn: Callable[[], object], repeat: int) -> list[float]:
    fn()
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {DOC.relative_to(REPO)}")
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()

    before, after = node(3, 1.0), node(4, 2.0)
    text_after = exposition(after)
    scrape_before, scrape_after = from_snapshot(before, 0.0), from_snapshot(after, 0.0)
    frame = frame_between(scrape_before, scrape_after)
    assert frame is not None
    console = Console(width=80, height=24, file=io.StringIO(), color_system="truecolor")

    def draw() -> None:
        console.file = io.StringIO()
        console.print(render(frame, Screen("this node"), frame.sources, 80, 24))

    rows = [
        (
            "look for a new interval in the page (every poll)",
            timed(lambda: interval_marker(text_after), args.repeat),
        ),
        ("parse /metrics text (`--from`)", timed(lambda: from_text(text_after, 0.0), args.repeat)),
        (
            "Snapshot -> families -> scrape (in-process)",
            timed(lambda: from_snapshot(after, 0.0), args.repeat),
        ),
        (
            "two scrapes -> frame (rates, 900 + 300 rows)",
            timed(lambda: frame_between(scrape_before, scrape_after), args.repeat),
        ),
        ("draw an 80x24 screen (sort, lay out, ANSI)", timed(draw, args.repeat)),
    ]
    size_kib = len(text_after.encode()) / 1024
    lines = [
        "# Benchmark: one refresh of `wattprobe top`",
        "",
        f"A large node: {GPUS} GPUs, 6 RAPL zones, {PODS} pods x {CONTAINERS_PER_POD} containers "
        f"({PODS * CONTAINERS_PER_POD} containers); its /metrics page is {size_kib:,.0f} KiB. "
        "`top --from` looks for a new interval on every poll (1 s) and parses only new ones; "
        "in-process `top` takes the Snapshot instead. Both compute a frame and draw once per "
        "interval, and redraw (the last step alone) on a key press or resize.",
        "",
        f"Rerun: `{COMMAND}` ({args.repeat} repetitions each).",
        "",
        "| step | median ms | p90 ms |",
        "|---|---|---|",
    ]
    for name, times in rows:
        ms = sorted(t * 1000 for t in times)
        p90 = ms[int(0.9 * (len(ms) - 1))]
        lines.append(f"| {name} | {statistics.median(ms):,.3f} | {p90:,.3f} |")
    load = os.getloadavg()[0]
    lines += [
        "",
        f"- Machine: {platform.system()} {platform.release()}, {platform.machine()}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load average {load:.1f} "
        "when measured (shared with other jobs: compare medians).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.write:
        DOC.write_text(text)


if __name__ == "__main__":
    main()
