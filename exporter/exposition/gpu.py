"""GPU metric families from a Snapshot (wattprobe_gpu_*, wattprobe_container_gpu_*).

Families without samples are left out, so a node without GPUs shows no GPU metrics at all.
A lost GPU keeps wattprobe_gpu_info, wattprobe_gpu_lost (1), its energy and XID counters; its
gauges disappear rather than show stale values.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import Metric

from exporter.exposition.metrics import CATALOGUE, PREFIX
from exporter.model.gpu_readings import GpuReading
from exporter.model.gpu_snapshot import GpuCounters
from exporter.model.snapshot import Snapshot

# nvmlClocksEventReason* bits -> the reason label of wattprobe_gpu_clock_event_active
CLOCK_EVENT_REASONS = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)


class _Families:
    def __init__(self) -> None:
        self.by_name = {
            spec.name: Metric(PREFIX + spec.name, spec.help, spec.kind)
            for spec in CATALOGUE
            if spec.section == "GPUs"
        }

    def add(self, name: str, labels: Mapping[str, str], value: float) -> None:
        metric = self.by_name[name]
        suffix = "_total" if metric.type == "counter" else ""
        metric.add_sample(metric.name + suffix, dict(labels), value)

    def maybe(self, name: str, labels: Mapping[str, str], value: float | None) -> None:
        if value is not None:
            self.add(name, labels, value)

    def nonempty(self) -> Iterator[Metric]:
        return (m for m in self.by_name.values() if m.samples)


def gpu_families(snap: Snapshot, *, containers: bool = True) -> Iterator[Metric]:
    """containers: serve the per-container GPU memory of pods' containers too
    (--collector.container)."""
    if not snap.gpus and not snap.gpu_container_memory:
        return
    out = _Families()
    for gpu in snap.gpus:
        _gpu(out, gpu)
    for m in snap.gpu_container_memory:
        if m.pod_uid and not containers:
            continue
        labels = {
            "gpu": m.gpu,
            "container_id": m.container_id,
            "container": m.container,
            "pod": m.pod,
            "namespace": m.namespace,
            "pod_uid": m.pod_uid,
        }
        out.add("container_gpu_memory_used_bytes", labels, m.used_bytes)
    yield from out.nonempty()


def _gpu(out: _Families, gpu: GpuCounters) -> None:
    ids = {"gpu": str(gpu.index), "uuid": gpu.uuid}
    info = {
        **ids,
        "model": gpu.model,
        "pci_bus_id": gpu.pci_bus_id,
        "driver_version": gpu.driver_version,
        "cuda_version": gpu.cuda_version,
        "mig_mode": gpu.mig_mode,
        "vendor": gpu.vendor,
    }
    out.add("gpu_info", info, 1)
    out.add("gpu_lost", ids, 1 if gpu.lost else 0)
    for e in gpu.energy:
        out.add("gpu_energy_joules", {**ids, "mode": e.mode, "source": e.source}, e.joules)
    for method, intervals in gpu.attribution:
        out.add("gpu_attribution_intervals", {**ids, "method": method}, intervals)
    for xid, count in gpu.xid_errors:
        out.add("gpu_xid_errors", {**ids, "xid": str(xid)}, count)
    if gpu.reading is not None and not gpu.reading.lost:
        _gauges(out, ids, gpu.reading)


def _gauges(out: _Families, ids: Mapping[str, str], r: GpuReading) -> None:
    out.maybe("gpu_utilization_ratio", ids, r.utilization_ratio)
    out.maybe("gpu_memory_utilization_ratio", ids, r.memory_utilization_ratio)
    out.maybe("gpu_memory_used_bytes", ids, r.memory_used_bytes)
    out.maybe("gpu_memory_total_bytes", ids, r.memory_total_bytes)
    out.maybe("gpu_memory_reserved_bytes", ids, r.memory_reserved_bytes)
    out.maybe("gpu_temperature_celsius", ids, r.temperature_c)
    out.maybe("gpu_power_watts", ids, r.power_w)
    out.maybe("gpu_power_limit_watts", ids, r.power_limit_w)
    out.maybe("gpu_clock_hertz", {**ids, "clock": "sm"}, r.sm_clock_hz)
    out.maybe("gpu_clock_hertz", {**ids, "clock": "memory"}, r.memory_clock_hz)
    if r.clock_event_reasons is not None:
        for bit, reason in CLOCK_EVENT_REASONS:
            active = 1 if r.clock_event_reasons & bit else 0
            out.add("gpu_clock_event_active", {**ids, "reason": reason}, active)
    out.maybe("gpu_pcie_replays", ids, r.pcie_replays)
    out.maybe("gpu_ecc_errors", {**ids, "type": "corrected"}, r.ecc_corrected)
    out.maybe("gpu_ecc_errors", {**ids, "type": "uncorrected"}, r.ecc_uncorrected)
    out.add("gpu_processes", ids, len(r.processes))
    shares = {str(i.gpu_instance): i.slice_ratio for i in r.mig_instances}
    for gpu_instance, share in sorted(shares.items()):
        # one per GPU instance, however many compute instances it is split into
        out.maybe("gpu_mig_slice_ratio", {**ids, "gpu_instance": gpu_instance}, share)
    for inst in r.mig_instances:
        mig = {
            **ids,
            "gpu_instance": str(inst.gpu_instance),
            "compute_instance": str(inst.compute_instance),
        }
        out.add("gpu_mig_info", {**mig, "mig_uuid": inst.uuid, "profile": inst.profile}, 1)
        out.maybe("gpu_memory_used_bytes", mig, inst.memory_used_bytes)
        out.maybe("gpu_memory_total_bytes", mig, inst.memory_total_bytes)
