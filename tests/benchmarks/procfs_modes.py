"""The /proc activity source per process against per cgroup, at 1,000 / 5,000 / 20,000 processes.

    python -m tests.benchmarks.procfs_modes [--sizes 1000 5000 20000] [--rounds 8]

On a synthetic node (tests/benchmarks/synthetic.py: 110 pods x 3 containers + pause, cgroup v2
layouts with hierarchical cgroup totals, on /dev/shm) every round advances the node, then reads
it with each path in alternating order and takes the whole process's CPU time
(time.process_time, every thread) of:
- `tasks`: ProcfsSource.tasks() alone, per process (--collector.process: every stat file, the
  cgroup totals of the cgroups holding processes) and per cgroup (the default: the cgroup tree);
- `step`: one Monitor.step() of a monitor built as `wattprobe serve --activity-source procfs`
  (RAPL and hwmon, no NVML, no Kubernetes) with and without --collector.process.
Medians over the rounds. The pods stay at 110 whatever the processes, so per cgroup the cost
should not move with the process count. --real-cgroups (root) also times the per-cgroup walk on
this machine's cgroup v2 tree with 110 pods x 4 containers added.
"""

from __future__ import annotations

import argparse
import gc
import os
import secrets
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from exporter.app.wiring import build_monitor
from exporter.host.cgroupfs.ids import find_v2_root
from exporter.model.config import ActivitySource, Config, PodSource
from exporter.sources.activity.procfs.source import ProcfsSource
from tests.benchmarks.synthetic import HostShape, SyntheticHost

V2_LAYOUTS = ("systemd-containerd", "systemd-crio", "systemd-docker")
PAUSE_S = 0.2


def cpu(fn: Callable[[], object]) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def measure(size: int, rounds: int, where: Path) -> dict[str, float]:
    host = SyntheticHost.create(where, HostShape(processes=size, layouts=V2_LAYOUTS))
    sources = {
        "tasks per process": ProcfsSource(host.procfs, cgroupfs=host.cgroupfs, per_process=True),
        "tasks per cgroup": ProcfsSource(host.procfs, cgroupfs=host.cgroupfs, per_process=False),
    }
    assert sources["tasks per cgroup"].per_cgroup
    base = dict(
        procfs=host.procfs,
        sysfs=host.sysfs,
        activity_source=ActivitySource.PROCFS,
        pod_source=PodSource.NONE,
    )
    monitors = {
        "step per process": build_monitor(
            Config(**base, collectors=frozenset({"rapl", "hwmon", "process"}))  # type: ignore[arg-type]
        ),
        "step per cgroup": build_monitor(
            Config(**base, collectors=frozenset({"rapl", "hwmon"}))  # type: ignore[arg-type]
        ),
    }
    calls: dict[str, Callable[[], object]] = {
        **{k: s.tasks for k, s in sources.items()},
        **{k: m.step for k, m in monitors.items()},
    }
    for fn in calls.values():  # first reads: baselines, caches filled
        fn()
    samples: dict[str, list[float]] = {k: [] for k in calls}
    last = time.monotonic()
    order = list(calls)
    for r in range(rounds):
        time.sleep(PAUSE_S)
        now = time.monotonic()
        host.advance(now - last)
        last = now
        gc.collect()
        for name in order if r % 2 == 0 else reversed(order):
            samples[name].append(cpu(calls[name]))
    for m in monitors.values():
        m.close()
    return {k: statistics.median(v) for k, v in samples.items()}


def real_cgroups(pods: int = 110, containers: int = 4, walks: int = 20) -> str:
    """The per-cgroup walk on this machine's cgroup v2 tree with pods x containers empty kubepods
    cgroups added (root; removed again): real cgroupfs directories have ~50 interface files and
    cpu.stat is formatted by the kernel."""
    root = find_v2_root(Path("/sys/fs/cgroup"))
    if root is None:
        return "no cgroup v2 mount under /sys/fs/cgroup"
    top = root / f"wattprobe-bench-{secrets.token_hex(4)}"
    made: list[Path] = []

    def mkdir(d: Path) -> Path:
        d.mkdir()
        made.append(d)
        return d

    try:
        kubepods = mkdir(mkdir(top) / "kubepods.slice")
        for i in range(pods):
            qos = ("burstable", "besteffort")[i % 2]
            qos_slice = kubepods / f"kubepods-{qos}.slice"
            if not qos_slice.exists():
                mkdir(qos_slice)
            uid = str(uuid.uuid4()).replace("-", "_")
            pod = mkdir(qos_slice / f"kubepods-{qos}-pod{uid}.slice")
            for _ in range(containers):
                mkdir(pod / f"cri-containerd-{secrets.token_hex(32)}.scope")
        source = ProcfsSource(Path("/proc"), cgroupfs=Path("/sys/fs/cgroup"), per_process=False)
        source.tasks()
        tree = source._tree
        assert tree is not None
        reads = tree.reads
        before = os.times()
        times = []
        for _ in range(walks):
            times.append(cpu(source.tasks))
            time.sleep(0.05)
        after = os.times()
        # the eBPF default: the tree listed again only after a cgroup_mkdir (none here)
        unlisted = []
        for _ in range(walks):
            unlisted.append(cpu(lambda: source.tasks(walk=False)))
            time.sleep(0.05)
        return (
            f"real cgroup v2: {(tree.reads - reads) / (2 * walks):.0f} cgroups read per read, "
            f"{statistics.median(times) * 1e3:.1f} ms per tasks() with the walk (user "
            f"{(after.user - before.user) / walks * 1e3:.1f} ms, sys "
            f"{(after.system - before.system) / walks * 1e3:.1f} ms), "
            f"{statistics.median(unlisted) * 1e3:.1f} ms without it"
        )
    finally:
        for d in reversed(made):
            d.rmdir()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000, 20000])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument(
        "--real-cgroups", action="store_true", help="also time the walk on this machine's cgroupfs"
    )
    parser.add_argument(
        "--real-pods",
        type=int,
        nargs="+",
        default=[110],
        help="pods added for --real-cgroups (issue 37: 110 and 1000 pods of 2 containers give "
        "330 and 3,000 cgroups)",
    )
    parser.add_argument("--real-containers", type=int, default=4, help="containers per pod")
    args = parser.parse_args()
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    results: dict[int, dict[str, float]] = {}
    for size in args.sizes:
        tmp = Path(tempfile.mkdtemp(prefix="wattprobe-modes-", dir=shm))
        try:
            results[size] = measure(size, args.rounds, tmp / "node")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(
            f"{size} processes: "
            + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in results[size].items())
        )
    if args.real_cgroups:
        for pods in args.real_pods:
            print(f"{pods} pods x {args.real_containers} containers: ", end="")
            print(real_cgroups(pods, args.real_containers))
    print(f"load average {os.getloadavg()[0]:.1f}, {os.cpu_count()} CPUs")
    names = list(next(iter(results.values())))
    print("| processes | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for size, r in results.items():
        print(f"| {size:,} | " + " | ".join(f"{r[n] * 1e3:.1f} ms" for n in names) + " |")
    first = min(results)
    for size in results:
        if size != first:
            ratios = ", ".join(f"{n} {results[size][n] / results[first][n]:.2f}x" for n in names)
            print(f"{size:,} vs {first:,}: {ratios}")


if __name__ == "__main__":
    main()
