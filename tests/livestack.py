"""A small live fleet for the liveness tests: real exporters, Prometheus and Alertmanager.

Three `wattprobe serve` processes on copies of the fixture trees, each a "node":
- measured:   RAPL and hwmon counters advancing (the normal case);
- sensorless: no powercap and no hwmon at all, so power is estimated and the rapl/hwmon
              sources report reason="absent";
- broken:     RAPL counters hold garbage (source rapl down, reason "unparsable value"),
              hwmon still measures.
A fourth target, "gone", is a port nobody listens on (up == 0).

A background thread advances the counters and CPU times, so every rate is non-zero and energy
is attributed to containers. Prometheus scrapes the exporters every second with wattprobe's
rules loaded and sends its alerts to Alertmanager, which posts them to a webhook receiver.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from alerts.generate import DEFAULT_JOB, RULES_FILE
from tests.fixturehost import FixtureHost, write_atomic
from tests.monitoringstack import (
    Daemon,
    PrometheusAPI,
    WebhookReceiver,
    start_alertmanager,
    start_prometheus,
)
from tests.running import ExporterProcess, free_port, start_exporter

log = logging.getLogger(__name__)

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SCRAPE_INTERVAL_S = 1
TICK_S = 0.25
CLK_TCK = 100
NCPU = 4  # CPUs in the fixture's /proc/stat

# (device, watts) advanced on the measured node; the MMIO zone duplicates package-0 and is
# dropped by the exporter, so it is left alone.
RAPL_WATTS = {
    "intel-rapl:0": 40.0,
    "intel-rapl:0:0": 25.0,
    "intel-rapl:0:1": 5.0,
    "intel-rapl:1": 30.0,
    "intel-rapl:1:0": 18.0,
    "intel-rapl:1:1": 4.0,
}
HWMON_ENERGY = ("hwmon3", "energy1_input", 3.0)  # i915 energy counter, watts
# busy processes: containers of several pods, host daemons (system_processes), a kernel thread
BUSY_PIDS = (1001, 1101, 1201, 1301, 2001, 2101, 3001, 800, 15)
TICKS_PER_PID = 2

# Flags every live exporter gets. A fixed idle baseline (2 W per zone) keeps the active part of
# every zone above zero from the first interval, so workloads get energy at once.
# When the NVML and Kubernetes branches land, their fake NVML scenario and fake kubelet flags
# belong here (see exporter_args).
COMMON_ARGS = ("--interval", "1s", "--power.idle", "2")


def exporter_args(host: FixtureHost) -> list[str]:
    return [*host.args(), *COMMON_ARGS]


@dataclass
class Node:
    name: str
    host: FixtureHost
    exporter: ExporterProcess | None = None


def _measured(root: Path) -> FixtureHost:
    return FixtureHost.copy_of(FIXTURES, root / "measured")


def _sensorless(root: Path) -> FixtureHost:
    host = FixtureHost.copy_of(FIXTURES, root / "sensorless")
    shutil.rmtree(host.sysfs / "class" / "powercap")
    shutil.rmtree(host.sysfs / "class" / "hwmon")
    return host


def _broken(root: Path) -> FixtureHost:
    host = FixtureHost.copy_of(FIXTURES, root / "broken")
    for counter in (host.sysfs / "devices" / "virtual" / "powercap").rglob("energy_uj"):
        write_atomic(counter, "garbage\n")
    return host


class Advancer(threading.Thread):
    """Moves energy counters and CPU times forward every TICK_S until stopped."""

    def __init__(self, measured: FixtureHost, others: list[FixtureHost]) -> None:
        super().__init__(name="advance-counters", daemon=True)
        self.measured = measured
        self.hosts = [measured, *others]
        self.with_hwmon = [h for h in self.hosts if (h.sysfs / "class" / "hwmon").exists()]
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def tick(self) -> None:
        for device, watts in RAPL_WATTS.items():
            self.measured.add_energy_j(device, watts * TICK_S)
        hwmon, name, watts = HWMON_ENERGY
        for host in self.with_hwmon:
            host.add_hwmon_energy_j(hwmon, name, watts * TICK_S)
        busy = len(BUSY_PIDS) * TICKS_PER_PID
        for host in self.hosts:
            for pid in BUSY_PIDS:
                host.add_process_ticks(pid, TICKS_PER_PID)
            host.add_cpu_ticks(busy=busy, idle=int(NCPU * CLK_TCK * TICK_S) - busy)

    def run(self) -> None:
        try:
            while not self.stopping.wait(TICK_S):
                self.tick()
        except BaseException as exc:  # surfaced by stop(): a dead advancer means flat rates
            self.error = exc

    def stop(self) -> None:
        self.stopping.set()
        self.join(timeout=5)
        if self.error is not None:
            raise AssertionError(f"counter advancer failed: {self.error!r}")


LIVE_FOR = "3s"


def live_rules(source: str) -> dict[str, Any]:
    """The rule file with every alert's `for` set to LIVE_FOR, nothing else changed.

    The promtool unit tests prove the real `for` durations; here alerts must fire within
    seconds. A few seconds rather than 0s, so one slow scrape on a busy machine cannot fire a
    stray WattprobeTargetDown.
    """
    doc: dict[str, Any] = yaml.safe_load(source)
    for group in doc["groups"]:
        for rule in group["rules"]:
            if "alert" in rule:
                rule["for"] = LIVE_FOR
    return doc


def prometheus_config(
    targets: dict[str, str], rules: Path, alertmanager: str, job: str = DEFAULT_JOB
) -> dict[str, Any]:
    """Scrape config as docs/monitoring.md asks for: honor_labels and a node target label."""
    return {
        "global": {
            "scrape_interval": f"{SCRAPE_INTERVAL_S}s",
            "scrape_timeout": f"{SCRAPE_INTERVAL_S}s",
            "evaluation_interval": f"{SCRAPE_INTERVAL_S}s",
        },
        "rule_files": [str(rules)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]},
        "scrape_configs": [
            {
                "job_name": job,
                "honor_labels": True,
                "static_configs": [
                    {"targets": [address], "labels": {"node": node}}
                    for node, address in sorted(targets.items())
                ],
            }
        ],
    }


def alertmanager_config(webhook_url: str) -> dict[str, Any]:
    return {
        "route": {
            "receiver": "webhook",
            "group_by": ["alertname", "node"],
            "group_wait": "1s",
            "group_interval": "1s",
            "repeat_interval": "1h",
        },
        "receivers": [
            {"name": "webhook", "webhook_configs": [{"url": webhook_url, "send_resolved": False}]}
        ],
    }


@dataclass
class LiveStack:
    workdir: Path
    nodes: list[Node]
    advancer: Advancer
    webhook: WebhookReceiver
    alertmanager: Daemon
    prometheus: Daemon
    started: float  # unix time Prometheus began scraping
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def api(self) -> PrometheusAPI:
        return PrometheusAPI(self.prometheus.url)

    def logs(self) -> str:
        parts = [
            f"--- {d.name} ---\n{d.log()[-4000:]}" for d in (self.prometheus, self.alertmanager)
        ]
        parts += [
            f"--- exporter {n.name} ---\n{n.exporter.log()[-2000:]}"
            for n in self.nodes
            if n.exporter
        ]
        return "\n".join(parts)

    def stop(self) -> None:
        for step in (
            self.prometheus.stop,
            self.alertmanager.stop,
            self.webhook.stop,
            *(n.exporter.stop for n in self.nodes if n.exporter),
            self.advancer.stop,
        ):
            try:
                step()
            except Exception:
                log.exception("stopping the live stack")


def start_live_stack(
    workdir: Path, prometheus_bin: str, alertmanager_bin: str, collect_s: float
) -> LiveStack:
    """Start everything, then let Prometheus collect for collect_s seconds."""
    t0 = time.monotonic()
    nodes = [
        Node("measured", _measured(workdir)),
        Node("sensorless", _sensorless(workdir)),
        Node("broken", _broken(workdir)),
    ]
    advancer = Advancer(nodes[0].host, [n.host for n in nodes[1:]])
    advancer.start()
    started: list[Any] = []
    try:
        for node in nodes:
            node.exporter = start_exporter(exporter_args(node.host), log_dir=workdir)
        webhook = WebhookReceiver.start()
        started.append(webhook)
        am_config = workdir / "alertmanager.yml"
        am_config.write_text(yaml.safe_dump(alertmanager_config(webhook.url)))
        alertmanager = start_alertmanager(alertmanager_bin, am_config, workdir)
        started.append(alertmanager)

        rules = workdir / "wattprobe.rules.yml"
        rules.write_text(yaml.safe_dump(live_rules(RULES_FILE.read_text()), sort_keys=False))
        targets = {n.name: f"127.0.0.1:{n.exporter.port}" for n in nodes if n.exporter}
        targets["gone"] = f"127.0.0.1:{free_port()}"  # nothing listens there
        config = workdir / "prometheus.yml"
        config.write_text(
            yaml.safe_dump(prometheus_config(targets, rules, f"127.0.0.1:{alertmanager.port}"))
        )
        t_ready = time.monotonic()
        prometheus = start_prometheus(prometheus_bin, config, workdir)
        started.append(prometheus)
    except BaseException:
        for thing in reversed(started):
            thing.stop()
        for node in nodes:
            if node.exporter:
                node.exporter.stop()
        advancer.stop()
        raise
    stack = LiveStack(
        workdir, nodes, advancer, webhook, alertmanager, prometheus, started=time.time()
    )
    stack.timings["start_s"] = time.monotonic() - t0
    stack.timings["prometheus_start_s"] = time.monotonic() - t_ready
    time.sleep(collect_s)
    stack.timings["collect_s"] = collect_s
    log.info("live stack: %s", {k: round(v, 2) for k, v in stack.timings.items()})
    return stack
