from __future__ import annotations

from pathlib import Path

import pytest

from exporter.readings import SourceAbsent
from exporter.sources.hwmon import HwmonSource, sensor_zone
from tests.fixturehost import FixtureHost

FIXTURE_SYS = Path(__file__).parent / "fixtures" / "sys"


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
