"""prometheus_client Collector: turns the latest Snapshot into metric families on each scrape.

No per-label Gauge objects and no file reads here: every family is built fresh from one
immutable Snapshot, so all series of a scrape come from the same instant.
"""

from __future__ import annotations

import platform
import re
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from exporter import __version__
from exporter.exposition.gpu import gpu_families
from exporter.exposition.metrics import BY_NAME, PREFIX
from exporter.model.health import REJECT_REASONS
from exporter.model.snapshot import (
    UNATTRIBUTED_NO_PROCESS_LIST,
    UNATTRIBUTED_REASONS,
    Energy,
    Snapshot,
)


def _family(name: str) -> Metric:
    """A fresh, empty family for a metric of the catalogue (exporter/exposition/metrics.py)."""
    spec = BY_NAME[name]
    return Metric(PREFIX + spec.name, spec.help, spec.kind)


def _add(metric: Metric, labels: Mapping[str, str], value: float) -> None:
    # Counters are exposed with their _total suffix; gpu="" is left out (it only means "host").
    suffix = "_total" if metric.type == "counter" else ""
    clean = {k: v for k, v in labels.items() if v or k != "gpu"}
    metric.add_sample(metric.name + suffix, clean, value)


def _energy_samples(metric: Metric, energy: Iterable[Energy], labels: Mapping[str, str]) -> None:
    for e in energy:
        _add(metric, {"zone": e.zone, "gpu": e.gpu, "mode": e.mode, **labels}, e.joules)


class SnapshotCollector(Collector):
    """containers: serve per-container series of pods' containers (--collector.container). The
    pseudo-containers' series and every pod series are served either way, so pods plus the
    pseudo-containers still add up to the node."""

    def __init__(self, snapshot: Callable[[], Snapshot], *, containers: bool = True) -> None:
        self._snapshot = snapshot
        self._containers = containers

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        yield from self._self_metrics(snap)
        yield from self._node_metrics(snap)
        yield from self._workload_metrics(snap)
        yield from gpu_families(snap, containers=self._containers)
        yield from self._ebpf_metrics(snap)
        yield from self._kube_metrics(snap)

    def _self_metrics(self, snap: Snapshot) -> Iterator[Metric]:
        info = _family("build_info")
        _add(info, {"version": __version__, "python": platform.python_version()}, 1)
        yield info
        intervals = _family("intervals")
        _add(intervals, {}, snap.sequence)
        yield intervals
        if snap.sequence:
            stamp = _family("last_interval_timestamp_seconds")
            _add(stamp, {}, snap.timestamp)
            yield stamp
        up = _family("source_up")
        duration = _family("collect_duration_seconds")
        for s in snap.sources:
            _add(up, {"source": s.source, "reason": "" if s.up else s.reason}, 1 if s.up else 0)
            _add(duration, {"source": s.source}, s.duration_s)
        yield up
        yield duration
        device_up = _family("device_up")
        rejected = _family("device_rejected_readings")
        for d in snap.devices:
            ids = {"source": d.source, "zone": d.zone, "device": d.device}
            _add(device_up, ids, 1 if d.meter.up else 0)
            counts = dict(d.meter.rejected)
            for reason in REJECT_REASONS:  # every reason from the start: increase() sees the first
                _add(rejected, {**ids, "reason": reason}, counts.get(reason, 0))
        yield device_up
        yield rejected

    def _node_metrics(self, snap: Snapshot) -> Iterator[Metric]:
        if snap.cpu_usage_ratio is not None:
            usage = _family("node_cpu_usage_ratio")
            _add(usage, {}, snap.cpu_usage_ratio)
            yield usage
        node = _family("node_energy_joules")
        for z in snap.node_energy:
            labels = {"zone": z.zone, "device": z.device, "source": z.source}
            _add(node, {**labels, "mode": "active"}, z.active_j)
            _add(node, {**labels, "mode": "idle"}, z.idle_j)
        yield node
        yield from _unattributed_metrics(snap)
        idle = _family("idle_power_watts")
        for d in snap.devices:
            labels = {"source": d.source, "zone": d.zone, "device": d.device}
            _add(idle, {**labels, "origin": d.meter.idle_origin}, d.meter.idle_w)
        yield idle
        if snap.estimate is not None:
            info = _family("estimate_info")
            e = snap.estimate
            labels = {"cpu_model": e.cpu_model, "instance_type": e.instance_type, "basis": e.basis}
            _add(info, labels, 1.0)
            yield info

    def _workload_metrics(self, snap: Snapshot) -> Iterator[Metric]:
        container_energy = _family("container_energy_joules")
        cpu = _family("container_cpu_seconds")
        ioctls = _family("container_gpu_ioctls")
        for c in snap.containers:
            if c.pod_uid and not self._containers:
                continue  # its pod's series carry it
            ids = {
                "container_id": c.container_id,
                "container": c.container,
                "pod": c.pod,
                "namespace": c.namespace,
                "pod_uid": c.pod_uid,
            }
            _energy_samples(container_energy, c.energy, ids)
            _add(cpu, ids, c.cpu_seconds)
            for driver, n in c.gpu_ioctls:
                _add(ioctls, {**ids, "driver": driver}, n)
        yield container_energy
        yield cpu
        if ioctls.samples:
            yield ioctls

        pod_energy = _family("pod_energy_joules")
        pod_cpu = _family("pod_cpu_seconds")
        for p in snap.pods:
            ids = {"pod": p.pod, "namespace": p.namespace, "pod_uid": p.pod_uid}
            _energy_samples(pod_energy, p.energy, ids)
            _add(pod_cpu, ids, p.cpu_seconds)
        yield pod_energy
        yield pod_cpu

        if snap.processes:
            process = _family("process_energy_joules")
            for pr in snap.processes:
                labels = {
                    "pid": str(pr.pid),
                    "comm": pr.comm,
                    "container_id": pr.container_id,
                    "container": pr.container,
                }
                _energy_samples(process, pr.energy, labels)
            yield process

    def _ebpf_metrics(self, snap: Snapshot) -> Iterator[Metric]:
        if not snap.ebpf_maps:
            return
        entries = _family("ebpf_map_entries")
        capacity = _family("ebpf_map_max_entries")
        evictions = _family("ebpf_map_evictions")
        failures = _family("ebpf_map_insert_failures")
        for m in snap.ebpf_maps:
            labels = {"map": m.map}
            _add(entries, labels, m.entries)
            _add(capacity, labels, m.max_entries)
            _add(evictions, labels, m.evictions)
            _add(failures, labels, m.insert_failures)
        yield entries
        yield capacity
        yield evictions
        yield failures

    def _kube_metrics(self, snap: Snapshot) -> Iterator[Metric]:
        if snap.pod_info:
            info = _family("pod_info")
            for p in snap.pod_info:
                labels = {"namespace": p.namespace, "pod": p.pod, "pod_uid": p.pod_uid}
                for key, value in p.labels:
                    labels.setdefault(pod_label_name(key), value)
                _add(info, labels, 1)
            yield info
        if snap.gpu_allocations:
            alloc = _family("gpu_allocation_info")
            for a in snap.gpu_allocations:
                labels = {"gpu": a.gpu, "namespace": a.namespace, "pod": a.pod}
                labels["container"] = a.container
                # unknown parts are left out, not empty: a MIG device's parent needs NVML
                parts = (
                    ("uuid", a.uuid),
                    ("gpu_instance", a.gpu_instance),
                    ("mig_device", a.mig_device),
                    ("claim", a.claim),
                    ("resource", a.resource),
                )
                for key, value in parts:
                    if value:
                        labels[key] = value
                _add(alloc, labels, 1)
            yield alloc
        if snap.cdi_rejections:
            cdi = _family("cdi_spec_rejections")
            for reason, count in snap.cdi_rejections:
                _add(cdi, {"reason": reason}, count)
            yield cdi


_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")


def pod_label_name(key: str) -> str:
    """A Kubernetes label key as a Prometheus label name, the way kube-state-metrics writes it."""
    return "label_" + _LABEL_CHARS.sub("_", key)


_ACTIVE = "active"  # the mode every attributed zone has (accounting/attribution.py ACTIVE)
_GPU_ZONE = "gpu"  # every GPU's zone (accounting/gpu.py GPU_ZONE)


def _unattributed_metrics(snap: Snapshot) -> Iterator[Metric]:
    """Energy not on any workload. Every attributed zone kind has its series from the start
    (at 0), so increase() sees the first joules and an alert can rely on the series."""
    given_up = _family("node_unattributed_energy_joules")
    counted = {(u.zone, u.gpu, u.mode, u.reason): u.joules for u in snap.unattributed}
    for zone in snap.attributed_zones:
        for reason in UNATTRIBUTED_REASONS:
            counted.setdefault((zone, "", _ACTIVE, reason), 0.0)
    for g in snap.gpus:
        counted.setdefault((_GPU_ZONE, str(g.index), _ACTIVE, UNATTRIBUTED_NO_PROCESS_LIST), 0.0)
    for (zone, gpu, mode, reason), joules in sorted(counted.items()):
        _add(given_up, {"zone": zone, "gpu": gpu, "mode": mode, "reason": reason}, joules)
    yield given_up
    pending = _family("node_pending_energy_joules")
    held = {(e.zone, e.gpu, e.mode): e.joules for e in snap.pending}
    for zone in snap.attributed_zones:
        held.setdefault((zone, "", _ACTIVE), 0.0)
    for g in snap.gpus:
        held.setdefault((_GPU_ZONE, str(g.index), _ACTIVE), 0.0)
    for (zone, gpu, mode), joules in sorted(held.items()):
        _add(pending, {"zone": zone, "gpu": gpu, "mode": mode}, joules)
    yield pending
