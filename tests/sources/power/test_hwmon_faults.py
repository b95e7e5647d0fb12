"""hwmon chips appearing, disappearing and misbehaving under a running exporter."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.faults_support import EPS_J, CounterWatch, node_energy, source_up
from tests.support.fixturehost import FixtureHost, write_atomic
from tests.support.running import ExporterProcess, select, start_exporter

I915 = ("hwmon3", "energy1_input")
I915_DEVICE = "0000:00:02.0"
STEP_J = 5.0


@pytest.fixture
def exporter(host: FixtureHost, tmp_path: Path) -> Iterator[ExporterProcess]:
    proc = start_exporter([*host.args(), "--interval", "0.2s"], log_dir=tmp_path)
    yield proc
    proc.stop()


def hwmon_class(host: FixtureHost) -> Path:
    return host.sysfs / "class" / "hwmon"


def add_chip(host: FixtureHost, entry: str, chip: str, energy_uj: int) -> None:
    """A hot-plugged chip with one energy counter, linked into /sys/class/hwmon like sysfs does."""
    target = host.sysfs / "devices" / "platform" / chip / "hwmon" / entry
    target.mkdir(parents=True)
    (target / "name").write_text(f"{chip}\n")
    (target / "energy1_label").write_text("board\n")
    (target / "energy1_input").write_text(f"{energy_uj}\n")
    (hwmon_class(host) / entry).symlink_to(os.path.relpath(target, hwmon_class(host)))


def hwmon_zones(samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> set[str]:
    found = select(samples, "wattprobe_node_energy_joules_total", source="hwmon")
    return {dict(labels)["zone"] for labels in found}


def test_chip_appears_and_starts_from_its_first_reading(
    host: FixtureHost, exporter: ExporterProcess
) -> None:
    watch = CounterWatch(exporter)
    start = watch.next()
    assert "hotchip_board" not in hwmon_zones(start)
    add_chip(host, "hwmon9", "hotchip", energy_uj=5_000_000_000_000)  # 5 MJ already counted
    samples = watch.next()
    assert "hotchip_board" in hwmon_zones(samples)
    # the counter's history before the chip was seen is not energy of this node's lifetime
    assert node_energy(samples, "hwmon", "hwmon9") == 0.0
    for _ in range(3):
        host.add_hwmon_energy_j("hwmon9", "energy1_input", STEP_J)
        samples = watch.next()
    assert abs(node_energy(samples, "hwmon", "hwmon9") - 3 * STEP_J) < EPS_J
    assert source_up(samples, "hwmon") == (1.0, "")
    assert source_up(samples, "rapl") == (1.0, "")


def test_chip_disappears_and_comes_back(host: FixtureHost, exporter: ExporterProcess) -> None:
    watch = CounterWatch(exporter)
    start = watch.next()
    link = hwmon_class(host) / I915[0]
    target = os.readlink(link)
    counter = link.resolve() / I915[1]  # the device's own file stays while the link is gone
    host.add_hwmon_energy_j(*I915, STEP_J)
    before_gap = watch.next()
    link.unlink()
    for _ in range(3):
        # the chip draws on while unseen
        write_atomic(counter, f"{int(counter.read_text()) + round(STEP_J * 1e6)}\n")
        samples = watch.next()
        assert source_up(samples, "hwmon") == (1.0, "")  # other chips still read
        assert node_energy(samples, "hwmon", I915_DEVICE) == node_energy(
            before_gap, "hwmon", I915_DEVICE
        )
    link.symlink_to(target)
    samples = watch.next()
    # the gap's energy arrives in one plausible step when the chip is back
    counted = node_energy(samples, "hwmon", I915_DEVICE) - node_energy(start, "hwmon", I915_DEVICE)
    assert abs(counted - 4 * STEP_J) < EPS_J


def test_chip_comes_back_reset(host: FixtureHost, exporter: ExporterProcess) -> None:
    """A driver reload brings the chip back with its counter restarted: no jump, no loss after."""
    watch = CounterWatch(exporter)
    host.add_hwmon_energy_j(*I915, STEP_J)
    samples = watch.next()
    counted = node_energy(samples, "hwmon", I915_DEVICE)
    host.set_hwmon(I915[0], I915[1], 1234)
    samples = watch.next()
    assert node_energy(samples, "hwmon", I915_DEVICE) == counted
    host.add_hwmon_energy_j(*I915, STEP_J)
    samples = watch.next()
    assert abs(node_energy(samples, "hwmon", I915_DEVICE) - counted - STEP_J) < EPS_J


def test_all_chips_vanish_is_a_fault_not_absence(
    host: FixtureHost, exporter: ExporterProcess
) -> None:
    watch = CounterWatch(exporter)
    watch.next()
    saved = host.root / "hwmon-saved"
    shutil.move(hwmon_class(host), saved)
    hwmon_class(host).mkdir()
    for _ in range(2):
        samples = watch.next()
        assert source_up(samples, "hwmon") == (0.0, "vanished")
        assert source_up(samples, "rapl") == (1.0, "")
        assert source_up(samples, "procfs") == (1.0, "")
        assert exporter.get("/healthz")[0] == 200
    hwmon_class(host).rmdir()
    shutil.move(saved, hwmon_class(host))
    samples = watch.next()
    assert source_up(samples, "hwmon") == (1.0, "")


@pytest.mark.parametrize("content", ["garbage", "9" * 309, "9" * 5000])
def test_one_sensor_garbage_others_read(
    host: FixtureHost, exporter: ExporterProcess, content: str
) -> None:
    watch = CounterWatch(exporter)
    watch.next()
    host.hwmon_file(*I915).write_text(f"{content}\n")
    frozen = watch.next()
    for _ in range(2):
        samples = watch.next()
        assert source_up(samples, "hwmon") == (1.0, "")
        assert node_energy(samples, "hwmon", I915_DEVICE) == node_energy(
            frozen, "hwmon", I915_DEVICE
        )
        # the power sensors of the other chips go on integrating
        assert node_energy(samples, "hwmon", "ACPI000D:00") > node_energy(
            frozen, "hwmon", "ACPI000D:00"
        )


POWER_METER = ("hwmon1", "ACPI000D:00", "power_meter_power1")


def device_health(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float],
) -> tuple[float, float]:
    """(wattprobe_device_up, implausible readings so far) of the ACPI power meter."""
    ids = {"source": "hwmon", "device": POWER_METER[1], "zone": POWER_METER[2]}
    up = select(samples, "wattprobe_device_up", **ids)
    rejected = select(
        samples, "wattprobe_device_rejected_readings_total", reason="implausible", **ids
    )
    return next(iter(up.values())), next(iter(rejected.values()))


def test_one_absurd_power_reading_adds_no_energy(
    host: FixtureHost, exporter: ExporterProcess
) -> None:
    """Issue 15: power1_input of 18446744073709551615 uW for one interval between steady 100 W
    readings added 9.2e12 J. Now the spike counts nothing and the gap is bridged from the last
    good reading: the meter's energy is 100 W times the time that passed."""
    host.set_hwmon(POWER_METER[0], "power1_input", 100_000_000)
    watch = CounterWatch(exporter)
    before = watch.next()
    host.set_hwmon(POWER_METER[0], "power1_input", 18446744073709551615)
    spiked = watch.next()
    up, spikes = device_health(spiked)
    assert up == 0.0 and spikes >= 1  # visible at once: each read of the spike is counted
    host.set_hwmon(POWER_METER[0], "power1_input", 100_000_000)
    after = watch.next(4)
    assert device_health(after) == (1.0, spikes)
    elapsed = one_value(after, "wattprobe_last_interval_timestamp_seconds") - one_value(
        before, "wattprobe_last_interval_timestamp_seconds"
    )
    energy = node_energy(after, "hwmon", POWER_METER[1]) - node_energy(
        before, "hwmon", POWER_METER[1]
    )
    assert energy == pytest.approx(100.0 * elapsed, rel=0.1)
    assert source_up(after, "hwmon") == (1.0, "")


def one_value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str) -> float:
    (value,) = select(samples, name).values()
    return value


@pytest.mark.parametrize("digits", [309, 400, 5000])
def test_a_long_number_in_one_power_sensor_does_not_take_down_hwmon(
    host: FixtureHost, exporter: ExporterProcess, digits: int
) -> None:
    """A 309+ digit power1_input overflowed float division: the whole hwmon source was down
    with 'internal error'. Now that sensor alone gives nothing, the others measure on."""
    watch = CounterWatch(exporter)
    watch.next()
    host.hwmon_file("hwmon2", "power1_input").write_text("9" * digits + "\n")
    frozen = watch.next()
    for _ in range(2):
        host.add_hwmon_energy_j(*I915, STEP_J)
        samples = watch.next()
        assert source_up(samples, "hwmon") == (1.0, "")
        assert node_energy(samples, "hwmon", "0000:03:00.0") == node_energy(
            frozen, "hwmon", "0000:03:00.0"
        )
        assert node_energy(samples, "hwmon", "ACPI000D:00") > node_energy(
            frozen, "hwmon", "ACPI000D:00"
        )
    assert (
        abs(
            node_energy(samples, "hwmon", I915_DEVICE)
            - node_energy(frozen, "hwmon", I915_DEVICE)
            - 2 * STEP_J
        )
        < EPS_J
    )
    assert "internal error" not in exporter.log()
