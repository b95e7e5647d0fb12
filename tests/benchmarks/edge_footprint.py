"""The edge pod's footprint on a small node: the wattprobe agent and the shipped vmagent
forwarder beside it, their RSS and CPU over a steady window, and the eBPF compile child's
start-up peak.

    python -m tests.benchmarks --only edge-footprint --no-write
    python -m tests.benchmarks.edge_footprint --seconds 60

The small node is a synthetic host (tests/benchmarks/synthetic.py) of 200 processes in 20 pods
of 2 containers, on 4 CPUs, RAPL and hwmon from the fixture tree, no GPU: this machine's own
/proc is not small while other jobs run thousands of processes on it. The agent runs as the
edge DaemonSet runs it (default interval, /proc activity there; pods from the tree's cgroups),
the forwarder is Debian's vmagent 1.79 with overlays/kubeedge's flags and scrape.yml (scraping
it every second, tests/support/edgeforwarder.py) remote-writing to a local Prometheus
receiver. The eBPF child's peak is measured on this machine's /proc with
`wattprobe serve --activity-source ebpf`: its children are polled while the probes compile.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks import report
from tests.benchmarks.common import (
    Context,
    Figure,
    Section,
    machine_load,
    read_proc_cpu_seconds,
    read_proc_memory_mib,
    serve_args,
)
from tests.benchmarks.servers import Advancer, wattprobe
from tests.benchmarks.synthetic import HostShape
from tests.support.edgeforwarder import shipped_forwarder, start_forwarder, start_receiver
from tests.support.fleet import own_metrics
from tests.support.realparts import require_root
from tests.support.running import start_exporter

log = logging.getLogger("tests.benchmarks.edge_footprint")

SMALL_NODE = HostShape(processes=200, pods=20, containers=2, gpus=0, ncpu=4)
GOAL_MIB = 100.0
COMMAND = "python -m tests.benchmarks --only edge-footprint"


@dataclass(frozen=True)
class Usage:
    rss_mean: float  # MiB
    rss_max: float
    hwm: float  # VmHWM at the end: the peak of the process's life
    cpu: float  # of one core, over the window


def _sample(pids: dict[str, int], seconds: float) -> dict[str, Usage]:
    rss: dict[str, list[float]] = {k: [] for k in pids}
    cpu0 = {k: read_proc_cpu_seconds(p) for k, p in pids.items()}
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        for k, p in pids.items():
            rss[k].append(read_proc_memory_mib(p)["VmRSS"])
        time.sleep(1.0)
    elapsed = time.monotonic() - start
    out = {}
    for k, p in pids.items():
        mem = read_proc_memory_mib(p)
        cpu = (read_proc_cpu_seconds(p) - cpu0[k]) / elapsed
        out[k] = Usage(statistics.mean(rss[k]), max(rss[k]), mem["VmHWM"], cpu)
    return out


def steady(seconds: float, log_dir: Path) -> tuple[dict[str, Usage], float]:
    """The pod on the small node: (usage of agent and forwarder, forwarder bytes/s sent)."""
    with Context.create() as ctx:
        host = ctx.host(SMALL_NODE)
        args = [*serve_args(host), "--no-collector.nvml"]
        with Advancer(host, 1.0), wattprobe(args, log_dir) as agent:
            receiver = start_receiver(log_dir / "receiver")
            forwarder = None
            try:
                forwarder = start_forwarder(
                    shipped_forwarder(),
                    log_dir / "forwarder",
                    agent_port=agent.port,
                    receiver_url=receiver.write_url,
                    node="edge-small",
                )
                time.sleep(15.0)  # both past start-up, the forwarder's first sends done
                sent0, t0 = own_metrics(forwarder.daemon), time.monotonic()
                pids = {"wattprobe": agent.proc.pid, "forwarder": forwarder.daemon.proc.pid}
                usage = _sample(pids, seconds)
                sent1, t1 = own_metrics(forwarder.daemon), time.monotonic()
            finally:
                if forwarder is not None:
                    forwarder.stop()
                receiver.stop()
    key = "vmagent_remotewrite_bytes_sent_total"
    return usage, (sent1[key] - sent0[key]) / (t1 - t0)


def _children(pid: int) -> list[int]:
    """Children of every thread of a process (a thread's children are listed under it)."""
    out = []
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []
    for task in tasks:
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


class DescendantPeaks(threading.Thread):
    """Polls this process's descendants every 10 ms, from before the agent starts (its compile
    child runs while the agent builds its sources, before it serves), and keeps each one's
    largest VmHWM."""

    def __init__(self) -> None:
        super().__init__(name="descendant-peaks", daemon=True)
        self.root = int(Path("/proc/self").resolve().name)
        self.before = set(self._descendants())
        self.peaks: dict[int, float] = {}
        self._done = threading.Event()

    def _descendants(self) -> list[int]:
        found, todo = [], [self.root]
        while todo:
            for child in _children(todo.pop()):
                found.append(child)
                todo.append(child)
        return found

    def run(self) -> None:
        while not self._done.wait(0.01):
            for pid in self._descendants():
                if pid in self.before:
                    continue
                try:
                    hwm = read_proc_memory_mib(pid)["VmHWM"]
                except (OSError, KeyError):
                    continue
                self.peaks[pid] = max(self.peaks.get(pid, 0.0), hwm)

    def stop(self) -> None:
        self._done.set()
        self.join(timeout=5)


@dataclass(frozen=True)
class EbpfStart:
    child_peak: float
    children: int
    agent_hwm: float
    agent_rss: float  # after three intervals
    processes: int  # on this machine while measuring


def ebpf_start(log_dir: Path) -> EbpfStart:
    """`wattprobe serve --activity-source ebpf` on this machine: its compile child's peak."""
    require_root()

    args = ["--activity-source", "ebpf", "--kube.pod-source", "none", "--no-collector.nvml"]
    poller = DescendantPeaks()
    poller.start()
    try:
        proc = start_exporter(args, log_dir=log_dir, wait="/healthz")
        try:
            for _ in range(3):
                proc.wait_next_interval(timeout=180)
            mem = read_proc_memory_mib(proc.proc.pid)
        finally:
            proc.stop()
    finally:
        poller.stop()
    others = {pid: peak for pid, peak in poller.peaks.items() if pid != proc.proc.pid}
    processes = sum(1 for p in Path("/proc").iterdir() if p.name.isdigit())
    peak = max(others.values(), default=0.0)
    return EbpfStart(peak, len(others), mem["VmHWM"], mem["VmRSS"], processes)


def run(seconds: float = 60.0) -> Section:
    with machine_load() as load, tempfile.TemporaryDirectory() as tmp:
        usage, bytes_per_s = steady(seconds, Path(tmp))
        start = ebpf_start(Path(tmp))
    agent, forwarder = usage["wattprobe"], usage["forwarder"]
    together = agent.rss_max + forwarder.rss_max
    figures = [
        Figure(
            "wattprobe agent on a 200-process node (/proc activity): RSS mean / max / peak, CPU",
            f"{agent.rss_mean:.1f} / {agent.rss_max:.1f} / {agent.hwm:.1f} MiB, "
            f"{100 * agent.cpu:.1f} % of a core",
            rerun=COMMAND,
        ),
        Figure(
            "forwarder (vmagent 1.79 as shipped, scrape 1 s): RSS mean / max / peak, CPU",
            f"{forwarder.rss_mean:.1f} / {forwarder.rss_max:.1f} / {forwarder.hwm:.1f} MiB, "
            f"{100 * forwarder.cpu:.1f} % of a core; sends {bytes_per_s * 8 / 1e3:.0f} kbit/s",
            rerun=COMMAND,
        ),
        Figure(
            "edge pod steady RSS, agent + forwarder (max of each)",
            f"{together:.1f} MiB",
            f"< {GOAL_MIB:.0f} MiB",
            together < GOAL_MIB,
            COMMAND,
        ),
        Figure(
            "eBPF compile child's peak at start-up (this machine)",
            f"{start.child_peak:.1f} MiB (VmHWM; {start.children} short-lived process seen); "
            f"agent peak "
            f"{start.agent_hwm:.1f} MiB, {start.agent_rss:.1f} MiB after 3 intervals with "
            f"{start.processes:,} processes",
            rerun=COMMAND,
        ),
    ]
    method = (__doc__ or "").split("\n\n", 2)[2].strip() + f" Window: {seconds:.0f} s, RSS "
    method += "sampled every second (VmRSS), CPU from utime + stime over the window."
    return Section("Edge pod footprint on a small node", figures, method, "", load[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.benchmarks.edge_footprint")
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s: %(message)s")
    section = run(args.seconds)
    print(report.table([section]))
    print("\n" + "\n".join(report.section_lines(section)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
