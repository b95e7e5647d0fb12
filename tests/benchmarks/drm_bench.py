"""What the DRM GPU backend costs per interval on a busy node: sysfs, and mostly the fd walk.

    python -m tests.benchmarks.drm_bench                      # print the figures
    python -m tests.benchmarks.drm_bench --write              # and rewrite docs/benchmarks-drm.md
    python -m tests.benchmarks.drm_bench --processes 20000    # another scale

The synthetic node (tests/benchmarks/synthetic.py: 5,000 processes, 110 pods, 1 % churn per
interval) gets an fd directory per process in the kernel's layout (stdin/out/err on /dev/null, a
socket and a pipe each; kernel threads have none), an AMD RDNA3 card and an Intel xe card in
sysfs (tests/support/drmhost.py), and GPU_PROCESSES processes with clients on them whose fdinfo
moves
every interval. DrmSource.read() is timed per interval, after the first read, with the
incremental scan (the default: DRM holders, new PIDs and a rotating tenth of the rest) and with a
full walk of every process (recheck_every=1) for comparison. CPU time of this thread, so waiting
for a CPU on a shared machine is not counted.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

from exporter.sources.gpu.drm.clients import RECHECK_EVERY
from exporter.sources.gpu.drm.source import DrmSource
from tests.benchmarks.synthetic import HostShape, SyntheticHost
from tests.support.drmhost import ARC, RDNA3, amdgpu_fdinfo, write_card, write_fd, xe_fdinfo

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "benchmarks-drm.md"
GPU_PROCESSES = 16
INTERVALS = 30


def add_fds(host: SyntheticHost, pids: list[int]) -> None:
    for pid in pids:
        p = host.processes.get(pid)
        if p is None or p.kernel:
            continue
        fd = host.procfs / str(pid) / "fd"
        fd.mkdir(exist_ok=True)
        for n, target in enumerate(
            ("/dev/null", "/dev/null", "/dev/null", f"socket:[{pid}]", f"pipe:[{pid}]")
        ):
            link = fd / str(n)
            if not link.is_symlink():
                link.symlink_to(target)


def use_gpus(host: SyntheticHost, gpu_pids: list[int], step: int) -> None:
    for i, pid in enumerate(gpu_pids):
        if pid not in host.processes:
            continue
        if i % 2:
            text = amdgpu_fdinfo(RDNA3.pci, 100 + i, gfx_ns=step * (i + 1) * 1_000_000)
            write_fd(host.procfs, pid, 9, RDNA3.dev_node, text)
        else:
            text = xe_fdinfo(ARC.pci, 100 + i, rcs_cycles=step * (i + 1), total=step * 100_000)
            write_fd(host.procfs, pid, 9, ARC.dev_node, text)


def measure(
    host: SyntheticHost, recheck_every: int, gpu_pids: list[int], offset: int
) -> dict[str, float]:
    source = DrmSource(host.sysfs, host.procfs, recheck_every=recheck_every)
    start = time.thread_time()
    source.read()
    first = time.thread_time() - start
    times, walked = [], []
    for step in range(1, INTERVALS + 1):
        before = set(host.processes)
        host.advance()
        add_fds(host, sorted(set(host.processes) - before))
        use_gpus(host, gpu_pids, offset + step)  # counters only grow
        start = time.thread_time()
        reading = source.read()
        times.append(time.thread_time() - start)
        walked.append(source.walked)
        assert any(e.busy > 0 for g in reading.gpus for e in g.process_engine_time or ())
    return {
        "first_ms": first * 1e3,
        "median_ms": statistics.median(times) * 1e3,
        "max_ms": max(times) * 1e3,
        "walked": statistics.median(walked),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=5000)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d:
        host = SyntheticHost.create(Path(d) / "node", HostShape(processes=args.processes))
        add_fds(host, sorted(host.processes))
        for card in (RDNA3, ARC):
            write_card(host.sysfs, card)
        apps = [p.pid for p in host.processes.values() if not p.kernel]
        gpu_pids = apps[-GPU_PROCESSES:]
        use_gpus(host, gpu_pids, 0)
        incremental = measure(host, RECHECK_EVERY, gpu_pids, 0)
        full = measure(host, 1, gpu_pids, INTERVALS)
    rows = [
        ("incremental (default)", incremental),
        ("full walk of every process", full),
    ]
    table = [
        "| fd scan | first read ms | median ms per interval | max ms | processes walked |",
        "|---|---|---|---|---|",
        *(
            f"| {name} | {r['first_ms']:.1f} | {r['median_ms']:.1f} | {r['max_ms']:.1f} "
            f"| {r['walked']:.0f} |"
            for name, r in rows
        ),
    ]
    print("\n".join(table))
    if args.write:
        DOC.write_text(_doc(args.processes, table))


def _doc(processes: int, table: list[str]) -> str:
    load = os.getloadavg()[0]
    return f"""# Benchmark: DRM GPU backend cost per interval

What `DrmSource.read()` (exporter/sources/gpu/drm/source.py) costs per interval on the synthetic
node
(tests/benchmarks/synthetic.py) with {processes:,} processes, 110 pods and 1 % of the container
processes replaced every interval. Each process has an fd directory in the kernel's layout (five
fds: /dev/null x3, a socket, a pipe; kernel threads none); {GPU_PROCESSES} processes also hold a
DRM client on an AMD RDNA3 or an Intel xe card (tests/support/drmhost.py), whose fdinfo moves every
interval. Median and max over {INTERVALS} intervals after the first read; CPU time of the reading
thread, on tmpfs.

Rerun: `python -m tests.benchmarks.drm_bench --write` (`--processes N` for another scale).

{chr(10).join(table)}

- The incremental scan (exporter/sources/gpu/drm/clients.py) lists the fds of the processes that
held
  a DRM fd at the last read, of new PIDs, and of a rotating 1/{RECHECK_EVERY} of the others; only
  fds that link to /dev/dri/ have their fdinfo read. The full walk is what a scan without that
  cache would cost. The first read walks everything either way.
- A process that was running before and opens a GPU later is found within {RECHECK_EVERY} reads
  (its engine time before that is not counted; a new process's is, from its start).
- Reading tmpfs is cheaper than the real /proc (the kernel builds each fd link and fdinfo on
  read), so these are lower bounds for the walk itself; the ratio between the rows carries over.
- Machine: {platform.system()} {platform.release()}, {os.cpu_count()} CPUs, Python
  {platform.python_version()}, load average {load:.1f} when measured (shared with other jobs).
"""


if __name__ == "__main__":
    main()
