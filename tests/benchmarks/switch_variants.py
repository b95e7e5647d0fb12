"""Per-sched_switch cost of versions of the probes on the busy live node (issue 29). Run as root:

    .venv/bin/python -m tests.benchmarks.switch_variants runtime clock [VARIANT.c ...]

Each argument is a version: `runtime` (bpf/activity.c as shipped), `clock` (the same file with
the clock between switches: load(task_runtime=False)), or a path to another .c file with a
RAW_TRACEPOINT_PROBE(sched_switch) (an ablation: the shipped file with a part cut out, or a
program doing one thing). All are loaded in per-cgroup mode without the ioctl probe; on the live
node (tests/benchmarks/livenode.py: ~4,000 processes in 330 cgroups waking at 10 Hz) only
sched_switch of one version is attached at a time, for --seconds, in rotating rounds, and its
mean run time per event comes from bpf_stats (kernel.bpf_stats_enabled for the run only).
docs/ebpf.md's table of the variants tried was measured with it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from exporter.sources.activity.ebpf.load import SCHED_SWITCH, load
from tests.benchmarks.common import Context
from tests.benchmarks.ebpf_bench import Probes, bpf_stats
from tests.benchmarks.livenode import live_node
from tests.benchmarks.synthetic import HostShape


def _probes(version: str) -> Probes:
    source = Path(version) if version.endswith(".c") else None
    probes = Probes(
        load(per_process=False, ioctls=False, task_runtime=version != "clock", source=source)
    )
    probes.detach()
    return probes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("versions", nargs="+")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--processes", type=int, default=4000)
    args = parser.parse_args(argv)
    probes = {v: _probes(v) for v in args.versions}
    results: dict[str, list[tuple[float, float]]] = {v: [] for v in probes}
    try:
        with (
            Context.create() as ctx,
            live_node(HostShape(processes=args.processes), ctx.scratch, period_ms=100, spin_us=20),
            bpf_stats(),
        ):
            time.sleep(3)
            for r in range(args.rounds):
                names = list(probes)
                for v in names[r % len(names) :] + names[: r % len(names)]:
                    p = probes[v]
                    p.attach((SCHED_SWITCH,))
                    ns0, cnt0 = p.run_stats()[SCHED_SWITCH]
                    time.sleep(args.seconds)
                    ns1, cnt1 = p.run_stats()[SCHED_SWITCH]
                    p.detach()
                    if cnt1 > cnt0:
                        results[v].append(
                            ((ns1 - ns0) / (cnt1 - cnt0), (cnt1 - cnt0) / args.seconds)
                        )
    finally:
        for p in probes.values():
            p.bpf.cleanup()
    print("| version | ns per sched_switch (median, min) | switches/s |\n|---|---|---|")
    for v, runs in results.items():
        if runs:
            per = [ns for ns, _ in runs]
            rate = statistics.median(n for _, n in runs)
            print(f"| {v} | {statistics.median(per):.0f}, {min(per):.0f} | {rate:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
