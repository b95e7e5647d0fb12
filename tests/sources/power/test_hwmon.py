from __future__ import annotations

from pathlib import Path

import pytest

from exporter.model.readings import SourceAbsent
from exporter.sources.power.hwmon import HwmonSource, sensor_zone
from tests.support.fixturehost import FixtureHost
from tests.support.paths import FIXTURES

FIXTURE_SYS = FIXTURES / "sys"


def test_reads_power_and_energy_sensors_and_skips_temperature_chips() -> None:
    readings = {r.zone: r for r in HwmonSource(FIXTURE_SYS).read()}
    assert set(readings) == {"power_meter_power1", "amdgpu_ppt", "i915_energy1"}
    meter = readings["power_meter_power1"]
    assert (meter.device, meter.energy_uj) == ("ACPI000D:00", None)
    assert meter.power_w == pytest.approx(245.0)
    assert readings["amdgpu_ppt"].power_w == pytest.approx(35.0)
    assert readings["amdgpu_ppt"].device == "0000:03:00.0"
    i915 = readings["i915_energy1"]
    assert (i915.energy_uj, i915.power_w, i915.source) == (5123456789, None, "hwmon")


def test_input_wins_over_average(host: FixtureHost) -> None:
    host.set_hwmon("hwmon1", "power1_input", 100_000_000)
    readings = {r.zone: r for r in HwmonSource(host.sysfs).read()}
    assert readings["power_meter_power1"].power_w == pytest.approx(100.0)


def test_chips_appear_and_disappear(host: FixtureHost) -> None:
    (host.sysfs / "class" / "hwmon" / "hwmon2").unlink()
    assert "amdgpu_ppt" not in {r.zone for r in HwmonSource(host.sysfs).read()}


def test_no_sensors_is_absent(tmp_path: Path) -> None:
    with pytest.raises(SourceAbsent):
        HwmonSource(tmp_path).read()


def test_sensor_zone_names_are_label_safe() -> None:
    assert sensor_zone("ina3221", "VDD IN (board)") == "ina3221_vdd_in_board"


def test_max_power_from_the_sensors_own_limits(host: FixtureHost) -> None:
    readings = {r.zone: r for r in HwmonSource(host.sysfs).read()}
    assert readings["amdgpu_ppt"].max_power_w == pytest.approx(203.0)  # its power1_cap
    assert readings["power_meter_power1"].max_power_w is None  # no limit files: generic bound
    host.set_hwmon("hwmon2", "power1_max", 80_000_000)
    host.set_hwmon("hwmon2", "power1_crit", 300_000_000)
    readings = {r.zone: r for r in HwmonSource(host.sysfs).read()}
    assert readings["amdgpu_ppt"].max_power_w == pytest.approx(300.0)  # the largest sane one


@pytest.mark.parametrize("value", ["0", "-1", "garbage", "9" * 400, str(10**12)])
def test_insane_limits_are_ignored(host: FixtureHost, value: str) -> None:
    host.hwmon_file("hwmon2", "power1_cap").write_text(f"{value}\n")
    readings = {r.zone: r for r in HwmonSource(host.sysfs).read()}
    assert readings["amdgpu_ppt"].max_power_w is None
    assert readings["amdgpu_ppt"].power_w == pytest.approx(35.0)


def test_energy_sensor_takes_the_limit_of_its_power_label(host: FixtureHost) -> None:
    host.set_hwmon("hwmon3", "power1_input", 20_000_000)
    host.set_hwmon("hwmon3", "power1_crit", 90_000_000)
    readings = {r.zone: r for r in HwmonSource(host.sysfs).read()}
    # the rail's counter wins over its power reading, and carries its bound
    assert readings["i915_energy1"].energy_uj == 5123456789
    assert readings["i915_energy1"].max_power_w is None  # labels differ: energy1 vs power1
    host.hwmon_file("hwmon3", "energy1_label").write_text("card\n")
    host.hwmon_file("hwmon3", "power1_label").write_text("card\n")
    readings = {r.zone: r for r in HwmonSource(host.sysfs).read()}
    assert set(readings) >= {"i915_card"} and "i915_power1" not in readings
    assert readings["i915_card"].max_power_w == pytest.approx(90.0)


@pytest.mark.parametrize(
    ("content", "fault"),
    [
        ("garbage\n", "garbage"),
        ("18446744073709551615\n", ""),  # a u64: a number (the monitor's gate judges it)
        ("9" * 21 + "\n", "out of range"),
        ("9" * 309 + "\n", "out of range"),  # overflowed float division: 'internal error'
        ("9" * 4301 + "\n", "out of range"),  # past int()'s digit limit
        ("-7\n", "out of range"),
    ],
)
def test_one_bad_sensor_is_a_faulted_reading_and_the_others_read_on(
    host: FixtureHost, content: str, fault: str
) -> None:
    host.hwmon_file("hwmon2", "power1_input").write_text(content)
    readings = {r.zone: r for r in HwmonSource(host.sysfs).read()}
    bad = readings["amdgpu_ppt"]
    assert bad.fault == fault
    assert (bad.power_w is None) == bool(fault)
    assert bad.max_power_w == pytest.approx(203.0)  # the bound is known even when the value is not
    assert readings["power_meter_power1"].power_w == pytest.approx(245.0)
    assert readings["i915_energy1"].energy_uj == 5123456789


def test_a_rail_with_a_counter_and_a_power_reading_is_read_once(host: FixtureHost) -> None:
    """One reading per rail: a power input that shares its label with an energy counter is
    skipped, else the rail's energy would count twice on the node. Counted in the list of
    readings itself (a dict keyed by zone would hide the second one)."""
    host.set_hwmon("hwmon3", "power1_input", 20_000_000)
    host.hwmon_file("hwmon3", "energy1_label").write_text("card\n")
    host.hwmon_file("hwmon3", "power1_label").write_text("card\n")
    readings = HwmonSource(host.sysfs).read()
    zones = [r.zone for r in readings]
    assert zones.count("i915_card") == 1
    assert len(zones) == len(set(zones))  # no rail of any chip twice
    (card,) = [r for r in readings if r.zone == "i915_card"]
    assert (card.energy_uj, card.power_w) == (5123456789, None)  # the counter, not the reading
