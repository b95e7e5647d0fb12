"""A synthetic fleet in wattprobe's own exposition shape, remote-written into a real Prometheus.

Every node's series are those of a real wattprobe /metrics: the CPU node is the golden
exposition of the fixture host (tests/fixtures/golden/fixture-host.prom), the GPU node a scrape
of `wattprobe serve` on the same host with the fake NVML's 8 x H100 scenario
(tests/fixtures/fleet/gpu-node.prom; `python -m tests.support.fleet capture` makes it again). Their
workload families (pod, container and process series) are replaced by PODS_PER_NODE pods in the
same label shape, a pod on each GPU of a GPU node holding it, and every series gets the labels a
scrape adds (job, instance, node) plus the scrape's own series (up, scrape_*).

Counters grow linearly with time at a known rate per series, so what the recording rules must
produce is known: Fleet.node_power and Fleet.namespace_power are the expected sums.

The samples go to Prometheus' remote-write receiver (--web.enable-remote-write-receiver) in
time order, every series' sample of one timestamp before the next timestamp's, the way an agent
forwarding a fleet delivers them. The protobuf and snappy framing are written here (snappy as
literal blocks only: valid snappy, no compression; the bytes on the wire of a real agent are
measured separately, docs/fleet.md).
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
import struct
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from alerts.generate import RULES_FILE, SHOWBACK_GROUP
from dashboards.generate import DASHBOARDS_DIR
from tests.sources.gpu.nvml.build import build_fake_nvml
from tests.sources.gpu.nvml.pods import H100_PODS, add_pods
from tests.sources.gpu.nvml.scenario import Scenario
from tests.support.fixturehost import FixtureHost
from tests.support.monitoringstack import Daemon, PrometheusAPI, PromQLError, spawn_daemon
from tests.support.paths import FIXTURES
from tests.support.promql import label_values_query, refs, substitute
from tests.support.running import free_port, start_exporter

CPU_TEMPLATE = FIXTURES / "golden" / "fixture-host.prom"
GPU_TEMPLATE = FIXTURES / "fleet" / "gpu-node.prom"

PODS_PER_NODE = 110  # the kubelet's default --max-pods
# containers per pod, as the synthetic node of tests/benchmarks (110 pods x 3 containers)
CONTAINERS = ("app", "sidecar", "init")
NAMESPACES = 12
JOB = "wattprobe"
# families rebuilt per pod; process series are opt-in (--collector.process) and left out
WORKLOAD_FAMILIES = frozenset(
    {
        "wattprobe_container_energy_joules",
        "wattprobe_pod_energy_joules",
        "wattprobe_container_cpu_seconds",
        "wattprobe_process_energy_joules",
        "wattprobe_container_gpu_memory_used_bytes",
        "wattprobe_container_gpu_ioctls",
        "wattprobe_gpu_allocation_info",
    }
)
CPU_ZONES = {"package": 1.0, "dram": 0.1}  # a pod's watts per unit of its load, per zone kind
GPU_ACTIVE_W, GPU_IDLE_W = 150.0, 60.0  # a GPU pod's billed GPU power, active and idle
# the showback factors (--showback.*) a node serves where its template has none (the GPU node's
# scrape predates them): PUE, EUR per kWh, gCO2e per kWh, a price per GPU-hour for resource
# nvidia.com/gpu
SHOWBACK_FACTORS: tuple[tuple[str, dict[str, str], float], ...] = (
    ("wattprobe_node_pue", {}, 1.2),
    ("wattprobe_energy_price_per_kwh", {"currency": "EUR"}, 0.2),
    ("wattprobe_carbon_intensity_grams_per_kwh", {}, 300.0),
)
GPU_HOUR_PRICE: tuple[str, dict[str, str], float] = (
    "wattprobe_gpu_hour_price",
    {"currency": "EUR", "resource": "nvidia.com/gpu"},
    2.0,
)
ENERGY_FLOOR_W = 5.0  # node counters the fixture leaves at 0 still draw power in the fleet


Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Series:
    """One series: sorted labels (with __name__), and its value as base + rate * seconds."""

    labels: Labels
    base: float
    rate: float  # per second; 0 for gauges

    def value(self, seconds: float) -> float:
        return self.base + self.rate * seconds

    @property
    def name(self) -> str:
        return dict(self.labels)["__name__"]


@dataclass(frozen=True)
class Template:
    """A node exposition without its workload series: (name, labels, value, is_counter)."""

    samples: tuple[tuple[str, dict[str, str], float, bool], ...]
    gpus: tuple[tuple[str, str], ...]  # (index, uuid) of the node's GPUs

    @classmethod
    def parse(cls, text: str) -> Template:
        samples = []
        gpus = []
        for family in text_string_to_metric_families(text):
            if family.name in WORKLOAD_FAMILIES:
                continue
            counter = family.type == "counter"
            for s in family.samples:
                if s.name.endswith("_created"):
                    continue
                samples.append((s.name, dict(s.labels), float(s.value), counter))
                if s.name == "wattprobe_gpu_info":
                    gpus.append((s.labels["gpu"], s.labels["uuid"]))
        return cls(tuple(samples), tuple(sorted(gpus, key=lambda g: int(g[0]))))


def _labels(name: str, labels: dict[str, str]) -> Labels:
    return tuple(sorted({"__name__": name, **{k: v for k, v in labels.items() if v}}.items()))


def _uid(*parts: object) -> str:
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-4{digest[13:16]}-8{digest[17:20]}-{digest[20:32]}"


@dataclass
class Fleet:
    nodes: int
    gpu_every: int = 4  # every n-th node is a GPU node (0: none)
    pods_per_node: int = PODS_PER_NODE
    scrape_interval_s: float = 30.0
    series: list[Series] = field(default_factory=list)
    node_power: dict[str, float] = field(default_factory=dict)  # zone -> W, all nodes, both modes
    namespace_power: dict[tuple[str, str], float] = field(default_factory=dict)  # (ns, zone) -> W

    def __post_init__(self) -> None:
        cpu = Template.parse(CPU_TEMPLATE.read_text())
        gpu = Template.parse(GPU_TEMPLATE.read_text())
        for n in range(self.nodes):
            is_gpu = self.gpu_every > 0 and n % self.gpu_every == self.gpu_every - 1
            self._node(f"edge-{n:05d}", n, gpu if is_gpu else cpu)

    @property
    def names(self) -> list[str]:
        return [f"edge-{n:05d}" for n in range(self.nodes)]

    def _add(self, name: str, labels: dict[str, str], base: float, rate: float) -> None:
        self.series.append(Series(_labels(name, labels), base, rate))

    def _node(self, node: str, n: int, template: Template) -> None:
        target = {"job": JOB, "instance": f"10.{n // 250}.{n % 250}.1:28390", "node": node}
        for name, labels, value, counter in template.samples:
            rate = 0.0
            if counter:
                rate = value / 60.0  # the fixture's value is a minute's worth
                if "energy_joules" in name:
                    rate = max(rate, ENERGY_FLOOR_W)
            self._add(name, {**labels, **target}, value, rate)
            if name == "wattprobe_node_energy_joules_total":
                zone = labels["zone"]
                self.node_power[zone] = self.node_power.get(zone, 0.0) + rate
        served = {name for name, _labels, _value, _counter in template.samples}
        for name, labels, value in (*SHOWBACK_FACTORS, GPU_HOUR_PRICE):
            if name not in served:
                self._add(name, {**labels, **target}, value, 0.0)
        for name, value in (
            ("up", 1.0),
            ("scrape_duration_seconds", 0.02),
            ("scrape_samples_scraped", 1000.0),
            ("scrape_samples_post_metric_relabeling", 1000.0),
            ("scrape_series_added", 0.0),
        ):
            self._add(name, target, value, 0.0)
        for p in range(self.pods_per_node):
            gpu = template.gpus[p] if p < len(template.gpus) else None
            self._pod(target, n, p, gpu)
        for pseudo in ("system_processes", "kernel_processes"):
            base = {**target, "container": pseudo}
            for zone, watts in CPU_ZONES.items():
                self._add(
                    "wattprobe_container_energy_joules_total",
                    {**base, "zone": zone, "mode": "active"},
                    0.0,
                    watts,
                )
            self._add("wattprobe_container_cpu_seconds_total", base, 0.0, 0.05)

    def _pod(self, target: dict[str, str], n: int, p: int, gpu: tuple[str, str] | None) -> None:
        namespace = f"team-{p % NAMESPACES:02d}"
        pod = f"app-{p:03d}-{n:05d}"
        ids = {"namespace": namespace, "pod": pod, "pod_uid": _uid(n, p)}
        containers = list(CONTAINERS)
        load = 1.0 + (p % 5)  # the pod's watts in package; its containers split it evenly
        zones: dict[tuple[str, str, str], float] = {
            (zone, "active", ""): load * k for zone, k in CPU_ZONES.items()
        }
        if gpu is not None:
            zones[("gpu", "active", gpu[0])] = GPU_ACTIVE_W
            zones[("gpu", "idle", gpu[0])] = GPU_IDLE_W
        for (zone, mode, index), watts in zones.items():
            extra = {"zone": zone, "mode": mode, "gpu": index}
            self._add("wattprobe_pod_energy_joules_total", {**target, **ids, **extra}, 0.0, watts)
            key = (namespace, zone)
            self.namespace_power[key] = self.namespace_power.get(key, 0.0) + watts
            for c in containers:
                labels = {**target, **ids, **extra, "container": c, "container_id": _cid(n, p, c)}
                self._add(
                    "wattprobe_container_energy_joules_total", labels, 0.0, watts / len(containers)
                )
        # the pause container has CPU time but no name (container=""), as in the golden file
        for c in ["", *containers]:
            labels = {**target, **ids, "container": c, "container_id": _cid(n, p, c)}
            self._add("wattprobe_container_cpu_seconds_total", labels, 0.0, 0.01 * load)
            if gpu is not None and c == CONTAINERS[0]:
                self._add(
                    "wattprobe_container_gpu_memory_used_bytes",
                    {**labels, "gpu": gpu[0]},
                    4e10,
                    0.0,
                )
                self._add(
                    "wattprobe_gpu_allocation_info",
                    {**target, **ids, "container": c, "gpu": gpu[0], "uuid": gpu[1]},
                    1.0,
                    0.0,
                )


def _cid(n: int, p: int, c: str) -> str:
    return hashlib.sha256(f"{n}/{p}/{c}".encode()).hexdigest()


# -- remote write: protobuf and snappy framing ------------------------------------------------


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def encode_labels(labels: Labels) -> bytes:
    """prometheus.TimeSeries.labels (field 1), each a Label{name=1, value=2}."""
    return b"".join(_field(1, _field(1, k.encode()) + _field(2, v.encode())) for k, v in labels)


def encode_sample(value: float, timestamp_ms: int) -> bytes:
    """prometheus.TimeSeries.samples (field 2): Sample{value=1 double, timestamp=2 int64}."""
    return _field(2, b"\x09" + struct.pack("<d", value) + b"\x10" + _varint(timestamp_ms))


def snappy_literal(data: bytes) -> bytes:
    """Snappy's block format with literal elements only (valid, uncompressed)."""
    out = bytearray(_varint(len(data)))
    chunk = 1 << 16
    for start in range(0, len(data), chunk):
        piece = data[start : start + chunk]
        n = len(piece) - 1
        if n < 60:
            out.append(n << 2)
        elif n < 1 << 8:
            out += bytes([60 << 2, n])
        else:
            out += bytes([61 << 2]) + n.to_bytes(2, "little")
        out += piece
    return bytes(out)


def write_request(series: list[tuple[bytes, bytes]]) -> bytes:
    """A WriteRequest of (encoded labels, encoded samples) pairs."""
    return b"".join(_field(1, labels + samples) for labels, samples in series)


def post(url: str, body: bytes, timeout: float = 60.0) -> None:
    request = urllib.request.Request(
        url,
        data=snappy_literal(body),
        method="POST",
        headers={
            "Content-Encoding": "snappy",
            "Content-Type": "application/x-protobuf",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        },
    )
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        if resp.status // 100 != 2:
            raise OSError(f"remote write answered {resp.status}")


@dataclass(frozen=True)
class Ingest:
    samples: int
    seconds: float
    start_s: float  # the first timestamp, Unix seconds
    end_s: float  # the last


def timestamps(start_s: float, end_s: float, step_s: float) -> Iterator[float]:
    t = start_s
    while t <= end_s + 1e-9:
        yield t
        t += step_s


def remote_write(
    series: list[Series],
    url: str,
    stamps: list[float],
    origin_s: float,
    *,
    batch_series: int = 5000,
    per_request: int = 4,
) -> Ingest:
    """Every series' samples at the given timestamps, in time order: `per_request` timestamps
    of `batch_series` series per request. Values are taken at (stamp - origin_s)."""
    encoded = [encode_labels(s.labels) for s in series]
    began = time.monotonic()
    count = 0
    for first in range(0, len(stamps), per_request):
        group = stamps[first : first + per_request]
        for lo in range(0, len(series), batch_series):
            batch = []
            for i in range(lo, min(lo + batch_series, len(series))):
                s = series[i]
                body = b"".join(encode_sample(s.value(t - origin_s), int(t * 1000)) for t in group)
                batch.append((encoded[i], body))
            post(url, write_request(batch))
            count += len(batch) * len(group)
    return Ingest(count, time.monotonic() - began, stamps[0], stamps[-1])


# -- the recording rules' history -------------------------------------------------------------

_RULE = re.compile(
    r"^\s*sum by \(([^)]*)\) \(\s*(rate\()?([a-zA-Z_:][a-zA-Z0-9_:]*)(\[5m\]\))?\s*\)\s*$"
)


def recorded(series: list[Series], rules_text: str) -> list[Series]:
    """What the recording rules of the rule file give for these series, as gauges: every rule
    must be `sum by (...) (rate(M[5m]))` or `sum by (...) (R)` of an earlier rule (the test
    checks the file keeps to that). A counter growing at a constant rate has that rate."""
    out: dict[str, list[Series]] = {}
    by_name: dict[str, list[Series]] = {}
    for s in series:
        by_name.setdefault(s.name, []).append(s)
    for group in yaml.safe_load(rules_text)["groups"]:
        if group["name"] == SHOWBACK_GROUP:
            # hourly figures over the raw counters the fleet writes: no history needed
            continue
        for rule in group["rules"]:
            if "record" not in rule:
                continue
            match = _RULE.match(rule["expr"].replace("\n", " "))
            if match is None:
                raise ValueError(f"{rule['record']}: not a sum by of a rate or of a rule")
            keep = [x.strip() for x in match.group(1).split(",")]
            is_rate = match.group(2) is not None
            sums: dict[Labels, float] = {}
            for s in by_name.get(match.group(3), []) + out.get(match.group(3), []):
                labels = dict(s.labels)
                key = _labels(rule["record"], {k: labels.get(k, "") for k in keep})
                sums[key] = sums.get(key, 0.0) + (s.rate if is_rate else s.base)
            out[rule["record"]] = [Series(k, v, 0.0) for k, v in sums.items()]
    return [s for group in out.values() for s in group]


# -- the receiving Prometheus ----------------------------------------------------------------


def receiver_config(workdir: Path, rules: Path | None, evaluation_interval: str = "15s") -> Path:
    """Its config: no scrape job of its own, the rule file when given."""
    config = workdir / "prometheus.yml"
    text = f"global:\n  evaluation_interval: {evaluation_interval}\n"
    if rules is not None:
        text += f"rule_files:\n  - {rules}\n"
    config.write_text(text)
    return config


def reload(daemon: Daemon) -> None:
    request = urllib.request.Request(daemon.url + "/-/reload", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=60) as resp:
        if resp.status != 200:
            raise OSError(f"reload answered {resp.status}")


def start_receiver(binary: str, workdir: Path, rules: Path | None = None) -> Daemon:
    """Prometheus on 127.0.0.1 with the remote-write receiver: what a cloud receiver of the
    edge fleet is. Without rules until receiver_config + reload give them (the history of the
    recorded series is written first, rule evaluations after it)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = receiver_config(workdir, rules)
    port = free_port()
    data = workdir / "data"
    data.mkdir(exist_ok=True)
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-remote-write-receiver",
        "--web.enable-lifecycle",
        "--log.level=warn",
    ]
    return spawn_daemon("prometheus", argv, port, workdir / "prometheus.log")


def own_metrics(daemon: Daemon) -> dict[str, float]:
    """Prometheus' own metrics from its /metrics, each summed over its labels."""
    with urllib.request.urlopen(daemon.url + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[s.name] = out.get(s.name, 0.0) + float(s.value)
    return out


# -- one node served over HTTP, for a real forwarder to scrape ---------------------------------


def exposition(series: list[Series], seconds: float, drop: tuple[str, ...]) -> str:
    """Text exposition of the series at `seconds` after their origin, without the labels a
    scrape or the forwarder adds (`drop`)."""
    lines = []
    for s in series:
        labels = [(k, v) for k, v in s.labels if k != "__name__" and k not in drop]
        body = ",".join(f'{k}="{v}"' for k, v in labels)
        lines.append(f"{s.name}{{{body}}} {s.value(seconds)!r}")
    return "\n".join(lines) + "\n"


class NodeServer:
    """Serves one synthetic node's /metrics on 127.0.0.1, values at the time of the request."""

    def __init__(self, series: list[Series]) -> None:
        origin = time.time()
        drop = ("job", "instance", "node")
        scrape_names = {"up", "scrape_duration_seconds", "scrape_samples_scraped"}
        scrape_names |= {"scrape_samples_post_metric_relabeling", "scrape_series_added"}
        own = [s for s in series if s.name not in scrape_names]

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exposition(own, time.time() - origin, drop).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def start_forwarder(
    binary: str,
    workdir: Path,
    target: str,
    receiver: str,
    *,
    node: str,
    scrape_interval: str = "1s",
) -> Daemon:
    """Prometheus in agent mode scraping one node and remote-writing to the receiver, with the
    edge forwarder's settings (scrape every second, a batch at 1 s or 2,000 samples)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "agent.yml"
    config.write_text(
        f"global:\n  scrape_interval: {scrape_interval}\n  scrape_timeout: {scrape_interval}\n"
        f"  external_labels:\n    node: {node}\n"
        "scrape_configs:\n  - job_name: wattprobe\n    honor_labels: true\n"
        f"    static_configs:\n      - targets: ['{target}']\n"
        f"remote_write:\n  - url: {receiver}/api/v1/write\n"
        "    queue_config:\n      batch_send_deadline: 1s\n      max_samples_per_send: 2000\n"
        "      min_shards: 1\n      max_shards: 4\n"
        "    metadata_config:\n      send: false\n"
    )
    port = free_port()
    argv = [
        binary,
        "--enable-feature=agent",
        f"--config.file={config}",
        f"--storage.agent.path={workdir / 'wal'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--log.level=warn",
    ]
    return spawn_daemon("prometheus-agent", argv, port, workdir / "agent.log")


# -- a loaded fleet --------------------------------------------------------------------------


@dataclass
class Loaded:
    """A receiver holding the fleet's history and evaluating the shipped rules on its tail."""

    fleet: Fleet
    daemon: Daemon  # what dashboards and rules query: the receiver, or the shards' query layer
    api: PrometheusAPI
    start_s: float  # the first sample
    history_end_s: float  # the last sample of the history
    evaluated_s: float  # a rule evaluation after the tail (every rule saw the whole fleet)
    ingest: Ingest
    empty: dict[str, float]  # the receiver's own metrics before anything was written
    full: dict[str, float]  # and after
    shards: tuple[Daemon, ...] = ()  # the receivers behind the query layer, when sharded

    def stop(self) -> None:
        for daemon in (self.daemon, *self.shards):
            daemon.stop()


def load(
    fleet: Fleet,
    binary: str,
    workdir: Path,
    window_s: float,
    *,
    step_s: float = 30.0,
    evaluation_interval_s: int = 10,
    timeout_s: float = 120.0,
) -> Loaded:
    """Start a receiver, write window_s of history (raw and recorded series) at step_s, then
    load the shipped rules and write two rounds of raw samples at the current time, and wait
    for a rule evaluation after them."""
    daemon = start_receiver(binary, workdir)
    try:
        empty = own_metrics(daemon)
        url = daemon.url + "/api/v1/write"
        end = time.time()
        start = end - window_s
        history = fleet.series + recorded(fleet.series, RULES_FILE.read_text())
        ingest = remote_write(history, url, list(timestamps(start, end, step_s)), start)
        receiver_config(workdir, RULES_FILE, f"{evaluation_interval_s}s")
        reload(daemon)
        tail = 0.0
        for _ in range(2):
            time.sleep(2.0)
            tail = time.time()
            remote_write(fleet.series, url, [tail], start)
        api = PrometheusAPI(daemon.url, timeout=120.0)
        evaluated = _wait_for_evaluation(api, tail, timeout_s)
        return Loaded(fleet, daemon, api, start, end, evaluated, ingest, empty, own_metrics(daemon))
    except BaseException:
        daemon.stop()
        raise


def shard_of(node: str, shards: int) -> int:
    """The receiver a node's series go to: a stable hash of its node label, so every series of
    a node lands whole on one receiver (docs/fleet.md: vmagent's hashmod relabelling per URL)."""
    return int.from_bytes(hashlib.md5(node.encode()).digest()[:8], "big") % shards


def query_layer_config(
    workdir: Path, shards: list[Daemon], rules: Path | None, evaluation_interval: str
) -> Path:
    """A Prometheus that holds no raw series: it reads them from every shard (remote_read,
    read_recent so no time range is left to its own empty storage), evaluates the rule file
    over them and keeps what the rules record in its own storage."""
    config = receiver_config(workdir, rules, evaluation_interval)
    reads = [{"url": d.url + "/api/v1/read", "read_recent": True} for d in shards]
    config.write_text(config.read_text() + yaml.safe_dump({"remote_read": reads}))
    return config


def load_sharded(
    fleet: Fleet,
    binary: str,
    workdir: Path,
    window_s: float,
    *,
    shards: int = 2,
    step_s: float = 30.0,
    evaluation_interval_s: int = 10,
    timeout_s: float = 120.0,
) -> Loaded:
    """As load(), with the fleet spread over `shards` receivers by node and every query and
    rule answered by a query layer in front of them: Prometheus reading the shards through
    remote read (the shape of Thanos Query or vmselect over their stores; Debian ships
    neither). The recorded series' history goes to the query layer, where the rules run."""
    receivers: list[Daemon] = []
    query: Daemon | None = None
    try:
        for i in range(shards):
            receivers.append(start_receiver(binary, workdir / f"shard-{i}"))
        query = start_receiver(binary, workdir / "query")
        empty = own_metrics(query)
        spread: list[list[Series]] = [[] for _ in range(shards)]
        for s in fleet.series:
            spread[shard_of(dict(s.labels)["node"], shards)].append(s)
        assert all(spread), "a shard with no node: pick another fleet size"
        end = time.time()
        start = end - window_s
        stamps = list(timestamps(start, end, step_s))
        ingests = [
            remote_write(part, d.url + "/api/v1/write", stamps, start)
            for part, d in zip(spread, receivers, strict=True)
        ]
        remote_write(
            recorded(fleet.series, RULES_FILE.read_text()),
            query.url + "/api/v1/write",
            stamps,
            start,
        )
        query_layer_config(workdir / "query", receivers, RULES_FILE, f"{evaluation_interval_s}s")
        reload(query)
        tail = 0.0
        for _ in range(2):
            time.sleep(2.0)
            tail = time.time()
            for part, d in zip(spread, receivers, strict=True):
                remote_write(part, d.url + "/api/v1/write", [tail], start)
        api = PrometheusAPI(query.url, timeout=120.0)
        evaluated = _wait_for_evaluation(api, tail, timeout_s)
        ingest = Ingest(
            sum(i.samples for i in ingests), sum(i.seconds for i in ingests), start, stamps[-1]
        )
        return Loaded(
            fleet,
            query,
            api,
            start,
            end,
            evaluated,
            ingest,
            empty,
            own_metrics(query),
            tuple(receivers),
        )
    except BaseException:
        for daemon in (*receivers, *([query] if query else [])):
            daemon.stop()
        raise


# the last rule of each recording group the fleet has data for: groups are evaluated apart
LAST_RECORDED = (
    "namespace_zone:wattprobe_pod_energy_joules:sum_rate5m",
    "namespace:wattprobe_gpu_allocation_cost:increase1h",
)


def _wait_for_evaluation(api: PrometheusAPI, after_s: float, timeout_s: float) -> float:
    """The time by which every recording rule group has been evaluated once after after_s."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        times = []
        for rule in LAST_RECORDED:
            got = api.query(f"max(timestamp({rule}))")
            times.append(float(got[0]["value"][1]) if got else 0.0)
        if min(times) > after_s:
            return max(times)
        time.sleep(1.0)
    raise AssertionError(f"no rule evaluation after the tail within {timeout_s}s")


# -- the dashboards' queries -------------------------------------------------------------------


@dataclass(frozen=True)
class PanelQuery:
    dashboard: str  # uid
    panel: str  # title
    ref: str
    expr: str  # with the variables substituted
    instant: bool

    @property
    def pre_aggregated(self) -> bool:
        """Reads recorded series only (names with a colon), no raw wattprobe_ counter."""
        names = refs(self.expr).metrics
        return bool(names) and all(":" in n for n in names)


@dataclass(frozen=True)
class Timed:
    query: PanelQuery
    seconds: float  # median of the runs
    series: int  # series in the answer
    error: str = ""


def dashboard_values(
    api: PrometheusAPI, board: dict[str, Any], builtins: dict[str, str]
) -> dict[str, str]:
    """Variable values as Grafana sets them by default: All where offered, else the first."""
    values = dict(builtins)
    for var in board["templating"]["list"]:
        if var["type"] != "query":
            continue
        parsed = label_values_query(substitute(var["query"], values))
        if parsed is None:
            raise ValueError(f"variable {var['name']}: not a label_values() query")
        expr, label = parsed
        if var.get("includeAll"):
            values[var["name"]] = var.get("allValue") or ".*"
            continue
        found = sorted({s[label] for s in api.series(expr) if s.get(label)})
        values[var["name"]] = found[0] if found else ""
    return values


def panel_queries(api: PrometheusAPI, builtins: dict[str, str]) -> list[PanelQuery]:
    out = []
    for path in sorted(DASHBOARDS_DIR.glob("*.json")):
        board = json.loads(path.read_text())
        values = dashboard_values(api, board, builtins)
        for panel in board["panels"]:
            for target in panel.get("targets", []):
                expr = substitute(target["expr"], values)
                instant = bool(target.get("instant"))
                out.append(PanelQuery(board["uid"], panel["title"], target["refId"], expr, instant))
    return out


def grafana_builtins(window_s: float, step_s: float) -> dict[str, str]:
    return {
        "__rate_interval": f"{int(4 * step_s)}s",  # Grafana: max(interval + scrape, 4 * scrape)
        "__interval": f"{int(step_s)}s",
        "__interval_ms": f"{int(step_s * 1000)}",
        "__range": f"{int(window_s)}s",
    }


def time_query(
    api: PrometheusAPI, q: PanelQuery, window: tuple[float, float, float], runs: int = 3
) -> Timed:
    """Median wall time of the query API call, as Grafana issues it (instant at the end of the
    range, or a range query at the panel's step). window: (start, end, step) in seconds."""
    start_s, end_s, step_s = window
    times = []
    result: list[Any] = []
    for _ in range(runs):
        began = time.perf_counter()
        try:
            if q.instant:
                result = api.query(q.expr, at=end_s)
            else:
                result = api.query_range(q.expr, start_s, end_s, step_s)
        except PromQLError as err:
            return Timed(q, time.perf_counter() - began, 0, str(err))
        times.append(time.perf_counter() - began)
    return Timed(q, statistics.median(times), len(result))


# -- python -m tests.support.fleet capture: the GPU node template
# -------------------------------------


def capture_gpu_node(workdir: Path) -> str:
    """One /metrics of `wattprobe serve` on the fixture host with the fake NVML's 8 x H100
    scenario and its pods' processes (what tests/fixtures/fleet/gpu-node.prom holds)."""
    host = FixtureHost.copy_of(FIXTURES, workdir / "host")
    add_pods(host, H100_PODS)
    library = build_fake_nvml(workdir / "nvml")
    scenario = Scenario.from_fixture("h100x8-timesliced", workdir / "h100.nvml")
    env = {"LD_LIBRARY_PATH": str(library), **scenario.env()}
    args = [*host.args(), "--interval", "0.3s", "--power.idle", "gpu=60"]
    proc = start_exporter(args, log_dir=workdir, env=env)
    try:
        body = ""
        for _ in range(4):
            body = proc.wait_next_interval()
        return body
    finally:
        proc.stop()


if __name__ == "__main__":
    import tempfile

    if sys.argv[1:] != ["capture"]:
        sys.exit("usage: python -m tests.support.fleet capture")
    with tempfile.TemporaryDirectory() as tmp:
        GPU_TEMPLATE.write_text(capture_gpu_node(Path(tmp)))
    print(f"wrote {GPU_TEMPLATE}")
