"""Hostile and slow clients cannot starve a scraper (issue 19), against a real `wattprobe serve`.

2,000 connections trickle request heads a byte every 2 s, 100 pipeline /metrics without ever
reading, and a flood takes the open connections past --web.max-connections, all at once from a
process of their own (tests/support/attack.py). Meanwhile a well-behaved keep-alive scraper must get
every one of its scrapes answered 200 within 1 s, the exporter's RSS must stay bounded, and the
deadlines must cut the attackers off (408 for the tricklers, 503 for the flood past the limit).
Before issue 19 (a thread and a slot per connection) 200 trickling connections alone left 0 of
110 scrapes answered. tests/benchmarks/attack.py runs the same attack longer, with the issue's
numbers, beside node_exporter.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.support.attack import Scrape, rss_mib, scrape_keepalive
from tests.support.fixturehost import FixtureHost
from tests.support.running import REPO, start_exporter

TRICKLE = 2000
PIPELINE = 100
FLOOD = 400
MAX_CONNECTIONS = 2300  # below trickle + pipeline + flood: the flood goes past it
HEADER_TIMEOUT_S = 4.0
WRITE_TIMEOUT_S = 4.0
ATTACK_S = 14.0
RSS_BOUND_MIB = 160.0


def _socket_count(pid: int) -> int:
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:"):
                count += 1
        except OSError:
            pass
    return count


def test_attack_leaves_every_scrape_answered_within_a_second(
    host: FixtureHost, tmp_path: Path
) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * (TRICKLE + PIPELINE + FLOOD) + 512  # both ends live in this test's processes
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, need), hard))
    assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] >= need, "raise the open-files limit"
    exporter = start_exporter(
        [
            *host.args(),
            "--web.max-connections",
            str(MAX_CONNECTIONS),
            "--web.read-header-timeout",
            f"{HEADER_TIMEOUT_S}s",
            "--web.write-timeout",
            f"{WRITE_TIMEOUT_S}s",
        ],
        log_dir=tmp_path,
    )
    try:
        baseline_sockets = _socket_count(exporter.proc.pid)
        rss_before = rss_mib(exporter.proc.pid)
        rss: list[float] = []
        scrapes: list[Scrape] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.wait(0.5):
                rss.append(rss_mib(exporter.proc.pid))

        def scrape() -> None:  # connected before the attack, as Prometheus would be
            scrapes.extend(scrape_keepalive(exporter.port, ATTACK_S, gap_s=0.25))

        threads = [threading.Thread(target=f, daemon=True) for f in (sample, scrape)]
        for t in threads:
            t.start()
        time.sleep(0.5)
        attacker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.attack",
                str(exporter.port),
                str(ATTACK_S),
                *("--trickle", str(TRICKLE), "--trickle-gap", "2"),
                *("--pipeline", str(PIPELINE), "--flood", str(FLOOD)),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        out, err = attacker.communicate(timeout=ATTACK_S + 60)
        stop.set()
        for t in threads:
            t.join(ATTACK_S)
        assert attacker.returncode == 0, err.decode(errors="replace")
        tally = json.loads(out)
        worst = sorted(s.latency_s for s in scrapes)[-3:]
        print(json.dumps(tally), f"rss {rss_before:.1f} -> {max(rss):.1f} MiB", worst)

        # the attack happened as described
        assert tally["trickle"]["most_open"] >= TRICKLE * 0.95, tally
        assert tally["pipeline"]["most_open"] == PIPELINE, tally
        # past the limit: refused (503), or let in by giving up an older silent connection
        assert tally["flood"]["closed_by_server"] >= FLOOD, tally
        # cut off at the header deadline (408) or given up for a newer connection at the limit
        assert tally["trickle"]["closed_by_server"] >= TRICKLE, tally
        assert tally["pipeline"]["closed_by_server"] >= PIPELINE * 0.5, tally  # write deadline

        # the scraper never noticed
        assert len(scrapes) >= 20
        missed = [s for s in scrapes if s.status != 200]
        assert not missed, f"{len(missed)} of {len(scrapes)} scrapes missed: {missed[:5]}"
        assert max(s.latency_s for s in scrapes) < 1.0
        assert max(rss) < RSS_BOUND_MIB, (rss_before, max(rss))
        assert exporter.proc.poll() is None

        # every attacker's connection is gone once the attack stops
        deadline = time.monotonic() + HEADER_TIMEOUT_S + WRITE_TIMEOUT_S + 5
        while _socket_count(exporter.proc.pid) > baseline_sockets:
            assert time.monotonic() < deadline, "connections left open after the attack"
            time.sleep(0.2)
        assert exporter.get()[0] == 200
    finally:
        exporter.stop()
