"""`top`'s numbers: scrapes from text and from a Snapshot agree; power = energy increase / time."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from exporter.app.top.frame import (
    Frame,
    SortKey,
    View,
    cpu_zone_kinds,
    display_name,
    frame_between,
    sort_rows,
)
from exporter.app.top.scrape import Scrape, WorkloadId, from_snapshot, from_text
from exporter.exposition.collector import SnapshotCollector
from exporter.model.readings import SourceStatus
from exporter.model.snapshot import NodeZoneEnergy, Snapshot
from tests.app.top.snapshots import container, gpu, snapshot

POD_UID = "5f1c3e2a-8b4d-4c6e-9f0a-1b2c3d4e5f60"


def exposition(snap: Snapshot) -> str:
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(lambda: snap))
    return generate_latest(registry).decode()


def two_snapshots() -> tuple[Snapshot, Snapshot]:
    """2 s apart: package +40 J active +10 J idle on socket 0, +20 J on socket 1; core +30 J."""
    before = snapshot(
        3,
        1000.0,
        node=(
            NodeZoneEnergy("package", "intel-rapl:0", "rapl", 100.0, 50.0),
            NodeZoneEnergy("package", "intel-rapl:1", "rapl", 80.0, 40.0),
            NodeZoneEnergy("core", "intel-rapl:0:0", "rapl", 60.0, 0.0),
        ),
        containers=(
            container(1, {("package", ""): 10.0, ("dram", ""): 1.0}, 5.0, pod_uid=POD_UID),
            container(2, {("package", ""): 4.0, ("gpu", "0"): 100.0}, 2.0, pod_uid=POD_UID),
            container(3, {("package", ""): 1.0}, 1.0, name="system_processes"),
        ),
        gpus=(gpu(0, 500.0), gpu(1, 200.0)),
    )
    after = snapshot(
        5,
        1002.0,
        node=(
            NodeZoneEnergy("package", "intel-rapl:0", "rapl", 140.0, 60.0),
            NodeZoneEnergy("package", "intel-rapl:1", "rapl", 100.0, 40.0),
            NodeZoneEnergy("core", "intel-rapl:0:0", "rapl", 90.0, 0.0),
        ),
        containers=(
            container(1, {("package", ""): 40.0, ("dram", ""): 3.0}, 8.0, pod_uid=POD_UID),
            container(2, {("package", ""): 10.0, ("gpu", "0"): 700.0}, 3.0, pod_uid=POD_UID),
            container(3, {("package", ""): 5.0}, 1.5, name="system_processes"),
            # started between the two: all of its counter is new
            container(4, {("package", ""): 6.0, ("gpu", "1"): 50.0}, 0.5, name="kernel_processes"),
        ),
        gpus=(gpu(0, 1100.0), gpu(1, 400.0)),
    )
    return before, after


def frame_of(before: Scrape, after: Scrape) -> Frame:
    frame = frame_between(before, after)
    assert frame is not None
    return frame


def test_text_and_snapshot_give_the_same_scrape() -> None:
    for snap in two_snapshots():
        from_text_ = from_text(exposition(snap), 1.0)
        from_snap = from_snapshot(snap, 1.0)
        assert from_text_ == from_snap
        assert from_snap.at == snap.timestamp
        assert from_snap.intervals == snap.sequence


def test_power_is_the_energy_increase_over_the_time_between_intervals() -> None:
    before, after = (from_snapshot(s, 0.0) for s in two_snapshots())
    frame = frame_of(before, after)
    assert frame.seconds == 2.0
    zones = {(z.zone, z.source): z for z in frame.zones}
    package = zones[("package", "rapl")]
    # (40 + 10) + (20 + 0) joules over 2 s, from two devices
    assert package.watts == pytest.approx(35.0)
    assert package.idle_watts == pytest.approx(5.0)
    assert package.devices == 2
    assert zones[("core", "rapl")].watts == pytest.approx(15.0)
    rows = {r.workload.container_id[:2]: r for r in frame.containers}
    assert rows["01"].cpu_w == pytest.approx((30.0 + 2.0) / 2)  # package + dram
    assert rows["01"].cpu_cores == pytest.approx(1.5)
    assert rows["02"].gpu_w == pytest.approx(300.0)
    assert rows["02"].gpus == ("0",)
    assert rows["04"].cpu_w == pytest.approx(3.0)  # new since the first scrape
    assert rows["04"].gpu_w == pytest.approx(25.0)
    pods = {r.name: r for r in frame.pods}
    pod = pods["pod 5f1c3e2a"]
    assert pod.cpu_w == pytest.approx(rows["01"].cpu_w + rows["02"].cpu_w)
    assert pod.gpu_w == pytest.approx(300.0)
    assert pod.cpu_cores == pytest.approx(2.0)
    # pseudo-containers are rows of the pod view too, so the view accounts for all energy
    assert pods["system_processes"].cpu_w == pytest.approx(2.0)
    assert sum(r.cpu_w for r in frame.pods) == pytest.approx(sum(r.cpu_w for r in frame.containers))
    assert [g.energy_j for g in frame.gpus] == [1100.0, 400.0]


def test_no_frame_until_an_interval_ends_and_after_a_restart() -> None:
    before, after = (from_snapshot(s, 0.0) for s in two_snapshots())
    assert frame_between(after, after) is None
    assert frame_between(after, before) is None  # counters went back: the exporter restarted


def test_without_the_timestamp_metric_the_reader_clock_is_used() -> None:
    before, after = (from_text(exposition(s), 0.0) for s in two_snapshots())
    strip = "wattprobe_last_interval_timestamp_seconds"
    old_before = from_text(
        "\n".join(line for line in exposition(two_snapshots()[0]).splitlines() if strip not in line)
        + "\n",
        10.0,
    )
    old_after = from_text(
        "\n".join(line for line in exposition(two_snapshots()[1]).splitlines() if strip not in line)
        + "\n",
        14.0,
    )
    assert old_after.at is None
    assert frame_of(old_before, old_after).seconds == 4.0
    assert frame_of(before, after).seconds == 2.0


def test_cpu_power_adds_only_zones_that_do_not_overlap() -> None:
    assert cpu_zone_kinds({"package": 1.0, "dram": 1.0, "core": 1.0, "uncore": 1.0}) == (
        "dram",
        "package",
    )
    assert cpu_zone_kinds({"psys": 3.0}) == ("psys",)
    # hwmon sensors may overlap (a board total and a rail): only the largest counts
    assert cpu_zone_kinds({"power_meter_power1": 9.0, "amdgpu_ppt": 2.0}) == ("power_meter_power1",)
    assert cpu_zone_kinds({}) == ()


def test_sorting() -> None:
    before, after = (from_snapshot(s, 0.0) for s in two_snapshots())
    rows = frame_of(before, after).rows(View.CONTAINERS)
    by_cpu = [r.workload.container_id[:2] for r in sort_rows(rows, SortKey.CPU)]
    by_gpu = [r.workload.container_id[:2] for r in sort_rows(rows, SortKey.GPU)]
    by_name = [r.name for r in sort_rows(rows, SortKey.NAME)]
    assert by_cpu == ["01", "04", "02", "03"]  # 04 and 02 tie at 3 W: by name
    assert by_gpu[:2] == ["02", "04"]
    assert by_name == sorted(by_name)


def test_display_names() -> None:
    named = WorkloadId("ab" * 32, POD_UID, "app", "web-7d9f", "shop")
    anonymous = WorkloadId("ab" * 32, POD_UID, "", "", "")
    assert display_name(named, pod_row=True) == "web-7d9f"
    assert display_name(named, pod_row=False) == "web-7d9f/app"
    assert display_name(anonymous, pod_row=True) == "pod 5f1c3e2a"
    assert display_name(anonymous, pod_row=False) == "pod 5f1c3e2a/abababababab"
    outside = WorkloadId("cd" * 32, "", "", "", "")
    assert display_name(outside, pod_row=True) == "container cdcdcdcdcdcd"


def test_sources_come_through() -> None:
    snap = snapshot(
        2,
        5.0,
        sources=(
            SourceStatus("rapl", False, "permission denied"),
            SourceStatus("nvml", False, "absent"),
        ),
    )
    scrape = from_text(exposition(snap), 0.0)
    assert {(s.source, s.up, s.reason) for s in scrape.sources} == {
        ("rapl", False, "permission denied"),
        ("nvml", False, "absent"),
    }
