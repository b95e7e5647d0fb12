"""docs/metrics.md and the metric catalogue agree with what the collector emits."""

from __future__ import annotations

from pathlib import Path

from exporter.collector import SnapshotCollector
from exporter.metrics import BY_NAME, CATALOGUE, PREFIX, render_markdown
from exporter.readings import SourceStatus
from exporter.snapshot import (
    EMPTY_SNAPSHOT,
    ContainerCounters,
    Energy,
    NodeZoneEnergy,
    PodCounters,
    ProcessCounters,
    Snapshot,
)

DOC = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"


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
        }
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
            assert set(spec.labels) <= labels <= set(spec.labels) | set(spec.optional_labels), (
                name,
                labels,
            )
