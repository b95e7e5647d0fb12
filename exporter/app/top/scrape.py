"""One reading of wattprobe's metric families, reduced to what `wattprobe top` shows.

The same families come from two places: a running exporter's /metrics text (`top --from`),
parsed with prometheus_client's parser, or the in-process Snapshot rendered by the exporter's own
collector. Going through the families in both cases means `top` shows exactly what Prometheus
would scrape.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from exporter.exposition.collector import SnapshotCollector
from exporter.model.snapshot import Snapshot

P = "wattprobe_"
GPU_ZONE = "gpu"
IDLE_MODE = "idle"  # idle energy billed to a workload; every other mode is active


@dataclass(frozen=True, slots=True)
class WorkloadId:
    """A pod (container_id "") or a container, or a pseudo-container (pod_uid "")."""

    container_id: str
    pod_uid: str
    container: str  # container name, or system_processes / kernel_processes
    pod: str  # names are "" until the exporter knows them
    namespace: str


@dataclass(slots=True)
class Totals:
    """Cumulative counters of one workload, as of one scrape: active and billed idle apart."""

    zones: dict[str, float] = field(default_factory=dict)  # zone kind -> active J (GPU excluded)
    gpus: dict[str, float] = field(default_factory=dict)  # GPU index -> active J
    idle_zones: dict[str, float] = field(default_factory=dict)  # zone kind -> idle J billed
    idle_gpus: dict[str, float] = field(default_factory=dict)  # GPU index -> idle J billed
    cpu_seconds: float = 0.0


@dataclass(slots=True)
class GpuState:
    index: str
    uuid: str = ""
    model: str = ""
    lost: bool = False
    utilization: float | None = None
    memory_used: float | None = None
    memory_total: float | None = None
    temperature: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float = 0.0


@dataclass(frozen=True, slots=True)
class SourceState:
    source: str
    up: bool
    reason: str


@dataclass(frozen=True)
class Scrape:
    received: float  # monotonic clock of the reader when it was read
    at: float | None  # wattprobe_last_interval_timestamp_seconds; None from older exporters
    intervals: float
    cpu_usage: float | None
    node: Mapping[tuple[str, str, str], tuple[float, float]]  # (zone, device, source) -> J
    containers: Mapping[WorkloadId, Totals]
    pods: Mapping[WorkloadId, Totals]  # pods, plus containers that are in no pod
    gpus: tuple[GpuState, ...]
    sources: tuple[SourceState, ...]
    version: str = ""


def _workload(labels: Mapping[str, str]) -> WorkloadId:
    return WorkloadId(
        labels.get("container_id", ""),
        labels.get("pod_uid", ""),
        labels.get("container", ""),
        labels.get("pod", ""),
        labels.get("namespace", ""),
    )


def _pod_of(container: WorkloadId) -> WorkloadId:
    if not container.pod_uid:
        return container  # a pseudo-container or a container outside Kubernetes is its own row
    return WorkloadId("", container.pod_uid, "", container.pod, container.namespace)


def _add_energy(totals: Totals, labels: Mapping[str, str], joules: float) -> None:
    zone = labels.get("zone", "")
    idle = labels.get("mode") == IDLE_MODE
    if zone == GPU_ZONE:
        target, key = (totals.idle_gpus if idle else totals.gpus), labels.get("gpu", "")
    else:
        target, key = (totals.idle_zones if idle else totals.zones), zone
    target[key] = target.get(key, 0.0) + joules


_GPU_GAUGES = {
    P + "gpu_utilization_ratio": "utilization",
    P + "gpu_memory_used_bytes": "memory_used",
    P + "gpu_memory_total_bytes": "memory_total",
    P + "gpu_temperature_celsius": "temperature",
    P + "gpu_power_watts": "power_w",
    P + "gpu_power_limit_watts": "power_limit_w",
}


class _Builder:
    def __init__(self) -> None:
        self.at: float | None = None
        self.intervals = -1.0
        self.cpu_usage: float | None = None
        self.version = ""
        self.node: dict[tuple[str, str, str], list[float]] = {}
        self.containers: dict[WorkloadId, Totals] = {}
        self.pods: dict[WorkloadId, Totals] = {}
        self.gpus: dict[str, GpuState] = {}
        self.sources: list[SourceState] = []

    def gpu(self, labels: Mapping[str, str]) -> GpuState:
        index = labels.get("gpu", "")
        state = self.gpus.get(index)
        if state is None:
            state = self.gpus[index] = GpuState(index)
        state.uuid = state.uuid or labels.get("uuid", "")
        return state

    def add(self, s: Sample) -> None:  # noqa: PLR0912 (one branch per family)
        name, labels, value = s.name, s.labels, s.value
        if name == P + "intervals_total":
            self.intervals = value
        elif name == P + "last_interval_timestamp_seconds":
            self.at = value
        elif name == P + "build_info":
            self.version = labels.get("version", "")
        elif name == P + "node_cpu_usage_ratio":
            self.cpu_usage = value
        elif name == P + "source_up":
            self.sources.append(SourceState(labels["source"], value == 1, labels.get("reason", "")))
        elif name == P + "node_energy_joules_total":
            key = (labels["zone"], labels.get("device", ""), labels.get("source", ""))
            acc = self.node.setdefault(key, [0.0, 0.0])
            acc[0 if labels.get("mode") == "active" else 1] += value
        elif name == P + "container_energy_joules_total":
            ref = _workload(labels)
            _add_energy(self.containers.setdefault(ref, Totals()), labels, value)
            if not ref.pod_uid:
                _add_energy(self.pods.setdefault(ref, Totals()), labels, value)
        elif name == P + "container_cpu_seconds_total":
            ref = _workload(labels)
            self.containers.setdefault(ref, Totals()).cpu_seconds += value
            if not ref.pod_uid:  # a pod's own series carries its containers' CPU
                self.pods.setdefault(ref, Totals()).cpu_seconds += value
        elif name == P + "pod_cpu_seconds_total":
            self.pods.setdefault(_pod_of(_workload(labels)), Totals()).cpu_seconds += value
        elif name == P + "pod_energy_joules_total":
            _add_energy(self.pods.setdefault(_pod_of(_workload(labels)), Totals()), labels, value)
        elif name == P + "gpu_info":
            self.gpu(labels).model = labels.get("model", "")
        elif name == P + "gpu_lost":
            self.gpu(labels).lost = value == 1
        elif name == P + "gpu_energy_joules_total":
            self.gpu(labels).energy_j += value
        elif name in _GPU_GAUGES and not labels.get("gpu_instance"):  # whole GPUs, not MIG parts
            setattr(self.gpu(labels), _GPU_GAUGES[name], value)

    def build(self, received: float) -> Scrape:
        return Scrape(
            received=received,
            at=self.at,
            intervals=self.intervals,
            cpu_usage=self.cpu_usage,
            node={k: (v[0], v[1]) for k, v in self.node.items()},
            containers=self.containers,
            pods=self.pods,
            gpus=tuple(sorted(self.gpus.values(), key=lambda g: (len(g.index), g.index, g.uuid))),
            sources=tuple(self.sources),
            version=self.version,
        )


def from_families(families: Iterable[Metric], received: float) -> Scrape:
    builder = _Builder()
    for family in families:
        for sample in family.samples:
            builder.add(sample)
    return builder.build(received)


def from_text(text: str, received: float) -> Scrape:
    """Parse an exposition (raises ValueError on text that is not one)."""
    return from_families(text_string_to_metric_families(text), received)


def from_snapshot(snapshot: Snapshot, received: float) -> Scrape:
    return from_families(SnapshotCollector(lambda: snapshot).collect(), received)
