"""The ledger's retention, deterministically: a key that keeps receiving energy never expires, and
one that stops is dropped only after the retention window, with its final totals handed back.
(The stateful property in test_pipeline_props.py covers this too, but only in the slow tier.)"""

from __future__ import annotations

import math
import re

import pytest

from exporter.accounting.attribution import IntervalAttribution
from exporter.accounting.ledger import CounterTable, add_into
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


def test_a_counter_only_grows_and_a_touched_key_lives_with_nothing_added() -> None:
    table = CounterTable[str, str]()
    with pytest.raises(ValueError, match="^" + re.escape("negative increment -1.0 for 'k'") + "$"):
        table.add("k", "j", -1.0, 0.0)
    table.add("k", "j", 0.0, 0.0)  # zero is an amount
    table.touch("idle-container", 0.0)
    assert len(table) == 2 and "idle-container" in table and "other" not in table
    assert table.totals("idle-container") == {} and table.totals("other") == {}
    table.add_all("k", {"j": 1.0, "i": 2.0}, 5.0)
    assert dict(table.items()) == {"k": {"j": 1.0, "i": 2.0}, "idle-container": {}}
    assert table.expire(RETENTION_S + 1.0, RETENTION_S) == [("idle-container", {})]
    assert table.drop("k") == {"j": 1.0, "i": 2.0} and len(table) == 0
    assert table.drop("k") == {}  # dropping twice is harmless
    assert table.expire(10 * RETENTION_S, RETENTION_S) == []  # a dropped key is not seen


def test_add_into_sums_per_series() -> None:
    target = {"a": 1.0}
    add_into(target, {"a": 2.0, "b": 3.0})
    assert target == {"a": 3.0, "b": 3.0}
