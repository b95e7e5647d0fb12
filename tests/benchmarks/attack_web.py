"""Basic auth under a brute force, and admission under a reconnect flood (issue 28): `wattprobe
serve` and Debian's prometheus-node-exporter one after the other on the synthetic node, each
attacked from a process of its own (tests/support/attack.py).

- brute force: both with the same web config of 20 users with bcrypt cost-10 hashes; 300
  keep-alive connections from 127.0.0.1 send a wrong password for one user, again as soon as
  each answer comes. Every second a scraper from 127.0.0.2 (its own address, as a Prometheus
  pod has) logs in on a new connection as a user not used before, so no login is ever cached:
  the time to its answer, and whether it is 200. Target: within 2 s.
- reconnect flood: 300 new silent connections per second from 127.0.0.1 (each held until the
  server closes it), with wattprobe's --web.max-connections at 100 (node_exporter has no such
  limit); a scraper opens a new connection for every scrape every second, and a scrape counts
  as answered when it gets 200 within 1 s.
"""

from __future__ import annotations

import base64
import http.client
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import bcrypt
import yaml

from tests.benchmarks.attack import _answered
from tests.benchmarks.common import (
    REPO,
    Context,
    Figure,
    LoadSample,
    Section,
    machine_load,
    percentile,
    serve_args,
)
from tests.benchmarks.servers import Advancer, node_exporter, wattprobe
from tests.benchmarks.synthetic import HostShape
from tests.support.attack import Scrape

COMMAND = "python -m tests.benchmarks --only attack"
INTERVAL_S = 5.0
USERS = 20
GUESSERS = 300
AUTH_S = 20.0
LOGIN_TIMEOUT_S = 30.0
RECONNECT_RATE = 300
RECONNECT_S = 20.0
MAX_CONNECTIONS = 100
WARM_S = 2.0


@dataclass(frozen=True)
class Login:
    at: float
    latency_s: float
    status: int  # 0: no answer


@dataclass(frozen=True)
class WebOutcome:
    exporter: str
    logins: list[Login]
    fresh: list[Scrape]
    tally_auth: dict[str, dict[str, object]]
    tally_reconnect: dict[str, dict[str, object]]


def _passwords() -> list[str]:
    return [f"password-{i}" for i in range(USERS)]


def _web_config(directory: Path) -> Path:
    users = {
        f"scraper{i}": bcrypt.hashpw(p.encode(), bcrypt.gensalt(10)).decode()
        for i, p in enumerate(_passwords())
    }
    path = directory / "web-auth.yml"
    path.write_text(yaml.safe_dump({"basic_auth_users": users}))
    return path


def _login(port: int, user: str, password: str) -> Login:
    """A valid login on a new connection from 127.0.0.2."""
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    start = time.monotonic()
    conn = http.client.HTTPConnection(
        "127.0.0.1", port, timeout=LOGIN_TIMEOUT_S, source_address=("127.0.0.2", 0)
    )
    try:
        conn.request("GET", "/metrics", headers={"Authorization": f"Basic {token}"})
        resp = conn.getresponse()
        resp.read()
        status = resp.status
    except (OSError, http.client.HTTPException):
        status = 0
    finally:
        conn.close()
    return Login(start, time.monotonic() - start, status)


def _attacker(port: int, seconds: float, *flags: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.attack", str(port), str(seconds), *flags],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _tally(proc: subprocess.Popen[bytes], seconds: float) -> dict[str, dict[str, object]]:
    out, err = proc.communicate(timeout=seconds + 120)
    if proc.returncode != 0:
        raise RuntimeError(f"attacker failed: {err.decode(errors='replace')}")
    tally: dict[str, dict[str, object]] = json.loads(out)
    return tally


def brute_force(port: int) -> tuple[list[Login], dict[str, dict[str, object]]]:
    attacker = _attacker(port, AUTH_S + WARM_S, "--guess", str(GUESSERS))
    time.sleep(WARM_S)  # the guesses are flowing
    logins: list[Login] = []
    end = time.monotonic() + AUTH_S
    for i, password in enumerate(_passwords()):
        if time.monotonic() >= end:
            break
        login = _login(port, f"scraper{i}", password)
        logins.append(login)
        time.sleep(max(0.0, 1.0 - login.latency_s))
    return logins, _tally(attacker, AUTH_S + WARM_S)


def reconnect_flood(port: int) -> tuple[list[Scrape], dict[str, dict[str, object]]]:
    scraper = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.attack",
            "scrape",
            "fresh",
            str(port),
            str(WARM_S + RECONNECT_S),
            "1.0",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(WARM_S)
    start = time.monotonic()
    attacker = _attacker(port, RECONNECT_S, "--reconnect", str(RECONNECT_RATE))
    tally = _tally(attacker, RECONNECT_S)
    out, err = scraper.communicate(timeout=120)
    if scraper.returncode != 0:
        raise RuntimeError(f"scraper failed: {err.decode(errors='replace')}")
    scrapes = [Scrape(**s) for s in json.loads(out)]
    return [s for s in scrapes if s.at >= start], tally


def run(ctx: Context, log_dir: Path) -> Section:
    host = ctx.host(HostShape())
    config = _web_config(log_dir)
    outcomes: list[WebOutcome] = []
    with Advancer(host, INTERVAL_S), machine_load() as load:
        auth = ("scraper0", _passwords()[0])
        with wattprobe(
            [*serve_args(host), "--web.config.file", str(config)],
            log_dir,
            env=ctx.exporter_env(host),
            auth=auth,
        ) as wp:
            wp.wait_next_interval(timeout=60)
            logins, tally_auth = brute_force(wp.port)
        with wattprobe(
            [*serve_args(host), "--web.max-connections", str(MAX_CONNECTIONS)],
            log_dir,
            env=ctx.exporter_env(host),
        ) as wp:
            wp.wait_next_interval(timeout=60)
            fresh, tally_reconnect = reconnect_flood(wp.port)
        outcomes.append(WebOutcome("wattprobe", logins, fresh, tally_auth, tally_reconnect))
        with node_exporter(host.sysfs, host.procfs, log_dir, web_config=config, auth=auth) as ne:
            logins, tally_auth = brute_force(ne.port)
        with node_exporter(host.sysfs, host.procfs, log_dir) as ne:
            fresh, tally_reconnect = reconnect_flood(ne.port)
        outcomes.append(WebOutcome("node_exporter", logins, fresh, tally_auth, tally_reconnect))
    return _section(outcomes, load[0])


def _logins(logins: list[Login]) -> str:
    ok = [x for x in logins if x.status == 200]
    within = [x for x in ok if x.latency_s <= 2.0]
    if not logins:
        return "none made"
    lat = [x.latency_s for x in logins]
    others: dict[int, int] = {}
    for x in logins:
        if x.status != 200:
            others[x.status] = others.get(x.status, 0) + 1
    return (
        f"{len(within)} of {len(logins)} answered 200 within 2 s; latency p50 "
        f"{percentile(lat, 50):.2f} s, max {max(lat):.2f} s"
        + (f"; not 200: {others}" if others else "")
    )


def _section(outcomes: list[WebOutcome], load: LoadSample | None) -> Section:
    section = Section("Basic auth and admission under attack", load=load)
    for o in outcomes:
        ours = o.exporter == "wattprobe"
        within = [x for x in o.logins if x.status == 200 and x.latency_s <= 2.0]
        fresh_ok = [s for s in o.fresh if s.status == 200]
        section.figures += [
            Figure(
                f"{GUESSERS} wrong-password connections, {o.exporter}: uncached valid logins "
                "from another address",
                _logins(o.logins),
                target="each within 2 s" if ours else "",
                met=(len(within) == len(o.logins) and bool(within)) if ours else None,
                rerun=COMMAND,
            ),
            Figure(
                f"{RECONNECT_RATE} silent connections/s, {o.exporter}"
                + (f" (--web.max-connections {MAX_CONNECTIONS})" if ours else " (no limit)")
                + ": new-connection scrapes answered within 1 s",
                _answered(o.fresh),
                target=">= 95 %" if ours else "",
                met=(len(fresh_ok) >= 0.95 * len(o.fresh) and bool(fresh_ok)) if ours else None,
                rerun=COMMAND,
            ),
        ]
    rows = [
        "| exporter | attack | connections opened | most open at once | closed by the server "
        "| answers seen |",
        "|---|---|---|---|---|---|",
    ]
    for o in outcomes:
        for tally in (o.tally_auth, o.tally_reconnect):
            for kind, t in tally.items():
                rows.append(
                    f"| {o.exporter} | {kind} | {t['opened']} | {t['most_open']} "
                    f"| {t['closed_by_server']} | {t['statuses']} |"
                )
    section.details = "\n".join(rows)
    section.method = " ".join(__doc__.split()) if __doc__ else ""
    return section
