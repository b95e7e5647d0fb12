"""The ledger's retention, deterministically: a key that keeps receiving energy never expires, and
one that stops is dropped only after the retention window, with its final totals handed back.
(The stateful property in test_pipeline_props.py covers this too, but only in the slow tier.)"""

from __future__ import annotations

import math

from exporter.accounting.attribution import IntervalAttribution
from exporter.accounting.ledger import CounterTable
from exporter.accounting.workloads import WorkloadLedger
from exporter.model.identity import ContainerRef

RETENTION_S = 600.0
INTERVAL_S = 5.0
ACTIVE = ("package", "", "active")


def test_a_key_that_keeps_receiving_energy_never_expires() -> None:
    table = CounterTable[str, str]()
    table.touch("steady", 0.0)  # seen once at the start, then only ever added to
    steps = int(10 * RETENTION_S / INTERVAL_S)  # ten retention windows
    for i in range(1, steps + 1):
        now = i * INTERVAL_S
        table.add("steady", "j", 1.5, now)
        assert table.expire(now, RETENTION_S) == []
        assert "steady" in table
    assert table.totals("steady") == {"j": 1.5 * steps}


def test_a_key_that_stops_is_kept_for_the_window_then_handed_back() -> None:
    table = CounterTable[str, str]()
    table.add("gone", "j", 2.0, 100.0)
    table.add("gone", "j", 3.0, 105.0)
    assert table.expire(105.0 + RETENTION_S, RETENTION_S) == []  # exactly the window: kept
    assert table.expire(105.0 + RETENTION_S + 0.001, RETENTION_S) == [("gone", {"j": 5.0})]
    assert "gone" not in table and table.totals("gone") == {}


def test_a_container_fed_only_by_attribution_keeps_its_series() -> None:
    """A container seen once in the activity owner map, then receiving energy every interval
    without being there again (a GPU process's container resolved only for the split) must not
    expire, nor its pod: its
    energy would move to the retired totals and its series would end while it is billed."""
    ref = ContainerRef("a" * 64, "pod-1")
    ledger = WorkloadLedger(with_processes=False)
    steps = int(3 * RETENTION_S / INTERVAL_S)
    for i in range(steps):
        now = i * INTERVAL_S
        ledger.add_energy(now, IntervalAttribution({ref: {ACTIVE: 2.0}}), (), {})
        # its task is in the owner map once, at the start; afterwards only its energy arrives
        ledger.add_activity(now, {}, {}, {(7, 1): ref} if i == 0 else {})
        ledger.expire(now, RETENTION_S)
    (container,) = ledger.containers(lambda r: ("ns", "pod", "c"))
    assert container.container_id == ref.container_id
    assert math.fsum(e.joules for e in container.energy) == 2.0 * steps
    (pod,) = ledger.pods(lambda uid: ("ns", "pod"))
    assert math.fsum(e.joules for e in pod.energy) == 2.0 * steps
    assert ledger.retired_containers == {}
