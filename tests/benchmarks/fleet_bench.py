"""Fleet scale on a real Prometheus (tests/support/fleet.py): a synthetic fleet of edge nodes in
wattprobe's exposition shape remote-written into a receiver that evaluates the shipped rules;
every dashboard query timed; the receiver's memory per series; the bytes a real Prometheus agent
sends per sample of one node; and from those the sizing of a 2,000-node fleet.

    python -m tests.benchmarks --only fleet --no-write
    python -m tests.benchmarks.fleet_bench --nodes 60 --window 3600   # this section alone
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from alerts.generate import RULES_FILE
from tests.benchmarks import report
from tests.benchmarks.common import Figure, Section, machine_load
from tests.support.fleet import (
    Fleet,
    Loaded,
    NodeServer,
    Timed,
    grafana_builtins,
    load,
    own_metrics,
    panel_queries,
    recorded,
    start_forwarder,
    start_receiver,
    time_query,
)
from tests.support.realparts import require_binary

log = logging.getLogger("tests.benchmarks.fleet")

MiB = 1 << 20
SIZING_NODES = 2000
PANEL_GOAL_S = 1.0
RSS_SETTLE_S = 20.0  # after the last write: the head's appends settle, Go returns memory


@dataclass(frozen=True)
class Options:
    nodes: int = 60
    window_s: float = 3600.0  # history for the dashboards, at 30 s
    dense_nodes: int = 8  # the memory run at the forwarder's 1 s
    dense_window_s: float = 600.0
    agent_seconds: float = 40.0
    runs: int = 3  # per query, the median is kept


@dataclass(frozen=True)
class Memory:
    series: float
    rss: float
    heap: float
    samples: int
    ingest_s: float

    def per_series(self, empty: Memory) -> tuple[float, float]:
        n = self.series - empty.series
        return (self.rss - empty.rss) / n, (self.heap - empty.heap) / n


def _memory(metrics: dict[str, float], samples: int = 0, ingest_s: float = 0.0) -> Memory:
    return Memory(
        metrics["prometheus_tsdb_head_series"],
        metrics["process_resident_memory_bytes"],
        metrics["go_memstats_heap_inuse_bytes"],
        samples,
        ingest_s,
    )


def _settled(loaded: Loaded) -> Memory:
    time.sleep(RSS_SETTLE_S)
    return _memory(own_metrics(loaded.daemon), loaded.ingest.samples, loaded.ingest.seconds)


def _dashboards(loaded: Loaded, runs: int) -> list[Timed]:
    window = (loaded.start_s, loaded.evaluated_s, 30.0)
    queries = panel_queries(loaded.api, grafana_builtins(window[1] - window[0], 30.0))
    return [time_query(loaded.api, q, window, runs=runs) for q in queries]


@dataclass(frozen=True)
class Wire:
    bytes_per_sample: float
    samples_per_s: float
    agent_rss: float
    agent_cpu: float  # of one core


def _agent_wire(binary: str, workdir: Path, seconds: float) -> Wire:
    """A real Prometheus agent scraping one synthetic CPU node every second and remote-writing it
    to a receiver: compressed bytes per sample from its own counters."""
    node = Fleet(1, gpu_every=0)
    receiver = start_receiver(binary, workdir / "receiver")
    server = NodeServer(node.series)
    agent = None
    try:
        agent = start_forwarder(
            binary, workdir / "agent", f"127.0.0.1:{server.port}", receiver.url, node="edge-00000"
        )
        time.sleep(10.0)  # the WAL watcher and the first shards start
        m0, t0 = own_metrics(agent), time.monotonic()
        time.sleep(seconds)
        m1, t1 = own_metrics(agent), time.monotonic()
    finally:
        if agent is not None:
            agent.stop()
        server.stop()
        receiver.stop()
    sent = (
        m1["prometheus_remote_storage_samples_total"]
        - m0["prometheus_remote_storage_samples_total"]
    )
    wire = m1["prometheus_remote_storage_bytes_total"] - m0["prometheus_remote_storage_bytes_total"]
    cpu = m1["process_cpu_seconds_total"] - m0["process_cpu_seconds_total"]
    return Wire(wire / sent, sent / (t1 - t0), m1["process_resident_memory_bytes"], cpu / (t1 - t0))


def _per_node(fleet: Fleet) -> tuple[float, float, float]:
    """Raw series of a CPU node, of a GPU node, and recorded series per node."""
    counts: dict[str, int] = {}
    gpu_nodes = set()
    for s in fleet.series:
        node = dict(s.labels)["node"]
        counts[node] = counts.get(node, 0) + 1
        if s.name == "wattprobe_gpu_info":
            gpu_nodes.add(node)
    cpu = statistics.mean(v for k, v in counts.items() if k not in gpu_nodes)
    gpu = statistics.mean(v for k, v in counts.items() if k in gpu_nodes)
    rules = len(recorded(fleet.series, RULES_FILE.read_text())) / fleet.nodes
    return cpu, gpu, rules


def _sizing(fleet: Fleet, per_series_rss: float, wire: Wire) -> str:
    cpu, gpu, rules = _per_node(fleet)
    share = 1 / fleet.gpu_every
    raw = SIZING_NODES * ((1 - share) * cpu + share * gpu)
    total = raw + SIZING_NODES * rules
    rows = [
        "| 2,000 edge nodes (1 in 4 with 8 GPUs, 110 pods each) | at the forwarder's 1 s "
        "| at 15 s |",
        "|---|---|---|",
        f"| series per node (CPU / GPU node; + recorded) | {cpu:,.0f} / {gpu:,.0f}; "
        f"+{rules:,.0f} | same |",
        f"| series in the receiver (raw + recorded) | {total / 1e6:.2f} M | same |",
        f"| samples/s per node (CPU node) | {cpu:,.0f} | {cpu / 15:,.0f} |",
        f"| samples/s into the receiver | {raw / 1e6:.2f} M | {raw / 15 / 1e3:,.0f} k |",
        f"| remote-write bytes per sample (measured, one CPU node) | {wire.bytes_per_sample:.1f} "
        "| about the same (labels dominate a 1-sample batch) |",
        f"| remote-write bandwidth per CPU node | {cpu * wire.bytes_per_sample * 8 / 1e3:,.0f} "
        f"kbit/s | {cpu / 15 * wire.bytes_per_sample * 8 / 1e3:,.0f} kbit/s |",
        f"| into the receiver | {raw * wire.bytes_per_sample * 8 / 1e6:,.0f} Mbit/s "
        f"| {raw / 15 * wire.bytes_per_sample * 8 / 1e6:,.0f} Mbit/s |",
        f"| receiver memory (RSS), at {per_series_rss / 1024:.1f} KiB per series | "
        f"{total * per_series_rss / 2**30:,.1f} GiB | same (per series, not per sample) |",
    ]
    return "\n".join(rows)


def run(opts: Options) -> Section:
    binary = require_binary("prometheus")
    with machine_load() as load_sample, tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        empty_daemon = start_receiver(binary, root / "empty")
        try:
            time.sleep(RSS_SETTLE_S)
            empty = _memory(own_metrics(empty_daemon))
        finally:
            empty_daemon.stop()

        fleet = Fleet(opts.nodes)
        log.warning("fleet: %d nodes, %d series", opts.nodes, len(fleet.series))
        big = load(fleet, binary, root / "big", opts.window_s, step_s=30.0)
        try:
            timed = _dashboards(big, opts.runs)
            big_memory = _settled(big)
            ingest = big.ingest
        finally:
            big.stop()

        dense_fleet = Fleet(opts.dense_nodes)
        dense = load(dense_fleet, binary, root / "dense", opts.dense_window_s, step_s=1.0)
        try:
            dense_memory = _settled(dense)
        finally:
            dense.stop()

        wire = _agent_wire(binary, root / "wire", opts.agent_seconds)

    rss_30, heap_30 = big_memory.per_series(empty)
    rss_1, heap_1 = dense_memory.per_series(empty)
    per_series = max(rss_30, rss_1)
    pre = [t for t in timed if t.query.pre_aggregated]
    raw = [t for t in timed if not t.query.pre_aggregated]
    slowest_pre = max(pre, key=lambda t: t.seconds)
    slowest_raw = max(raw, key=lambda t: t.seconds)
    errors = [t for t in timed if t.error]
    rerun = (
        f"python -m tests.benchmarks --only fleet --fleet-nodes {opts.nodes} "
        f"--fleet-window {opts.window_s:.0f}"
    )
    figures = [
        Figure(
            "synthetic fleet in the receiver",
            f"{opts.nodes} nodes, {big_memory.series:,.0f} head series, "
            f"{ingest.samples / 1e6:.1f} M samples ({opts.window_s / 3600:.1f} h at 30 s) "
            f"written in {ingest.seconds:.0f} s",
            rerun=rerun,
        ),
        Figure(
            "slowest dashboard query on pre-aggregated series only "
            f"({len(pre)} queries, median of {opts.runs})",
            f"{slowest_pre.seconds * 1000:.0f} ms ({slowest_pre.query.panel})",
            f"< {PANEL_GOAL_S:.0f} s",
            slowest_pre.seconds < PANEL_GOAL_S,
            rerun,
        ),
        Figure(
            f"slowest dashboard query reading raw counters ({len(raw)} queries)",
            f"{slowest_raw.seconds * 1000:.0f} ms ({slowest_raw.query.panel})",
            rerun=rerun,
        ),
        Figure("dashboard queries Prometheus refused", str(len(errors)), "0", not errors, rerun),
        Figure(
            f"receiver memory per series, {opts.window_s / 3600:.1f} h at 30 s, {opts.nodes} nodes "
            "(RSS / Go heap in use)",
            f"{rss_30 / 1024:.1f} / {heap_30 / 1024:.1f} KiB",
            rerun=rerun,
        ),
        Figure(
            f"receiver memory per series, {opts.dense_window_s / 60:.0f} min at 1 s, "
            f"{opts.dense_nodes} nodes (RSS / Go heap in use)",
            f"{rss_1 / 1024:.1f} / {heap_1 / 1024:.1f} KiB",
            rerun=rerun,
        ),
        Figure(
            "remote write of one 110-pod CPU node by a real agent at 1 s: bytes per sample, "
            "samples/s",
            f"{wire.bytes_per_sample:.1f} B, {wire.samples_per_s:,.0f}/s "
            f"({wire.bytes_per_sample * wire.samples_per_s * 8 / 1e3:,.0f} kbit/s); agent RSS "
            f"{wire.agent_rss / MiB:.0f} MiB, CPU {100 * wire.agent_cpu:.1f} % of a core",
            rerun=rerun,
        ),
    ]
    table = [
        "| dashboard / panel / query | pre-aggregated | median | series |",
        "|---|---|---|---|",
    ]
    for t in sorted(timed, key=lambda t: -t.seconds):
        name = f"{t.query.dashboard.removeprefix('wattprobe-')} / {t.query.panel} / {t.query.ref}"
        cell = f"error: {t.error}" if t.error else f"{t.seconds * 1000:.0f} ms"
        table.append(
            f"| {name} | {'yes' if t.query.pre_aggregated else 'no'} | {cell} | {t.series} |"
        )
    method = (
        "tests/support/fleet.py builds each node from a real wattprobe exposition (the golden "
        "fixture host; a scrape of the fixture host with the fake NVML's 8 x H100 for every fourth "
        "node), with 110 pods of 3 containers each, and remote-writes it into Debian's "
        "Prometheus 2.42 (receiver, 127.0.0.1) in time order: the raw series and the recording "
        "rules' history, then the shipped rules (alerts/wattprobe.rules.yml) are loaded and "
        "evaluated on two fresh rounds of samples. Every dashboard target (dashboards/*.json, "
        "variables at Grafana's defaults: All nodes, the first namespace, $__range the whole "
        "history, range queries at 30 s steps) is sent to the query API; the median of "
        f"{opts.runs} runs is kept. Memory per series: the receiver's RSS and Go heap after the "
        f"writes settled ({RSS_SETTLE_S:.0f} s), minus an empty receiver's, over its head series. "
        "Bytes on the wire: a Prometheus 2.42 agent (--enable-feature=agent) scraping one "
        "synthetic CPU node every second (queue: 1 s deadline, 2,000 samples per send) and "
        "remote-writing it to a local receiver, from its prometheus_remote_storage_bytes_total "
        "and _samples_total."
    )
    details = (
        "Sizing for 2,000 edge nodes (what it means: [fleet.md](fleet.md)):\n\n"
        + _sizing(fleet, per_series, wire)
        + "\n\nEvery dashboard query, slowest first:\n\n"
        + "\n".join(table)
    )
    return Section("Fleet scale on a real Prometheus", figures, method, details, load_sample[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.fleet_bench")
    parser.add_argument("--nodes", type=int, default=Options.nodes)
    parser.add_argument("--window", type=float, default=Options.window_s)
    parser.add_argument("--dense-nodes", type=int, default=Options.dense_nodes)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    section = run(Options(args.nodes, args.window, args.dense_nodes))
    print(report.table([section]))
    print("\n" + "\n".join(report.section_lines(section)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
