"""Container churn and soak against a running `wattprobe serve` (docs/benchmarks-soak.md).

A writable copy of the fixture host, whose /proc gains and loses container processes: each
container start/stop cycle is a process in a new kubepods cgroup (new pod UID, new container ID)
that runs for `lifetime_s` and is removed. A ticker keeps RAPL, /proc/stat and the live
processes' CPU time moving; scraper threads GET /metrics back to back the whole time and check
every answer (status 200, parsable, no counter lower than in that scraper's previous scrape).
The exporter runs with the process collector on and a short --workload.retention, so every
cycle makes and ends container, pod and process series.

Measured: cycles, scrapes, scrape errors, counters that went back, the workload series count
before the churn, at its peak and after the last retention; the exporter's RSS once warmed up
(`warm_fraction` of the churn behind it), at the end and its peak; its CPU time.

Used by tests/system/test_soak.py (a short run) and tests/benchmarks/soak.py (10 minutes by
default).
"""

from __future__ import annotations

import contextlib
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.fixturehost import FixtureHost
from tests.support.running import (
    CONTAINER_SERIES,
    ExporterProcess,
    Samples,
    parse_samples,
    start_exporter,
)

WORKLOAD_PREFIXES = ("wattprobe_container_", "wattprobe_pod_", "wattprobe_process_")
CLOCK_TICKS = 100
FIRST_PID = 400_000


@dataclass(frozen=True)
class SoakOptions:
    cycles: int = 10_000
    duration_s: float = 600.0  # the churn is spread over this
    lifetime_s: float = 2.0  # how long each container runs
    interval_s: float = 0.25
    retention_s: float = 2.0
    scrapers: int = 2
    scrape_pause_s: float = 0.05  # between one scraper's scrapes (2 x ~20/s, not a busy loop)
    warm_fraction: float = 0.1  # RSS growth is measured from when this much churn is done


@dataclass
class SoakFigures:
    cycles: int = 0
    containers_seen: int = 0
    scrapes: int = 0
    scrape_errors: int = 0
    counters_back: int = 0
    baseline_series: int = 0
    peak_series: int = 0
    end_series: int = 0
    start_rss_kib: int = 0
    warm_rss_kib: int = 0
    peak_rss_kib: int = 0
    end_rss_kib: int = 0
    churn_s: float = 0.0
    exporter_cpu_s: float = 0.0
    errors: list[str] = field(default_factory=list)

    @property
    def rss_growth(self) -> float:
        return self.end_rss_kib / self.warm_rss_kib - 1 if self.warm_rss_kib else float("nan")

    def table(self) -> str:
        rows = [
            ("container start/stop cycles", f"{self.cycles:,}"),
            ("containers seen on /metrics", f"{self.containers_seen:,}"),
            ("churn duration", f"{self.churn_s:.0f} s"),
            ("scrapes", f"{self.scrapes:,}"),
            ("scrape errors", f"{self.scrape_errors}"),
            ("counters that went back", f"{self.counters_back}"),
            (
                "workload series: baseline / peak / after retention",
                f"{self.baseline_series} / {self.peak_series} / {self.end_series}",
            ),
            (
                "RSS: start / warm / peak / end (MiB)",
                " / ".join(
                    f"{v / 1024:.1f}"
                    for v in (
                        self.start_rss_kib,
                        self.warm_rss_kib,
                        self.peak_rss_kib,
                        self.end_rss_kib,
                    )
                ),
            ),
            ("RSS growth, warm to end", f"{self.rss_growth * 100:+.1f} %"),
            (
                "exporter CPU",
                f"{self.exporter_cpu_s:.1f} s "
                f"({self.exporter_cpu_s / max(self.churn_s, 1e-9) * 100:.1f} % of a core)",
            ),
        ]
        return "\n".join(["| figure | value |", "|---|---:|"] + [f"| {a} | {b} |" for a, b in rows])


def workload_series(samples: Samples) -> int:
    return sum(1 for name, _ in samples if name.startswith(WORKLOAD_PREFIXES))


def container_ids(samples: Samples) -> set[str]:
    return {
        dict(labels).get("container_id", "")
        for name, labels in samples
        if name == "wattprobe_container_cpu_seconds_total"
    }


def proc_status_kib(pid: int, field_name: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return int(line.split()[1])
    raise AssertionError(f"no {field_name}")


def cpu_seconds(pid: int) -> float:
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def pod_uid(n: int) -> str:
    return f"{n:08x}-5a5a-4000-8000-{n:012x}"


def container_id(n: int) -> str:
    return f"5a{n:062x}"


def cgroup(n: int) -> str:
    pod = pod_uid(n).replace("-", "_")
    return (
        "0::/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{pod}.slice/cri-containerd-{container_id(n)}.scope\n"
    )


class Node:
    """The fixture host's moving parts: RAPL, /proc/stat and the live churn processes."""

    def __init__(self, host: FixtureHost) -> None:
        self.host = host
        self.live: dict[int, float] = {}  # pid -> when it is due to stop
        self.lock = threading.Lock()

    def start(self, n: int, until: float) -> None:
        pid = FIRST_PID + n
        self.host.add_process(pid, "work", cgroup(n), start=1_000_000 + n, utime=1)
        with self.lock:
            self.live[pid] = until

    def stop_due(self, now: float) -> int:
        # under the lock: the ticker must not be rewriting a stat file that is being removed
        with self.lock:
            due = [pid for pid, until in self.live.items() if until <= now]
            for pid in due:
                del self.live[pid]
                self.host.remove_process(pid)
        return len(due)

    def stop_all(self) -> None:
        self.stop_due(float("inf"))

    def tick(self) -> None:
        self.host.add_energy_j("intel-rapl:0", 2.0)
        self.host.add_energy_j("intel-rapl:1", 1.0)
        self.host.add_cpu_ticks(busy=10, idle=10)
        with self.lock:
            for pid in self.live:
                self.host.add_process_ticks(pid, 1)


class Scraper(threading.Thread):
    """GETs /metrics back to back; counts answers, errors and counters that went back."""

    def __init__(self, exporter: ExporterProcess, stop: threading.Event, pause_s: float) -> None:
        super().__init__(daemon=True)
        self.exporter = exporter
        self.halt = stop
        self.pause_s = pause_s
        self.scrapes = 0
        self.errors: list[str] = []
        self.counters_back = 0
        self.seen: set[str] = set()
        self.peak_series = 0
        self._last: Samples = {}

    def run(self) -> None:
        url = self.exporter.url + "/metrics"
        while not self.halt.wait(self.pause_s):
            try:
                with urllib.request.urlopen(url, timeout=10) as resp:
                    body = resp.read().decode()
                    status = resp.status
            except (OSError, urllib.error.HTTPError) as exc:
                self.errors.append(repr(exc))
                continue
            self.scrapes += 1
            if status != 200:
                self.errors.append(f"HTTP {status}")
                continue
            try:
                samples = parse_samples(body)
            except ValueError as exc:
                self.errors.append(f"unparsable: {exc}")
                continue
            for key, value in samples.items():
                old = self._last.get(key)
                if key[0].endswith("_total") and old is not None and value < old - 1e-6:
                    self.counters_back += 1
                    self.errors.append(f"{key} went back: {old} -> {value}")
            self._last = samples
            self.seen |= container_ids(samples)
            self.peak_series = max(self.peak_series, workload_series(samples))


@contextlib.contextmanager
def running_exporter(
    host: FixtureHost, options: SoakOptions, log_dir: Path
) -> Iterator[ExporterProcess]:
    exporter = start_exporter(
        [
            *host.args(),
            "--interval",
            f"{options.interval_s}s",
            "--workload.retention",
            f"{options.retention_s}s",
            "--collector.process",
            "--kube.pod-source",
            "none",
        ],
        log_dir=log_dir,
        # containers come and go as per-container series: the soak counts them there
        test_args=CONTAINER_SERIES,
    )
    try:
        yield exporter
    finally:
        exporter.stop()


def settled_series(exporter: ExporterProcess, timeout_s: float = 60.0) -> int:
    """The workload series count once it stopped changing."""
    counts: list[int] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        counts.append(workload_series(exporter.samples()))
        if len(counts) >= 5 and len(set(counts[-5:])) == 1:
            return counts[-1]
        time.sleep(0.2)
    raise AssertionError(f"series count never settled: {counts}")


def soak(host: FixtureHost, options: SoakOptions, log_dir: Path) -> SoakFigures:
    figures = SoakFigures()
    node = Node(host)
    stop = threading.Event()
    with running_exporter(host, options, log_dir) as exporter:
        pid = exporter.proc.pid

        def tick() -> None:
            while not stop.wait(0.05):
                node.tick()

        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        exporter.wait_next_interval()
        figures.baseline_series = settled_series(exporter)
        figures.start_rss_kib = proc_status_kib(pid, "VmRSS")
        cpu_before = cpu_seconds(pid)
        scrapers = [
            Scraper(exporter, stop, options.scrape_pause_s) for _ in range(options.scrapers)
        ]
        for s in scrapers:
            s.start()
        started = time.monotonic()
        per_cycle_s = options.duration_s / options.cycles
        warm_at = int(options.cycles * options.warm_fraction)
        peak_rss = 0
        next_rss = started
        for n in range(options.cycles):
            due = started + n * per_cycle_s
            while (now := time.monotonic()) < due:
                node.stop_due(now)
                time.sleep(min(0.02, due - now))
            node.start(n, now + options.lifetime_s)
            node.stop_due(now)
            if n + 1 == warm_at:
                figures.warm_rss_kib = proc_status_kib(pid, "VmRSS")
            if now >= next_rss:
                peak_rss = max(peak_rss, proc_status_kib(pid, "VmRSS"))
                next_rss = now + 1.0
            assert exporter.proc.poll() is None, exporter.log()
        while node.live:
            node.stop_due(time.monotonic())
            time.sleep(0.05)
        figures.churn_s = time.monotonic() - started
        figures.cycles = options.cycles
        # every container's series go after the retention: back to the baseline count
        deadline = time.monotonic() + options.retention_s + 30
        while (count := workload_series(exporter.samples())) != figures.baseline_series:
            assert time.monotonic() < deadline, f"{count} workload series, not the baseline"
            time.sleep(0.2)
        time.sleep(options.retention_s + 4 * options.interval_s)  # some intervals with none
        stop.set()
        for s in scrapers:
            s.join(30)
        figures.end_series = workload_series(exporter.samples())
        figures.end_rss_kib = proc_status_kib(pid, "VmRSS")
        figures.peak_rss_kib = max(peak_rss, figures.end_rss_kib, figures.warm_rss_kib)
        figures.exporter_cpu_s = cpu_seconds(pid) - cpu_before
        figures.scrapes = sum(s.scrapes for s in scrapers)
        figures.peak_series = max(s.peak_series for s in scrapers)
        figures.scrape_errors = sum(len(s.errors) - s.counters_back for s in scrapers)
        figures.counters_back = sum(s.counters_back for s in scrapers)
        figures.errors = [e for s in scrapers for e in s.errors][:20]
        seen = set().union(*(s.seen for s in scrapers))
        figures.containers_seen = sum(1 for n in range(options.cycles) if container_id(n) in seen)
        ticker.join(5)
    node.stop_all()
    return figures
