"""CDI spec rejections reach /metrics from the snapshot, by reason (issue 41)."""

from __future__ import annotations

import dataclasses

from exporter.exposition.collector import SnapshotCollector
from exporter.model.snapshot import EMPTY_SNAPSHOT


def _samples(snapshot: object) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    collector = SnapshotCollector(lambda: snapshot)  # type: ignore[arg-type,return-value]
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in collector.collect()
        for s in family.samples
    }


def test_rejections_are_a_counter_per_reason() -> None:
    snap = dataclasses.replace(EMPTY_SNAPSHOT, cdi_rejections=(("invalid", 2), ("not_a_file", 1)))
    got = _samples(snap)
    name = "wattprobe_cdi_spec_rejections_total"
    assert got[(name, (("reason", "invalid"),))] == 2
    assert got[(name, (("reason", "not_a_file"),))] == 1


def test_absent_until_a_spec_is_refused() -> None:
    assert not any(n.startswith("wattprobe_cdi_") for n, _ in _samples(EMPTY_SNAPSHOT))
