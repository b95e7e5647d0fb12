"""docs/metrics.md and the metric catalogue agree with what the collector emits."""

from __future__ import annotations

from pathlib import Path

from exporter.exposition.collector import SnapshotCollector
from exporter.exposition.metrics import BY_NAME, CATALOGUE, POD_LABEL, PREFIX, render_markdown
from exporter.model.gpu_readings import GpuProcess, GpuReading, MigInstanceReading
from exporter.model.gpu_snapshot import ContainerGpuMemory, GpuCounters, GpuEnergy
from exporter.model.readings import MapStats, SourceStatus
from exporter.model.snapshot import (
    EMPTY_SNAPSHOT,
    ContainerCounters,
    Energy,
    EstimateInfo,
    GpuAllocation,
    NodeZoneEnergy,
    PodCounters,
    PodInfo,
    ProcessCounters,
    Snapshot,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def rich_snapshot() -> Snapshot:
    """A snapshot with every kind of data filled in, so every family is emitted."""
    energy = (Energy("package", "", "active", 1.0), Energy("gpu", "0", "active", 2.0))
    return Snapshot(
        **{
            **EMPTY_SNAPSHOT.__dict__,
            "sequence": 3,
            "ready": True,
            "cpu_usage_ratio": 0.5,
            "node_energy": (NodeZoneEnergy("package", "intel-rapl:0", "rapl", 1.0, 2.0),),
            "containers": (
                ContainerCounters(
                    "a" * 64, "uid", "app", "pod", "ns", energy, 3.0, (("nvidia", 4),)
                ),
            ),
            "pods": (PodCounters("uid", "pod", "ns", energy),),
            "processes": (ProcessCounters((10, 1), 10, "app", "a" * 64, "uid", "app", energy),),
            "sources": (SourceStatus("rapl", True), SourceStatus("hwmon", False, "absent")),
            "gpus": (rich_gpu(),),
            "ebpf_maps": (MapStats("tasks", 10, 32768, 0, 0),),
            "gpu_container_memory": (
                ContainerGpuMemory("0", "GPU-1", "a" * 64, "app", "pod", "ns", 2**30, "uid"),
            ),
            "pod_info": (PodInfo("uid", "pod", "ns", (("team", "a"),)),),
            "estimate": EstimateInfo("Intel Xeon Platinum 8175M", "m5.xlarge", "instance"),
            "gpu_allocations": (GpuAllocation("0", "GPU-1", "1", "MIG-1", "ns", "pod", "app"),),
            "cdi_rejections": (("invalid", 1),),
        }
    )


def rich_gpu() -> GpuCounters:
    mig = MigInstanceReading(
        "MIG-1", "NVIDIA A100 MIG 3g.20gb", 1, 0, 2**30, 20 * 2**30, (GpuProcess(10, 2**30),)
    )
    reading = GpuReading(
        index=0,
        uuid="GPU-1",
        name="NVIDIA A100",
        pci_bus_id="00000000:17:00.0",
        mig_enabled=True,
        utilization_ratio=0.5,
        memory_utilization_ratio=0.25,
        memory_used_bytes=2**30,
        memory_total_bytes=40 * 2**30,
        memory_reserved_bytes=2**20,
        temperature_c=50.0,
        power_w=200.0,
        power_limit_w=400.0,
        energy_mj=10**6,
        sm_clock_hz=1.4e9,
        memory_clock_hz=1.2e9,
        clock_event_reasons=0x4,
        pcie_replays=0,
        ecc_corrected=0,
        ecc_uncorrected=0,
        processes=(GpuProcess(10, 2**30),),
        mig_instances=(mig,),
    )
    return GpuCounters(
        index=0,
        uuid="GPU-1",
        model="NVIDIA A100",
        pci_bus_id="00000000:17:00.0",
        driver_version="560.35",
        cuda_version="12.6",
        mig_mode="enabled",
        lost=False,
        reading=reading,
        energy=(GpuEnergy("nvml_energy", "active", 5.0),),
        attribution=(("mig_memory", 3),),
        xid_errors=((79, 1),),
    )


def test_docs_are_generated_from_the_catalogue() -> None:
    assert DOC.read_text() == render_markdown(), "docs/metrics.md is stale: run `make docs`"


def test_every_emitted_family_is_catalogued_with_its_labels() -> None:
    emitted = {m.name.removeprefix(PREFIX): m for m in SnapshotCollector(rich_snapshot).collect()}
    assert set(emitted) == {s.name for s in CATALOGUE}, "catalogue and collector differ"
    for name, family in emitted.items():
        spec = BY_NAME[name]
        assert family.type == spec.kind
        for sample in family.samples:
            assert sample.name == spec.exposed_name
            labels = set(sample.labels)
            if POD_LABEL in spec.optional_labels:  # the allow-listed pod labels
                labels = {n for n in labels if not n.startswith("label_")} | {POD_LABEL}
            assert set(spec.labels) <= labels <= set(spec.labels) | set(spec.optional_labels), (
                name,
                labels,
            )
