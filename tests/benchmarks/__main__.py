"""Run every benchmark, print a table, rewrite docs/benchmarks.md (`make bench`).

    python -m tests.benchmarks                      # everything (about 10 minutes), as root
    python -m tests.benchmarks --only collection    # one or more of: collection serving memory
                                                    # nvml ebpf
    python -m tests.benchmarks --steady-seconds 600 # a longer steady-state window
    python -m tests.benchmarks --quick --no-write   # a smoke run: small and short, no doc

The benchmarks (each module says how it measures):
- collection (collection.py): Monitor.step CPU per interval at 1k/5k/20k processes vs the floor;
- serving (serving.py): steady CPU and RSS of `wattprobe serve` on the synthetic node, exposition
  size and series per pod, scrape latency under 4 scrapers beside node_exporter;
- live (serving.py, livenode.py): serve with eBPF and with /proc side by side on this machine's
  real /proc made as busy as the synthetic node (5,000 processes in real pod cgroups);
- targets (targets.py): issue 22's targets in one table: steady CPU in both modes beside
  node_exporter's own, idle and scraped, at 5,000 processes; 20,000 / 1,000 processes; RSS;
- memory (bcc_memory.py): RSS with and without eBPF, and with the compile kept in a child;
- nvml (nvml_bench.py) and ebpf (ebpf_bench.py, when that branch is in): their own figures;
- edge (edge_latency.py): the shipped edge forwarder's latency to a receiver and its WAL growth;
- attack (attack.py, attack_tls.py): scrapes under 2,000 trickling, 100 non-reading and a flood
  of connections; then, over TLS, 2,000 stalled handshakes, 2,000 silent ClientHellos and a 20 s
  bad-handshake flood, with RSS during and 30 s after (attack_tls.py); uncached valid logins
  under 300 wrong-password connections and scrapes under a reconnect flood (attack_web.py);
  wattprobe and node_exporter one after the other;
- fleet (fleet_bench.py): a synthetic edge fleet in a real Prometheus, dashboard query times,
  memory per series, remote-write bytes per sample, the 2,000-node sizing (docs/fleet.md);
- edge-footprint (edge_footprint.py): the edge pod (agent + forwarder) on a 200-process node;
- edge-queue, edge-soak (edge_queue.py): the vmagent forwarder's queue growth per 110-pod node
  and what happens past its bound; a 10-minute receiver outage with forwarder restarts;
- fleet-vm (receivers.py): VictoriaMetrics as the receiver (memory per series), one fleet
  spread over two of them by vmagent.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.benchmarks import (
    attack,
    attack_tls,
    attack_web,
    collection,
    edge_footprint,
    edge_latency,
    edge_queue,
    fleet_bench,
    node_cost,
    plugins,
    receivers,
    report,
    serving,
    targets,
)
from tests.benchmarks.common import Context, Section

log = logging.getLogger("tests.benchmarks")

ALL = (
    "collection",
    "serving",
    "live",
    "targets",
    "memory",
    "nvml",
    "ebpf",
    "edge",
    "attack",
    "fleet",
    "edge-footprint",
    "edge-queue",
    "edge-soak",
    "fleet-vm",
    "node-cost",
)

NOTES = """\
- The synthetic node (tests/benchmarks/synthetic.py) is procfs/sysfs/cgroup trees on tmpfs in
  the kernel's formats: kernel threads, host services, and per pod a pause process plus its app
  containers' processes, in the cgroup layouts of the systemd driver (containerd, CRI-O,
  cri-dockerd; cgroup v2) and the cgroupfs driver (containerd; cgroup v1); RAPL and hwmon from
  tests/fixtures/sys; the 8 x H100 NVML scenario with a pod on every GPU. Between intervals 30 %
  of the processes run and 1 % exit and are replaced.
- Reading tmpfs is cheaper than reading the real /proc (the kernel formats each stat file on
  read), so the absolute floors here are lower than on a node; the ratios to the floor are what
  carries over.
- CPU figures are CPU time (not wall time) of the measured thread or process, so waiting for a
  CPU on the shared machine is not counted; cache and memory-bandwidth contention from the other
  jobs is, and makes every figure here an upper bound."""


def _sections(args: argparse.Namespace, ctx: Context, log_dir: Path) -> list[Section]:
    steps: dict[str, Callable[[], list[Section]]] = {
        "collection": lambda: [
            collection.run(ctx, tuple(args.scales), args.rounds, args.live_processes)
        ],
        "serving": lambda: serving.run(
            ctx,
            serving.ServingOptions(
                steady_s=args.steady_seconds,
                requests=args.requests,
                rounds=args.scrape_rounds,
            ),
            log_dir,
        ),
        "live": lambda: [serving.live(ctx, args.live_seconds, log_dir)],
        "targets": lambda: [targets.run(ctx, args.targets_seconds, log_dir)],
        "memory": lambda: [_memory()],
        "nvml": lambda: [plugins.nvml(args.nvml_repeat)],
        "ebpf": lambda: [s for s in [plugins.ebpf()] if s is not None],
        "edge": lambda: [edge_latency.run(ctx, args.edge_seconds, log_dir)],
        "attack": lambda: [
            attack.run(ctx, args.attack_seconds, log_dir),
            attack_tls.run(ctx, args.tls_attack_seconds, log_dir),
            attack_web.run(ctx, log_dir),
        ],
        "edge-footprint": lambda: [edge_footprint.run(args.edge_footprint_seconds)],
        "edge-queue": lambda: [edge_queue.run_queue(log_dir, args.edge_queue_seconds)],
        "edge-soak": lambda: [edge_queue.run_soak(log_dir, args.edge_soak_outage)],
        "fleet-vm": lambda: [receivers.run(log_dir)],
        "node-cost": lambda: [node_cost.run(ctx, args.node_cost_seconds, log_dir)],
        "fleet": lambda: [
            fleet_bench.run(fleet_bench.Options(nodes=args.fleet_nodes, window_s=args.fleet_window))
        ],
    }
    out: list[Section] = []
    for name in args.only:
        log.warning("running %s", name)
        got = steps[name]()
        for section in got:
            print(f"\n== {section.title}\n{report.table([section])}", flush=True)
        out += got
    return out


def _memory() -> Section:
    from tests.benchmarks import bcc_memory  # noqa: PLC0415 (needs root; imported when run)

    return bcc_memory.run()


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks", description=__doc__)
    parser.add_argument("--only", nargs="+", choices=ALL, default=list(ALL))
    parser.add_argument(
        "--scales",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1000, 5000, 20000],
        help="process counts of the collection benchmark (comma-separated)",
    )
    parser.add_argument("--rounds", type=int, default=12, help="collection rounds per scale")
    parser.add_argument(
        "--live-processes",
        type=int,
        default=5000,
        help="sleeping processes added to this machine's /proc for the live measurement (0: none)",
    )
    parser.add_argument("--steady-seconds", type=float, default=180.0)
    parser.add_argument(
        "--live-seconds",
        type=float,
        default=90.0,
        help="window of the side-by-side eBPF and /proc exporters on this machine",
    )
    parser.add_argument(
        "--targets-seconds",
        type=float,
        default=60.0,
        help="each window of the targets benchmark (idle and scraped at 5,000 processes, then "
        "1,000 and 20,000)",
    )
    parser.add_argument(
        "--node-cost-seconds", type=float, default=60.0, help="each level's window (node-cost)"
    )
    parser.add_argument("--requests", type=int, default=300, help="per scraper and target")
    parser.add_argument("--scrape-rounds", type=int, default=4)
    parser.add_argument("--nvml-repeat", type=int, default=500)
    parser.add_argument("--edge-seconds", type=float, default=60.0, help="edge latency window")
    parser.add_argument("--attack-seconds", type=float, default=40.0, help="per exporter")
    parser.add_argument(
        "--tls-attack-seconds", type=float, default=20.0, help="per TLS attack and exporter"
    )
    parser.add_argument("--fleet-nodes", type=int, default=fleet_bench.Options.nodes)
    parser.add_argument(
        "--fleet-window", type=float, default=fleet_bench.Options.window_s, help="seconds"
    )
    parser.add_argument(
        "--edge-footprint-seconds", type=float, default=60.0, help="edge pod window"
    )
    parser.add_argument(
        "--edge-queue-seconds", type=float, default=60.0, help="queue growth window per node"
    )
    parser.add_argument(
        "--edge-soak-outage", type=float, default=600.0, help="receiver outage of the soak, s"
    )
    parser.add_argument("--quick", action="store_true", help="small and short: a smoke run")
    parser.add_argument("--no-write", action="store_true", help="leave docs/benchmarks.md alone")
    args = parser.parse_args(argv)
    if args.quick:
        args.scales, args.rounds, args.live_processes = [500, 2000], 3, 500
        args.steady_seconds, args.requests, args.scrape_rounds = 20.0, 40, 2
        args.live_seconds = args.targets_seconds = 20.0
        args.nvml_repeat = 50
        args.edge_seconds = 15.0
        args.attack_seconds = 15.0
        args.fleet_nodes, args.fleet_window, args.edge_footprint_seconds = 6, 900.0, 15.0
        args.edge_queue_seconds, args.edge_soak_outage = 15.0, 60.0
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    with Context.create() as ctx, tempfile.TemporaryDirectory() as logs:
        sections = _sections(args, ctx, Path(logs))
    print("\n== all figures\n" + report.table(sections))
    command = " ".join(["python -m tests.benchmarks", *map(shlex.quote, argv)])
    if not args.no_write:
        earlier = report.earlier_sections(report.DOC.read_text()) if report.DOC.exists() else []
        report.DOC.write_text(report.markdown(sections, command, NOTES, earlier))
        print(f"\nwrote {report.DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
