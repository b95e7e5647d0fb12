"""A small live fleet for the liveness tests: real exporters, Prometheus and Alertmanager.

Five `wattprobe serve` processes, each a "node"; four on copies of the fixture trees:
- measured:   RAPL and hwmon counters advancing (the normal case), no GPU (nvml "absent");
- gpu:        the same plus 8 fake H100s through the real pynvml and the fake
              libnvidia-ml.so.1, GPU processes of kubepods containers in its /proc, some GPUs
              hot or busy, and during the run an XID 13, an XID 79 and a lost GPU
              (tests/support/livegpus.py); PodResources assigns its GPUs, one of them to a pod that
              leaves it idle (tests/support/livekube.py);
- sensorless: no powercap and no hwmon at all, so power is estimated and the rapl/hwmon
              sources report reason="absent"; one fake A100 in MIG mode, one instance full,
              its MIG devices assigned to pods by PodResources;
- broken:     RAPL counters hold garbage (source rapl down, reason "unparsable value"),
              hwmon still measures; no GPU; pod names from the apiserver (list + watch);
and one on this machine itself:
- ebpf:       the real /proc and /sys with real eBPF probes, a process issuing GPU driver
              ioctls in a kubepods cgroup (tests/support/liveebpf.py); no RAPL, hwmon or GPU here.
The others get pod names from their kubelet (tests/support/livekube.py).
A sixth target, "gone", is a port nobody listens on (up == 0).

A background thread advances the counters, CPU times and GPU energy, so every rate is non-zero
and energy is attributed to containers. Prometheus scrapes the exporters every second with
wattprobe's rules loaded and sends its alerts to Alertmanager, which posts them to a webhook
receiver.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from alerts.generate import DEFAULT_JOB, RULES_FILE
from tests.support import liveebpf
from tests.support.ebpfparts import require_ebpf
from tests.support.fixturehost import FixtureHost, write_atomic
from tests.support.liveebpf import GpuClient, start_gpu_client
from tests.support.livefactors import showback_args
from tests.support.livegpus import FakeGpus, build_library, h100_node, inject_faults, mig_node
from tests.support.livekube import (
    POD_IDLE,
    LiveKube,
    add_nvidia_driver,
    fleet_pods,
    h100_assignments,
    h100_claims,
    h100_pods,
    mig_assignments,
    mig_pods,
)
from tests.support.monitoringstack import (
    Daemon,
    PrometheusAPI,
    WebhookReceiver,
    start_alertmanager,
    start_prometheus,
)
from tests.support.paths import FIXTURES
from tests.support.running import ExporterProcess, free_port, select, start_exporter

log = logging.getLogger(__name__)

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

# Flags every live exporter gets. A fixed idle baseline (2 W per zone, GPUs included) keeps the
# active part of every zone above zero from the first interval, so workloads get energy at once.
COMMON_ARGS = ("--interval", "1s", "--power.idle", "2")
# Fixture nodes measure activity from their fixture /proc (eBPF would see the real kernel).
FIXTURE_ARGS = ("--activity-source", "procfs")


# Prometheus scrapes the GPU node for this long before its XIDs and lost GPU happen, so it has
# the healthy GPUs first (its first scrape comes a few seconds after it is ready: the scrape
# manager applies new targets every 5 s).
HEALTHY_FIRST_S = 3.0

# The showback rules count GPU minutes at 1m steps over the past hour; the stack runs well
# under a minute, so they count its seconds (value / 3600) instead.
SHOWBACK_MINUTES = ("[3599999ms:1m]", ") / 60\n")
SHOWBACK_SECONDS = (f"[3599999ms:{SCRAPE_INTERVAL_S}s]", f") / {3600 // SCRAPE_INTERVAL_S}\n")


@dataclass
class Node:
    name: str
    host: FixtureHost | None  # None: this machine's own /proc and /sys
    rapl: bool = False  # advance its RAPL counters
    gpus: FakeGpus | None = None  # runs with the fake NVML on this scenario
    kube_args: list[str] = field(default_factory=list)  # its pod source (and PodResources)
    more_busy_pids: tuple[int, ...] = ()  # busy processes of pods that use no GPU
    exporter: ExporterProcess | None = None

    def env(self) -> dict[str, str]:
        return self.gpus.env() if self.gpus else {}

    def args(self) -> list[str]:
        tree = [*self.host.args(), *FIXTURE_ARGS] if self.host else list(liveebpf.EXPORTER_ARGS)
        return [*tree, *COMMON_ARGS, *self.kube_args]

    def busy_pids(self) -> tuple[int, ...]:
        """Processes that use CPU, where they run: BUSY_PIDS, the GPU pods' processes and
        more_busy_pids."""
        assert self.host is not None
        gpu_pids = tuple(p.pid for p in (self.gpus.pods if self.gpus else ()))
        pids = BUSY_PIDS + gpu_pids + self.more_busy_pids
        return tuple(p for p in pids if (self.host.procfs / str(p)).is_dir())


def _measured(root: Path, name: str = "measured") -> FixtureHost:
    return FixtureHost.copy_of(FIXTURES, root / name)


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
    """Moves energy counters, CPU times and GPU energy forward every TICK_S until stopped."""

    def __init__(self, nodes: list[Node]) -> None:
        super().__init__(name="advance-counters", daemon=True)
        self.nodes = [n for n in nodes if n.host is not None]  # not this machine's
        self.with_hwmon = [
            n.host
            for n in self.nodes
            if n.host is not None and (n.host.sysfs / "class" / "hwmon").exists()
        ]
        self.stopping = threading.Event()
        self.error: BaseException | None = None

    def tick(self) -> None:
        for node in self.nodes:
            assert node.host is not None
            if node.rapl:
                for device, watts in RAPL_WATTS.items():
                    node.host.add_energy_j(device, watts * TICK_S)
            if node.gpus:
                node.gpus.advance()
        hwmon, name, watts = HWMON_ENERGY
        for host in self.with_hwmon:
            host.add_hwmon_energy_j(hwmon, name, watts * TICK_S)
        for node in self.nodes:
            assert node.host is not None
            pids = node.busy_pids()
            for pid in pids:
                node.host.add_process_ticks(pid, TICKS_PER_PID)
            busy = len(pids) * TICKS_PER_PID
            node.host.add_cpu_ticks(busy=busy, idle=int(NCPU * CLK_TCK * TICK_S) - busy)

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
            elif SHOWBACK_MINUTES[0] in rule["expr"]:
                for minutes, seconds in zip(SHOWBACK_MINUTES, SHOWBACK_SECONDS, strict=True):
                    assert rule["expr"].count(minutes) == 1, rule["record"]
                    rule["expr"] = rule["expr"].replace(minutes, seconds)
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
    kube: LiveKube
    gpu_client: GpuClient  # the eBPF node's ioctl-issuing process
    started: float  # unix time Prometheus began scraping
    faults_at: float = 0.0  # unix time the GPU node's XIDs and lost GPU happened
    timings: dict[str, float] = field(default_factory=dict)

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

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
        for node in self.nodes:  # all exporters shut down at once; stop() below waits for each
            if node.exporter and node.exporter.proc.poll() is None:
                node.exporter.proc.terminate()
        for step in (
            self.prometheus.stop,
            self.alertmanager.stop,
            self.webhook.stop,
            *(n.exporter.stop for n in self.nodes if n.exporter),
            self.kube.stop,
            self.gpu_client.stop,
            self.advancer.stop,
        ):
            try:
                step()
            except Exception:
                log.exception("stopping the live stack")


def _wait_for_xid_watch(exporter: ExporterProcess, timeout: float = 30.0) -> None:
    """NVML only reports XIDs raised after registration: wait until the watcher runs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        up = select(exporter.samples(), "wattprobe_source_up", source="nvml_xid")
        if list(up.values()) == [1.0]:
            return
        exporter.wait_next_interval()
    raise AssertionError(f"XID watcher not up within {timeout}s:\n{exporter.log()}")


def _wait_for_series(api: PrometheusAPI, expr: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not api.query(expr):
        if time.monotonic() > deadline:
            raise AssertionError(f"Prometheus has no {expr} after {timeout}s")
        time.sleep(SCRAPE_INTERVAL_S / 4)


def _start_exporters(nodes: list[Node], workdir: Path, cleanup: contextlib.ExitStack) -> None:
    """All at once (the eBPF node compiles its probes meanwhile); each is stopped by cleanup."""
    with ThreadPoolExecutor(len(nodes)) as pool:
        started = [
            (
                node,
                pool.submit(
                    start_exporter,
                    [*node.args(), *showback_args(workdir, node.name)],
                    log_dir=workdir,
                    env=node.env(),
                ),
            )
            for node in nodes
        ]
    errors = []
    for node, future in started:
        try:
            node.exporter = future.result()
        except Exception as exc:  # stop the others first, then raise the first failure
            errors.append(exc)
        else:
            cleanup.callback(node.exporter.stop)
    if errors:
        raise errors[0]


def _fleet(workdir: Path, library: Path, kube: LiveKube) -> list[Node]:
    """The nodes with their fixture trees, fake GPUs and Kubernetes endpoints."""
    measured = _measured(workdir)
    gpu_host = _measured(workdir, "gpu")
    h100 = h100_node(gpu_host, library)
    add_nvidia_driver(gpu_host, h100.scenario)
    sensorless_host = _sensorless(workdir)
    a100 = mig_node(sensorless_host, library)
    add_nvidia_driver(sensorless_host, a100.scenario)
    return [
        Node(
            "measured",
            measured,
            rapl=True,
            kube_args=kube.kubelet("measured", fleet_pods("measured")),
        ),
        Node(
            "gpu",
            gpu_host,
            rapl=True,
            gpus=h100,
            kube_args=[
                *kube.kubelet("gpu", h100_pods(gpu_host, "gpu")),
                *kube.podresources(
                    "gpu",
                    *h100_assignments(h100.scenario),
                    claimed=h100_claims(h100.scenario, workdir / "gpu-cdi"),
                    cdi_dir=workdir / "gpu-cdi",
                ),
            ],
            more_busy_pids=(POD_IDLE.pid,),
        ),
        Node(
            "sensorless",
            sensorless_host,
            gpus=a100,
            kube_args=[
                *kube.kubelet("sensorless", mig_pods("sensorless")),
                *kube.podresources("sensorless", *mig_assignments(a100.scenario)),
            ],
        ),
        Node("broken", _broken(workdir), kube_args=kube.apiserver("broken", fleet_pods("broken"))),
    ]


def start_live_stack(
    workdir: Path, prometheus_bin: str, alertmanager_bin: str, gcc: str, collect_s: float
) -> LiveStack:
    """Start everything, then let Prometheus collect for collect_s seconds."""
    require_ebpf()  # the eBPF node runs real probes on this machine
    t0 = time.monotonic()
    library = build_library(workdir, gcc)
    with contextlib.ExitStack() as cleanup:
        kube = LiveKube.create(workdir)
        cleanup.callback(kube.stop)
        gpu_client = start_gpu_client()
        cleanup.callback(gpu_client.stop)
        nodes = _fleet(workdir, library, kube)
        nodes.append(
            Node(
                liveebpf.NODE,
                None,
                kube_args=kube.kubelet(liveebpf.NODE, [gpu_client.pod()]),
            )
        )
        advancer = Advancer(nodes)
        advancer.start()
        cleanup.callback(advancer.stop)
        _start_exporters(nodes, workdir, cleanup)
        webhook = WebhookReceiver.start()
        cleanup.callback(webhook.stop)
        am_config = workdir / "alertmanager.yml"
        am_config.write_text(yaml.safe_dump(alertmanager_config(webhook.url)))
        alertmanager = start_alertmanager(alertmanager_bin, am_config, workdir)
        cleanup.callback(alertmanager.stop)

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
        cleanup.pop_all()  # from here on the stack stops them all
    stack = LiveStack(
        workdir,
        nodes,
        advancer,
        webhook,
        alertmanager,
        prometheus,
        kube,
        gpu_client,
        started=time.time(),
    )
    t_scraping = time.monotonic()
    stack.timings["start_s"] = t_scraping - t0
    stack.timings["prometheus_start_s"] = t_scraping - t_ready
    try:
        gpu = stack.node("gpu")
        assert gpu.exporter and gpu.gpus
        _wait_for_xid_watch(gpu.exporter)
        _wait_for_series(stack.api, 'wattprobe_gpu_lost{node="gpu"}')
        stack.timings["first_gpu_scrape_s"] = time.monotonic() - t_scraping
        time.sleep(HEALTHY_FIRST_S)
        inject_faults(gpu.gpus)
        stack.faults_at = time.time()
        stack.timings["faults_after_s"] = time.monotonic() - t_scraping
        time.sleep(max(0.0, collect_s - (time.monotonic() - t_scraping)))
    except BaseException:
        stack.stop()
        raise
    stack.timings["collect_s"] = time.monotonic() - t_scraping
    log.info("live stack: %s", {k: round(v, 2) for k, v in stack.timings.items()})
    return stack
