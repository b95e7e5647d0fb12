"""Serving under attack (issue 19): `wattprobe serve` and Debian's prometheus-node-exporter, one
after the other, on the synthetic node, each under the same loopback attack from a process of
its own (tests/support/attack.py): 2,000 connections trickling a request head one byte every 3 s,
100
connections pipelining /metrics with a 4 KiB receive window and never reading, and a flood that
takes the open connections past wattprobe's --web.max-connections (4,096 by default) and
reconnects every 0.2 s when refused or cut off.

Two scrapers measure what a Prometheus would see: one on a keep-alive connection made before the
attack (as Prometheus keeps its connections), every 0.5 s, and one that opens a new connection
for every scrape, every second. A scrape counts as answered when it gets 200 within 1 s.
Both exporters run with their default flags.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tests.benchmarks.common import (
    REPO,
    Context,
    Figure,
    Section,
    machine_load,
    percentile,
    read_proc_cpu_seconds,
    serve_args,
)
from tests.benchmarks.servers import Advancer, node_exporter, wattprobe
from tests.benchmarks.synthetic import HostShape
from tests.support.attack import Scrape, rss_mib

COMMAND = "python -m tests.benchmarks --only attack"
INTERVAL_S = 5.0
TRICKLE = 2000
TRICKLE_GAP_S = 3.0
PIPELINE = 100
FLOOD = 2600  # 2,000 + 100 + 2,600 > 4,096
WARM_S = 2.0


@dataclass(frozen=True)
class Outcome:
    name: str
    keepalive: list[Scrape]
    fresh: list[Scrape]
    rss_before_mib: float
    rss_max_mib: float
    cpu_s: float
    seconds: float
    tally: dict[str, dict[str, object]]


def _answered(scrapes: list[Scrape]) -> str:
    ok = [s for s in scrapes if s.status == 200]
    others: dict[int, int] = {}
    for s in scrapes:
        if s.status != 200:
            others[s.status] = others.get(s.status, 0) + 1
    missed = ", ".join(f"{n} {'no answer' if k == 0 else k}" for k, n in sorted(others.items()))
    if not ok:
        return f"0 of {len(scrapes)} ({missed})"
    lat = [s.latency_s for s in ok]
    return (
        f"{len(ok)} of {len(scrapes)} ({100 * len(ok) / max(1, len(scrapes)):.0f} %), "
        f"p50 {1e3 * percentile(lat, 50):.1f} ms, p99 {1e3 * percentile(lat, 99):.1f} ms"
        + (f"; missed: {missed}" if missed else "")
    )


def _scraper(how: str, port: int, seconds: float, gap_s: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.attack",
            "scrape",
            how,
            str(port),
            str(seconds),
            str(gap_s),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _scrapes(proc: subprocess.Popen[bytes], timeout: float) -> list[Scrape]:
    out, err = proc.communicate(timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"scraper failed: {err.decode(errors='replace')}")
    return [Scrape(**s) for s in json.loads(out)]


def attack_one(name: str, port: int, pid: int, seconds: float) -> Outcome:
    rss: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.5):
            rss.append(rss_mib(pid))

    rss_before = rss_mib(pid)
    attack_at = time.monotonic() + WARM_S
    sampler = threading.Thread(target=sample)
    sampler.start()
    # the keep-alive scraper connects before the attack, as a running Prometheus has
    keepalive = _scraper("keepalive", port, WARM_S + seconds, 0.5)
    fresh = _scraper("fresh", port, WARM_S + seconds, 1.0)
    time.sleep(WARM_S)
    cpu0 = read_proc_cpu_seconds(pid)
    attacker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.attack",
            str(port),
            str(seconds),
            *("--trickle", str(TRICKLE), "--trickle-gap", str(TRICKLE_GAP_S)),
            *("--pipeline", str(PIPELINE), "--flood", str(FLOOD)),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = attacker.communicate(timeout=seconds + 120)
    cpu = read_proc_cpu_seconds(pid) - cpu0
    stop.set()
    sampler.join(30)
    if attacker.returncode != 0:
        raise RuntimeError(f"attacker failed: {err.decode(errors='replace')}")
    return Outcome(
        name,
        [s for s in _scrapes(keepalive, 60) if s.at >= attack_at],
        [s for s in _scrapes(fresh, 60) if s.at >= attack_at],
        rss_before,
        max(rss, default=rss_before),
        cpu,
        seconds,
        json.loads(out),
    )


def run(ctx: Context, seconds: float, log_dir: Path) -> Section:
    host = ctx.host(HostShape())
    outcomes: list[Outcome] = []
    with Advancer(host, INTERVAL_S), machine_load() as load:
        with wattprobe(serve_args(host), log_dir, env=ctx.exporter_env(host)) as wp:
            wp.wait_next_interval(timeout=60)
            outcomes.append(attack_one("wattprobe", wp.port, wp.proc.pid, seconds))
        with node_exporter(host.sysfs, host.procfs, log_dir) as ne:
            outcomes.append(attack_one("node_exporter", ne.port, ne.proc.pid, seconds))
    section = Section("Serving under attack", load=load[0])
    for o in outcomes:
        ok = [s for s in o.keepalive if s.status == 200]
        section.figures += [
            Figure(
                f"under attack, {o.name}: keep-alive scrapes answered 200 within 1 s",
                _answered(o.keepalive),
                target="100 %" if o.name == "wattprobe" else "",
                met=(len(ok) == len(o.keepalive) and bool(ok)) if o.name == "wattprobe" else None,
                rerun=COMMAND,
            ),
            Figure(
                f"under attack, {o.name}: scrapes on a new connection each, answered within 1 s",
                _answered(o.fresh),
                rerun=COMMAND,
            ),
            Figure(
                f"under attack, {o.name}: RSS before / largest during; CPU during",
                f"{o.rss_before_mib:.1f} / {o.rss_max_mib:.1f} MiB; {o.cpu_s:.1f} s CPU in "
                f"{o.seconds:.0f} s",
                rerun=COMMAND,
            ),
        ]
    rows = [
        "| exporter | kind | connections opened | most open at once | closed by the server "
        "| answers seen |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        for kind, t in o.tally.items():
            rows.append(
                f"| {o.name} | {kind} | {t['opened']} | {t['most_open']} "
                f"| {t['closed_by_server']} | {t['statuses']} |"
            )
    section.details = "\n".join(rows)
    section.method = (
        (
            f"{__doc__.split(chr(10) + chr(10))[0]} {__doc__.split(chr(10) + chr(10))[1]} "
            f"The attack lasted {seconds:.0f} s per exporter; scrapes count from its start. "
            "'Closed by the server' counts each attacking connection the exporter closed (cut off "
            "at a deadline, refused at the limit, or given up for a newer one at the limit); the "
            "attacker opens each one again."
        )
        .replace("\n", " ")
        .replace("  ", " ")
    )
    return section
