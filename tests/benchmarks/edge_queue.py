"""The shipped vmagent forwarder's on-disk queue: how fast it grows, what happens past its
bound, and a 10-minute receiver outage with restarts (the issue's case; the suite runs 60 s).

- growth: vmagent as overlays/kubeedge ships it scraping one synthetic 110-pod node every
  second (tests/support/fleet.py NodeServer: a CPU node, then a node with 8 GPUs) with its
  receiver down; the queue's bytes (vm_persistentqueue_bytes_pending) over the window, and
  the hours the shipped -remoteWrite.maxDiskUsagePerURL holds at that rate.
- past the bound: the same with a 1 MB bound: what vm_persistentqueue_bytes_dropped_total says
  and which part of the outage reaches the receiver when it returns.
- soak: tests/support/edgedelivery.py's checks (every interval wattprobe counted arrives) through a
  600 s receiver outage with a SIGTERM and a SIGKILL of the forwarder in it.

    python -m tests.benchmarks --only edge-queue edge-soak
"""

from __future__ import annotations

import re
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks.common import Figure, Section, read_proc_memory_mib
from tests.support.edgedelivery import Stack, check_delivery, received_points, scrape_seen, settle
from tests.support.edgeforwarder import (
    Forwarder,
    flag_value,
    parse_size,
    raw_samples,
    shipped_forwarder,
    start_forwarder,
    start_receiver,
    wait_until,
)
from tests.support.fixturehost import FixtureHost
from tests.support.fleet import Fleet, NodeServer
from tests.support.running import free_port, stop_process

QUEUE_COMMAND = "python -m tests.benchmarks --only edge-queue"
SOAK_COMMAND = "python -m tests.benchmarks --only edge-soak"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TINY_BOUND = "1MB"


def _metric(forwarder: Forwarder, name: str) -> float:
    with urllib.request.urlopen(forwarder.daemon.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    pattern = re.compile(rf"^{name}(?:{{[^}}]*}})? (\S+)$", re.M)
    return sum(float(v) for v in pattern.findall(text))


@dataclass(frozen=True)
class Growth:
    node: str
    series: int
    bytes_per_s: float
    rss_mib: float


def _growth(workdir: Path, fleet: Fleet, label: str, seconds: float) -> Growth:
    shipped = shipped_forwarder()
    server = NodeServer(fleet.series)
    dead = f"http://127.0.0.1:{free_port()}/api/v1/write"  # nothing listens: the receiver is down
    forwarder = start_forwarder(
        shipped, workdir / label, agent_port=server.port, receiver_url=dead, node=fleet.names[0]
    )
    try:
        time.sleep(10)  # past the first blocks
        b0, t0 = _metric(forwarder, "vm_persistentqueue_bytes_pending"), time.monotonic()
        time.sleep(seconds)
        b1, t1 = _metric(forwarder, "vm_persistentqueue_bytes_pending"), time.monotonic()
        rss = read_proc_memory_mib(forwarder.daemon.proc.pid)["VmRSS"]
    finally:
        forwarder.stop()
        server.stop()
    return Growth(label, len(fleet.series), (b1 - b0) / (t1 - t0), rss)


@dataclass(frozen=True)
class PastBound:
    outage_s: float
    dropped_bytes: float
    dropped_blocks: float
    pending_max: float
    arrived_from_s: float  # the first sample of the outage that arrived, seconds into it
    newest_kept: bool


def _past_bound(workdir: Path, outage_s: float) -> PastBound:
    fleet = Fleet(1, gpu_every=0)
    shipped = shipped_forwarder()
    server = NodeServer(fleet.series)
    receiver = start_receiver(workdir / "receiver")
    rport = receiver.daemon.port
    forwarder = start_forwarder(
        shipped,
        workdir / "tiny",
        agent_port=server.port,
        receiver_url=receiver.write_url,
        node=fleet.names[0],
        extra_args=(f"-remoteWrite.maxDiskUsagePerURL={TINY_BOUND}",),  # the last one wins
    )
    selector = f'up{{job="wattprobe",node="{fleet.names[0]}"}}'
    try:
        wait_until(lambda: receiver.api.query(selector), 60, "first sample")
        receiver.stop()
        cut = time.time()
        pending_max = 0.0
        while time.time() < cut + outage_s:
            pending_max = max(pending_max, _metric(forwarder, "vm_persistentqueue_bytes_pending"))
            time.sleep(2)
        back = time.time()
        receiver = start_receiver(workdir / "receiver", port=rport)
        wait_until(
            lambda: _metric(forwarder, "vm_persistentqueue_bytes_pending") == 0, 180, "replay"
        )
        time.sleep(3)
        (points,) = raw_samples(receiver.api, selector, int(time.time() - cut) + 60).values()
        inside = [t for t, _ in points if cut + 1 < t < back]
        return PastBound(
            outage_s,
            _metric(forwarder, "vm_persistentqueue_bytes_dropped_total"),
            _metric(forwarder, "vm_persistentqueue_blocks_dropped_total"),
            pending_max,
            (min(inside) - cut) if inside else float("nan"),
            any(t > back - 5 for t in inside),
        )
    finally:
        forwarder.stop()
        receiver.stop()
        server.stop()


def run_queue(workdir: Path, seconds: float) -> Section:
    shipped = shipped_forwarder()
    bound = flag_value(shipped.args, "-remoteWrite.maxDiskUsagePerURL")
    growths = [
        _growth(workdir, Fleet(1, gpu_every=0), "cpu-110-pods", seconds),
        _growth(workdir, Fleet(1, gpu_every=1), "gpu8-110-pods", seconds),
    ]
    figures = [
        Figure(
            f"edge queue: growth with the receiver down, 110-pod node ({g.node}, {g.series} "
            f"series, 1 s scrape); hours the shipped bound ({bound}) holds",
            f"{g.bytes_per_s / 1024:.1f} KiB/s ({g.bytes_per_s * 3600 / 2**20:.0f} MiB/h); "
            f"{parse_size(bound) / g.bytes_per_s / 3600:.1f} h; vmagent RSS {g.rss_mib:.0f} MiB",
            rerun=QUEUE_COMMAND,
        )
        for g in growths
    ]
    past = _past_bound(workdir, 90.0)
    figures.append(
        Figure(
            f"edge queue past its bound ({TINY_BOUND}, 90 s outage, CPU node): dropped bytes / "
            "blocks (vm_persistentqueue_*_dropped_total), largest backlog; first outage sample "
            "that arrived; newest kept",
            f"{past.dropped_bytes / 1e6:.2f} MB / {past.dropped_blocks:.0f} blocks, "
            f"{past.pending_max / 1e6:.2f} MB; +{past.arrived_from_s:.0f} s; "
            f"{'yes' if past.newest_kept else 'no'}",
            rerun=QUEUE_COMMAND,
        )
    )
    method = (
        "vmagent (Debian 12's 1.79.5) with overlays/kubeedge's flags and scrape.yml, scraping "
        "tests/support/fleet.py's synthetic 110-pod node served over HTTP every second, its "
        "-remoteWrite.url a closed loopback port (the receiver down). Growth: "
        f"vm_persistentqueue_bytes_pending over {seconds:.0f} s after 10 s of warm-up. Past "
        f"the bound: -remoteWrite.maxDiskUsagePerURL={TINY_BOUND}, a real Prometheus receiver "
        "stopped for 90 s and started again; which samples of `up` from the outage reached it."
    )
    return Section("Edge forwarder queue (vmagent, overlays/kubeedge)", figures, method)


def run_soak(workdir: Path, outage_s: float) -> Section:
    host = FixtureHost.copy_of(FIXTURES, workdir / "host")
    stack = Stack(host, workdir)
    truth = stack.truth
    agent = stack.agent()
    receiver = start_receiver(workdir / "soak-receiver")
    rport = receiver.daemon.port
    forwarder = stack.forwarder(agent.port, receiver.write_url)
    fport = forwarder.daemon.port
    try:
        settle(receiver, truth, agent, 30)
        receiver.stop()
        down_at = time.monotonic()
        time.sleep(outage_s / 3)
        before = scrape_seen(agent, truth)
        forwarder.stop()
        forwarder = stack.forwarder(agent.port, receiver.write_url, port=fport)
        truth.down(before, truth.read(agent))
        time.sleep(outage_s / 3)
        before = scrape_seen(agent, truth)
        forwarder.kill()
        forwarder = stack.forwarder(agent.port, receiver.write_url, port=fport)
        truth.down(before, truth.read(agent))
        time.sleep(max(0.0, down_at + outage_s - time.monotonic()))
        truth.read(agent)
        back = time.monotonic()
        receiver = start_receiver(workdir / "soak-receiver", port=rport)
        settle(receiver, truth, agent, 300)
        caught_up_s = time.monotonic() - back
        points = received_points(receiver)
        check_delivery(points, truth, receiver)  # raises on any loss
    finally:
        forwarder.stop()
        receiver.stop()
        stop_process(agent.proc)
    intervals = sum(max(e) - min(e) + 1 for e in truth.epochs)
    unscrapable = sum(len(u) for u in truth.unscrapable)
    figures = [
        Figure(
            f"edge soak: {outage_s:.0f} s receiver outage, forwarder SIGTERM at 1/3 and SIGKILL "
            "at 2/3: intervals counted / lost / not scrapable (no forwarder running); samples "
            "at the receiver; replay done after the receiver returned",
            f"{intervals} / 0 / {unscrapable}; {len(points)}; {caught_up_s:.0f} s",
            "0 lost",
            True,
            SOAK_COMMAND,
        )
    ]
    method = (
        "tests/support/edgedelivery.py's scenario at full length: `wattprobe serve --interval "
        "5s` on the fixture tree, vmagent as overlays/kubeedge ships it, Debian's prometheus as "
        f"the receiver, stopped for {outage_s:.0f} s; the checks are the suite's "
        "(tests/monitoring/test_edge_vmagent.py runs the same with a 60 s outage): every "
        "interval count "
        "the agent showed while a forwarder ran is at the receiver, once, in order, and "
        "increase() over the run is exact."
    )
    return Section("Edge forwarder soak: a 10-minute receiver outage", figures, method)
