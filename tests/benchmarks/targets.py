"""Issue 22's targets side by side in one run, on this machine made as busy as a node
(tests/benchmarks/livenode.py: real processes in 110 pods x 3 containers of real cgroup v2
directories, 8 fake H100s through the fake libnvidia-ml), with serve's default flags but the
activity source:

- steady CPU of `wattprobe serve` with eBPF and with /proc at 5,000 processes, both running at
  once, beside Debian's prometheus-node-exporter with its default collectors on the same /proc
  and /sys: one window in which nobody scrapes them (idle) and one in which each is scraped every
  15 s, as a Prometheus at its default interval does; the ratio to node_exporter's own CPU;
- the same exporters at 1,000 and 20,000 processes (the same pods): what an interval costs at
  20,000 / at 1,000 (the default path: eBPF, which `--activity-source auto` picks where the
  probes load);
- RSS (largest VmRSS sampled every interval) against the figures recorded before issue 22.

CPU is utime + stime of the whole process (every thread) from /proc/<pid>/stat over the window,
so the source reader threads, the HTTP server and the eBPF map reads are all counted; the probes'
in-kernel cost is charged to the tasks they run on (tests/benchmarks/ebpf_bench.py measures it).
The wattprobe counts intervals from its /metrics at both ends of a window: two requests more.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks.common import (
    Context,
    Figure,
    LoadSample,
    Section,
    machine_load,
    read_proc_cpu_seconds,
    read_proc_memory_mib,
)
from tests.benchmarks.livenode import live_node, processes_now
from tests.benchmarks.servers import fetch, node_exporter, wattprobe
from tests.benchmarks.synthetic import HostShape
from tests.support.running import parse_samples

COMMAND = "python -m tests.benchmarks --only targets"
INTERVAL_S = 5.0
SCRAPE_S = 15.0
WAKE_PERIOD_MS, WAKE_SPIN_US = 5000, 20  # as the live benchmark (serving.live)
SCALES = (1000, 20000)
# Largest VmRSS of the live side-by-side benchmark before issue 22 (docs/benchmarks.md run of
# 2026-11-21 09:33 UTC, commit 393aeed): the "unchanged or lower" target's baseline.
RSS_BEFORE_MIB = {"ebpf": 46.3, "procfs": 49.0}
RSS_NOISE = 1.05  # RSS of one run against another's: what counts as unchanged
MODES = {"ebpf": "eBPF", "procfs": "/proc"}


@dataclass(frozen=True)
class Target:
    name: str  # ebpf, procfs, node_exporter
    pid: int
    url: str  # its /metrics
    wattprobe: bool


@dataclass(frozen=True)
class Usage:
    name: str
    processes: int
    scraped: bool
    seconds: float
    cpu_s: float
    intervals: int  # wattprobe's completed intervals in the window (0 for node_exporter)
    rss_mib: float
    pods: int  # pods in wattprobe's exposition (0 for node_exporter)

    @property
    def core_ratio(self) -> float:
        return self.cpu_s / self.seconds

    @property
    def per_interval_s(self) -> float:
        return self.cpu_s / self.intervals if self.intervals else float("nan")


def _intervals(target: Target) -> tuple[int, int]:
    """(intervals, pods) from one /metrics of a wattprobe."""
    samples = parse_samples(fetch(target.url).decode())
    intervals = next(
        (int(v) for (n, _lbl), v in samples.items() if n == "wattprobe_intervals_total"), 0
    )
    pods = {
        dict(lbl)["pod_uid"] for (n, lbl) in samples if n == "wattprobe_pod_energy_joules_total"
    }
    return intervals, len(pods)


def window(targets: list[Target], seconds: float, scraped: bool) -> list[Usage]:
    """CPU and RSS of every target over the same window; scraped: each fetched (gzip) every
    SCRAPE_S from the start of the window."""
    stop = threading.Event()
    rss: dict[int, float] = {t.pid: 0.0 for t in targets}

    def sample_memory() -> None:
        while True:
            for t in targets:
                rss[t.pid] = max(rss[t.pid], read_proc_memory_mib(t.pid)["VmRSS"])
            if stop.wait(INTERVAL_S):
                return

    before = {t.pid: _intervals(t)[0] for t in targets if t.wattprobe}
    cpu0 = {t.pid: read_proc_cpu_seconds(t.pid) for t in targets}
    sampler = threading.Thread(target=sample_memory, name="rss", daemon=True)
    start = time.monotonic()
    sampler.start()
    next_scrape = start
    while (now := time.monotonic()) < start + seconds:
        if scraped and now >= next_scrape:
            for t in targets:
                fetch(t.url, gzip=True)
            next_scrape += SCRAPE_S
        time.sleep(min(0.5, max(0.0, start + seconds - now)))
    cpu1 = {t.pid: read_proc_cpu_seconds(t.pid) for t in targets}
    elapsed = time.monotonic() - start
    stop.set()
    sampler.join()
    count = processes_now()
    out = []
    for t in targets:
        intervals, pods = _intervals(t) if t.wattprobe else (0, 0)
        out.append(
            Usage(
                name=t.name,
                processes=count,
                scraped=scraped,
                seconds=elapsed,
                cpu_s=cpu1[t.pid] - cpu0[t.pid],
                intervals=intervals - before.get(t.pid, 0),
                rss_mib=rss[t.pid],
                pods=pods,
            )
        )
    return out


@contextmanager
def exporters(
    ctx: Context, processes: int, log_dir: Path, with_node_exporter: bool
) -> Iterator[list[Target]]:
    """The live node at `processes`, a wattprobe per activity source (and node_exporter) on it,
    each past two intervals of warm-up."""
    with ExitStack() as stack:
        node = stack.enter_context(
            live_node(
                HostShape(processes=processes),
                ctx.scratch,
                period_ms=WAKE_PERIOD_MS,
                spin_us=WAKE_SPIN_US,
            )
        )
        env = ctx.exporter_env_for(node.scenario)
        targets: list[Target] = []
        for source in MODES:
            args = ["--kube.pod-source", "none", "--activity-source", source]
            proc = stack.enter_context(wattprobe(args, log_dir, env=env))
            targets.append(Target(source, proc.proc.pid, proc.url + "/metrics", True))
        if with_node_exporter:
            ne = stack.enter_context(
                node_exporter(
                    Path("/sys"), Path("/proc"), log_dir, (), ready=b"node_cpu_seconds_total"
                )
            )
            targets.append(Target("node_exporter", ne.proc.pid, ne.url, False))
        deadline = time.monotonic() + 120
        for t in targets:
            if t.wattprobe:
                first = _intervals(t)[0]
                while _intervals(t)[0] < first + 2 and time.monotonic() < deadline:
                    time.sleep(0.5)
        yield targets


def run(ctx: Context, seconds: float, log_dir: Path) -> Section:
    with machine_load() as load:
        with exporters(ctx, HostShape.processes, log_dir, with_node_exporter=True) as targets:
            idle = window(targets, seconds, scraped=False)
            scraped = window(targets, seconds, scraped=True)
        scales: dict[int, list[Usage]] = {}
        for n in SCALES:
            with exporters(ctx, n, log_dir, with_node_exporter=False) as targets:
                scales[n] = window(targets, seconds, scraped=True)
    return _section(idle, scraped, scales, seconds, load[0])


def _pct(u: Usage) -> str:
    return f"{100 * u.core_ratio:.2f} %"


def _section(
    idle: list[Usage],
    scraped: list[Usage],
    scales: dict[int, list[Usage]],
    seconds: float,
    load: LoadSample,
) -> Section:
    section = Section("Issue 22's targets side by side", load=load)
    by = {u.name: u for u in scraped}
    quiet = {u.name: u for u in idle}
    ne = by["node_exporter"]
    node = f"{scraped[0].processes:,} processes / {HostShape.pods} pods / {HostShape.gpus} GPUs"
    for source, label in MODES.items():
        u = by[source]
        section.figures.append(
            Figure(
                f"steady CPU with {label}, live node of {node}, scraped every 15 s",
                f"{_pct(u)} of one core ({1e3 * u.per_interval_s:.0f} ms per interval over "
                f"{u.intervals} intervals; not scraped: {_pct(quiet[source])})",
                target="<= 0.5 %",
                met=u.core_ratio <= 0.005,
                rerun=COMMAND,
            )
        )
    section.figures.append(
        Figure(
            "CPU / node_exporter's on the same node (Debian's defaults), scraped every 15 s: "
            "eBPF, /proc",
            f"{by['ebpf'].cpu_s / ne.cpu_s:.1f}x, {by['procfs'].cpu_s / ne.cpu_s:.1f}x "
            f"(node_exporter {_pct(ne)} of a core scraped, {_pct(quiet['node_exporter'])} "
            f"not scraped)",
            rerun=COMMAND,
        )
    )
    low, high = SCALES
    for source, label in MODES.items():
        a = next(u for u in scales[low] if u.name == source)
        b = next(u for u in scales[high] if u.name == source)
        growth = b.per_interval_s / a.per_interval_s
        default = source == "ebpf"
        section.figures.append(
            Figure(
                f"CPU per interval at {high:,} / at {low:,} processes, {label}"
                + (" (the default path)" if default else ""),
                f"{growth:.2f}x ({1e3 * b.per_interval_s:.0f} ms at {b.processes:,} vs "
                f"{1e3 * a.per_interval_s:.0f} ms at {a.processes:,})",
                target="<= 1.2x" if default else "",
                met=growth <= 1.2 if default else None,
                rerun=COMMAND,
            )
        )
    for source, label in MODES.items():
        u = by[source]
        before = RSS_BEFORE_MIB[source]
        section.figures.append(
            Figure(
                f"RSS with {label} at {node}",
                f"{u.rss_mib:.1f} MiB (before issue 22: {before:.1f} MiB)",
                target="unchanged or lower (<= before + 5 %)",
                met=u.rss_mib <= RSS_NOISE * before,
                rerun=COMMAND,
            )
        )
    rows = [
        "| exporter | processes | scraped | CPU s | % of a core | ms per interval | RSS MiB "
        "| pods seen |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for u in [*idle, *scraped, *scales[low], *scales[high]]:
        name = MODES.get(u.name, u.name)
        per = f"{1e3 * u.per_interval_s:.0f}" if u.intervals else ""
        rows.append(
            f"| {name} | {u.processes:,} | {'yes' if u.scraped else 'no'} | {u.cpu_s:.2f} "
            f"| {100 * u.core_ratio:.2f} | {per} | {u.rss_mib:.1f} | {u.pods or ''} |"
        )
    section.details = "\n".join(rows)
    section.method = (
        f"Windows of {seconds:.0f} s each, after two intervals of warm-up, on this machine made "
        f"as busy as a node by tests/benchmarks/livenode.py: processes added up to the count "
        f"(a tenth outside pods) in {HostShape.pods} pods x {HostShape.containers} containers "
        f"of real cgroup v2 directories, each waking about every "
        f"{WAKE_PERIOD_MS / 1000:.0f} s for {WAKE_SPIN_US} µs; nine are GPU processes of the fake "
        "8 x H100 NVML. `wattprobe serve` with its default flags but `--activity-source` (eBPF "
        "and /proc at once) and no Kubernetes API; node_exporter is Debian's "
        "prometheus-node-exporter with its default collectors on the same /proc and /sys. CPU "
        "is utime + stime of each whole process over the window (every thread), in clock ticks "
        "of 10 ms: node_exporter's few scrapes are a few ticks. Processes are counted in /proc "
        "at the end of each window (other jobs' included)."
    )
    return section
