"""Edge forwarding: how late a sample is queryable in the cloud, and what the WAL costs.

`wattprobe serve --interval 1s` on a small synthetic edge node, the forwarder exactly as
overlays/kubeedge ships it (tests/support/edgeforwarder.py: Debian's prometheus in agent mode, only
targets, URL and paths rewritten to this machine), and a Prometheus remote-write receiver, all on
loopback. Every 50 ms the receiver is asked for the samples of
`wattprobe_last_interval_timestamp_seconds` of the last 10 s; the first time a value shows up,
its latency is the wall-clock time of that answer minus the value (the end of that interval, by
the same clock). The poll adds up to 50 ms and the query's own time, so the figures are upper
bounds. The WAL's growth over the window per appended sample, and the remote-write bytes per
sent sample, size the WAL and the link (docs/install.md, "Sizing the WAL").

    python -m tests.benchmarks --only edge [--edge-seconds 60]
"""

from __future__ import annotations

import logging
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks.common import (
    Context,
    Figure,
    LoadSample,
    Section,
    machine_load,
    percentile,
    read_proc_cpu_seconds,
    read_proc_memory_mib,
    serve_args,
)
from tests.benchmarks.servers import Advancer, wattprobe
from tests.benchmarks.synthetic import HostShape
from tests.support.edgeforwarder import (
    Forwarder,
    Receiver,
    shipped_forwarder,
    start_forwarder,
    start_receiver,
    wait_until,
)

log = logging.getLogger(__name__)

COMMAND = "python -m tests.benchmarks --only edge"
NODE = "edge-bench"
TARGET_S = 3.0  # the seed scenario's collection latency
# the edge DaemonSet's --interval (serve's default), scraped every 1 s by the shipped forwarder
AGENT_INTERVAL = "5s"
POLL_S = 0.05
# a small edge box: issue 16's "small node (200 processes)", a few pods, one GPU
EDGE_SHAPE = HostShape(processes=200, pods=20, containers=2, gpus=1, ncpu=8)
STAMP = f'wattprobe_last_interval_timestamp_seconds{{node="{NODE}"}}'


@dataclass(frozen=True)
class Observed:
    latencies: list[float]  # seconds, one per interval seen: interval end to queryable
    scrape_waits: list[float]  # of which: interval end to the forwarder's scrape
    forwarding: list[float]  # and: the scrape to queryable at the receiver
    wal_bytes: int  # growth of the WAL directory over the window
    appended: float  # samples appended to the WAL over the window
    sent_bytes: float  # remote-write request bytes over the window
    sent_samples: float
    series: float  # active series of the forwarder
    cpu_s: float  # the forwarder's CPU time over the window
    rss_mib: float  # its VmRSS at the end
    peak_mib: float  # its VmHWM


def _wal_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _counter(text: str, name: str) -> float:
    """The sum of a family's samples in an exposition (one per queue at most here)."""
    pattern = re.compile(rf"^{name}(?:{{[^}}]*}})? (\S+)$", re.M)
    return sum(float(v) for v in pattern.findall(text))


@dataclass(frozen=True)
class Names:
    """The forwarder's own counters for what it took in, sent, and holds."""

    appended: str
    sent_bytes: str
    sent_samples: str
    series: str


VMAGENT_NAMES = Names(
    "vmagent_remotewrite_rows_pushed_after_relabel_total",
    "vmagent_remotewrite_bytes_sent_total",
    "vmagent_remotewrite_block_size_rows_sum",
    "",  # vmagent has no series gauge: samples per scrape (both of its jobs) below
)
PROMETHEUS_NAMES = Names(
    "prometheus_agent_samples_appended_total",
    "prometheus_remote_storage_bytes_total",
    "prometheus_remote_storage_samples_total",
    "prometheus_agent_active_series",
)


def _observe(receiver: Receiver, forwarder: Forwarder, seconds: float, names: Names) -> Observed:
    before = forwarder.metrics()
    wal_before = _wal_size(forwarder.wal)
    pid = forwarder.daemon.proc.pid
    cpu_before = read_proc_cpu_seconds(pid)
    # what is there before polling starts arrived at unknown times: not measured
    seen = {float(v) for s in receiver.api.query(f"{STAMP}[10s]") for _t, v in s["values"]}
    timings: list[tuple[float, float, float]] = []  # (interval end, scrape, answered)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = receiver.api.query(f"{STAMP}[10s]")
        answered = time.time()
        for series in got:
            for scraped, value in series["values"]:
                end = float(value)
                if end not in seen:
                    seen.add(end)
                    timings.append((end, float(scraped), answered))
        time.sleep(POLL_S)
    after = forwarder.metrics()
    cpu_s = read_proc_cpu_seconds(pid) - cpu_before
    memory = read_proc_memory_mib(pid)

    def delta(name: str) -> float:
        return _counter(after, name) - _counter(before, name)

    return Observed(
        latencies=[answered - end for end, _s, answered in timings],
        scrape_waits=[scraped - end for end, scraped, _a in timings],
        forwarding=[answered - scraped for _e, scraped, answered in timings],
        wal_bytes=_wal_size(forwarder.wal) - wal_before,
        appended=delta(names.appended),
        sent_bytes=delta(names.sent_bytes),
        sent_samples=delta(names.sent_samples),
        series=_counter(after, names.series)
        if names.series
        else delta("vm_promscrape_scraped_samples_sum")
        / max(1.0, delta("vm_promscrape_scraped_samples_count")),
        cpu_s=cpu_s,
        rss_mib=memory["VmRSS"],
        peak_mib=memory["VmHWM"],
    )


def run(ctx: Context, seconds: float, log_dir: Path) -> Section:
    host = ctx.host(EDGE_SHAPE)
    shipped = shipped_forwarder()
    with (
        Advancer(host, 1.0),
        wattprobe(
            [*serve_args(host), "--interval", AGENT_INTERVAL], log_dir, env=ctx.exporter_env(host)
        ) as agent,
    ):
        receiver = start_receiver(log_dir / "edge-receiver")
        forwarder: Forwarder | None = None
        try:
            forwarder = start_forwarder(
                shipped,
                log_dir / "edge-forwarder",
                agent_port=agent.port,
                receiver_url=receiver.write_url,
                node=NODE,
            )
            wait_until(lambda: receiver.api.query(STAMP), 60, "the first forwarded sample")
            time.sleep(5)  # past the forwarder's WAL replay at start-up
            with machine_load() as load:
                names = VMAGENT_NAMES if shipped.is_vmagent else PROMETHEUS_NAMES
                observed = _observe(receiver, forwarder, seconds, names)
        finally:
            if forwarder is not None:
                forwarder.stop()
            receiver.stop()
    return _section(observed, shipped.config, load[0], seconds)


def _section(o: Observed, config: dict[str, object], load: LoadSample, seconds: float) -> Section:
    lat = o.latencies
    p50, p90, p99 = (percentile(lat, q) for q in (50, 90, 99))
    worst = max(lat) if lat else float("nan")
    per_sample_wal = o.wal_bytes / o.appended if o.appended else float("nan")
    per_sample_sent = o.sent_bytes / o.sent_samples if o.sent_samples else float("nan")
    samples_per_s = o.appended / seconds
    wal_mib_per_hour = per_sample_wal * samples_per_s * 3600 / 2**20
    figures = [
        Figure(
            f"edge: interval end to queryable at the receiver, --interval {AGENT_INTERVAL}, "
            "shipped forwarder: "
            "p50 / p90 / p99 / max",
            f"{p50:.2f} / {p90:.2f} / {p99:.2f} / {worst:.2f} s ({len(lat)} intervals)",
            f"max < {TARGET_S:.0f} s",
            bool(lat) and worst < TARGET_S,
            COMMAND,
        ),
        Figure(
            "edge: of which interval end to the forwarder's scrape / the scrape to queryable: "
            "p50 / p99 / max",
            f"{_q(o.scrape_waits)} / {_q(o.forwarding)} s",
            rerun=COMMAND,
        ),
        Figure(
            f"edge: series and samples/s forwarded, small node ({EDGE_SHAPE.processes} "
            f"processes, {EDGE_SHAPE.pods} pods, {EDGE_SHAPE.gpus} GPU), 1 s scrape",
            f"{o.series:.0f} series, {samples_per_s:.0f} samples/s",
            rerun=COMMAND,
        ),
        Figure(
            "edge: the forwarder's CPU (share of one core) and memory (VmRSS, peak VmHWM) "
            "on that node",
            f"{100 * o.cpu_s / seconds:.1f} %; {o.rss_mib:.0f} MiB, peak {o.peak_mib:.0f} MiB",
            rerun=COMMAND,
        ),
        Figure(
            "edge: forwarder queue/WAL growth per sample; per hour of outage on that node "
            "(vmagent queues nothing while the receiver takes everything: see the queue section)",
            f"{per_sample_wal:.2f} B; {wal_mib_per_hour:.1f} MiB/h",
            rerun=COMMAND,
        ),
        Figure(
            "edge: remote-write bytes per sample (snappy-compressed protobuf, as sent)",
            f"{per_sample_sent:.2f} B ({per_sample_sent * samples_per_s / 1024:.1f} KiB/s)",
            rerun=COMMAND,
        ),
    ]
    global_ = config.get("global", {})
    method = (
        f"`wattprobe serve --interval {AGENT_INTERVAL}` on a synthetic edge node "
        f"({EDGE_SHAPE.processes} processes, {EDGE_SHAPE.pods} pods x "
        f"{EDGE_SHAPE.containers} containers, {EDGE_SHAPE.gpus} fake GPU), the forwarder as "
        f"overlays/kubeedge ships it (Debian's vmagent 1.79; scrape_interval "
        f"{global_.get('scrape_interval') if isinstance(global_, dict) else '?'}, "
        f"-remoteWrite.flushInterval 1s) and a Prometheus remote-write receiver, "
        "on loopback, for "
        f"{seconds:.0f} s. Latency: the receiver is polled every {POLL_S * 1000:.0f} ms for the "
        "last 10 s of `wattprobe_last_interval_timestamp_seconds`; a value's latency is the "
        "time of the first answer holding it minus the value (the interval's end), so it "
        "includes up to one poll period and the query; it splits into the wait for the "
        "forwarder's next scrape (the sample's timestamp at the receiver) and the forwarding "
        "after it (queue, request, receiver). Queue: growth of the forwarder's queue "
        "directory over the window per sample taken in. The node's link is loopback: on a "
        "real link add its round trip."
    )
    return Section("Edge forwarding latency (overlays/kubeedge)", figures, method, load=load)


def _deadline(config: dict[str, object]) -> str:
    remote = config.get("remote_write")
    if isinstance(remote, list) and remote and isinstance(remote[0], dict):
        return str(remote[0].get("queue_config", {}).get("batch_send_deadline", "?"))
    return "?"


def _q(values: list[float]) -> str:
    if not values:
        return "none"
    return f"{percentile(values, 50):.2f}, {percentile(values, 99):.2f}, {max(values):.2f}"


def main() -> None:  # pragma: no cover - a manual entry point
    logging.basicConfig(level=logging.INFO)
    with Context.create() as ctx:
        section = run(ctx, float(os.environ.get("EDGE_SECONDS", "60")), ctx.scratch)
    for f in section.figures:
        print(f"{f.measure}: {f.value} {f.verdict}")


if __name__ == "__main__":  # pragma: no cover
    main()
