"""Hostile sysfs values, one device at a time and many together, seen per device.

The real RAPL and hwmon sources read a writable copy of the fixture tree; a Monitor steps them
in this process on a fake clock. Each example turns some counters and sensors into NaN, a
negative number, a 25-digit number, a FIFO, a directory or a flipping (absurd) value. The
property: every faulted device shows wattprobe_device_up 0 with one more rejected reading of the
expected reason, every other device stays up with no rejection and counts exactly the joules the
fixture advanced it by, and when the values are good again every device is up again. Whether one
zone or all of a source's zones fail (RAPL and hwmon then raise SourceError with the per-device
readings), the fault shows on the device, not only on source_up.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.model.config import IdlePower
from exporter.model.health import IMPLAUSIBLE, RESET, UNREADABLE
from exporter.model.ports import PowerSource
from exporter.model.readings import CpuTimes, EnergyReading, TaskSample
from exporter.model.snapshot import Snapshot
from exporter.sources.power.hwmon import HwmonSource
from exporter.sources.power.rapl import RaplSource, discover_zones
from tests.support.fixturehost import FixtureHost, write_atomic
from tests.support.monitor import monitor_settings
from tests.support.paths import FIXTURES

STEP_J = 3.0  # joules per step on every counter, power sensors at 3 W: well inside every bound
DeviceKey = tuple[str, str, str]  # (source, zone, device)


@dataclass
class Target:
    """One hostile-able file: the counter or sensor of one device."""

    key: DeviceKey
    path: Path
    kind: str  # energy (a counter, microjoules) or power (microwatts)


class Cpu:
    name = "procfs"

    def __init__(self) -> None:
        self.busy = 100.0

    def cpu_times(self) -> CpuTimes:
        self.busy += 1.0
        return CpuTimes(self.busy, 1000.0 + self.busy, 4)

    def tasks(self) -> list[TaskSample]:
        return []


@dataclass
class Rig:
    host: FixtureHost
    monitor: Monitor
    targets: dict[str, Target]
    clock: list[float] = field(default_factory=lambda: [0.0])
    counted_from: dict[DeviceKey, float] = field(default_factory=dict)

    def advance(self, skip: Sequence[str] = ()) -> None:
        """Every good counter on by STEP_J, power sensors at STEP_J watts, one second later."""
        self.clock[0] += 1.0
        for name, t in self.targets.items():
            if name in skip:
                continue
            if t.kind == "power":
                write_atomic(t.path, f"{round(STEP_J * 1e6)}\n")
            elif t.key[0] == "rapl":
                self._add_rapl(t)
            else:
                write_atomic(t.path, f"{int(t.path.read_text()) + round(STEP_J * 1e6)}\n")

    def step(self) -> Snapshot:
        return self.monitor.step()

    def _add_rapl(self, t: Target) -> None:
        """On by STEP_J, wrapping at max_energy_range_uj like the hardware when it has a usable
        one (the file may be a FIFO here: never read it then)."""
        range_file = t.path.with_name("max_energy_range_uj")
        text = range_file.read_text().strip() if range_file.is_file() else ""
        wrap = int(text) if text.isdigit() and len(text) < 21 else 0
        value = int(t.path.read_text()) + round(STEP_J * 1e6)
        write_atomic(t.path, f"{value % wrap if wrap and value >= wrap else value}\n")


def targets_of(host: FixtureHost) -> dict[str, Target]:
    out: dict[str, Target] = {}
    zones, _dups = discover_zones(str(host.sysfs / "class" / "powercap"))
    for z in zones:
        out[f"rapl {z.device}"] = Target(
            ("rapl", z.zone, z.device), Path(z.path) / "energy_uj", "energy"
        )
    for s in HwmonSource(host.sysfs).sensors():
        out[f"hwmon {s.zone}"] = Target(("hwmon", s.zone, s.device), Path(s.path), s.kind)
    return out


def sys_only(root: Path) -> FixtureHost:
    """The fixture's sys tree alone (RAPL and hwmon read nothing else): a quick copy."""
    shutil.copytree(FIXTURES / "sys", root / "sys", symlinks=True)
    return FixtureHost(root)


def make_rig(root: Path, more: Sequence[PowerSource] = ()) -> Rig:
    return make_rig_on(sys_only(root), more)


def make_rig_on(host: FixtureHost, more: Sequence[PowerSource] = ()) -> Rig:
    clock = [0.0]
    cpu = Cpu()
    monitor = Monitor(
        MonitorParts(
            cpu=cpu,
            activity=cpu,
            power=[RaplSource(host.sysfs), HwmonSource(host.sysfs), *more],
        ),
        monitor_settings(idle_power=IdlePower(default_w=0.0)),
        clock=lambda: clock[0],
        wall_clock=lambda: clock[0],
    )
    rig = Rig(host, monitor, targets_of(host), clock)
    rig.advance()
    rig.step()  # baselines
    return rig


@contextlib.contextmanager
def rig_in_tmp() -> Iterator[Rig]:
    with tempfile.TemporaryDirectory(prefix="wattprobe-faults-") as tmp:
        rig = make_rig(Path(tmp) / "host")
        try:
            yield rig
        finally:
            rig.monitor.close()


def health(snapshot: Snapshot) -> dict[DeviceKey, tuple[bool, dict[str, int]]]:
    return {
        (d.source, d.zone, d.device): (d.meter.up, dict(d.meter.rejected)) for d in snapshot.devices
    }


def energy(snapshot: Snapshot) -> dict[DeviceKey, float]:
    return {(z.source, z.zone, z.device): z.active_j + z.idle_j for z in snapshot.node_energy}


# -- the hostile values ----------------------------------------------------------------------


def _replace(path: Path, make: Callable[[Path], None]) -> None:
    if path.is_dir():
        path.rmdir()
    else:
        path.unlink()
    make(path)


def nan(t: Target) -> None:
    write_atomic(t.path, "nan\n")


def negative(t: Target) -> None:
    write_atomic(t.path, "-5000000\n")


def overlong(t: Target) -> None:
    write_atomic(t.path, "9" * 25 + "\n")


def fifo(t: Target) -> None:
    _replace(t.path, os.mkfifo)  # opened non-blocking: refused at once, never waited on


def directory(t: Target) -> None:
    _replace(t.path, Path.mkdir)


def flip(t: Target) -> None:
    """A number the kernel could write but the device cannot draw: a counter 10^9 J on in a
    second, a sensor at 1 MW."""
    if t.kind == "power":
        write_atomic(t.path, f"{10**12}\n")
    else:
        write_atomic(t.path, f"{int(t.path.read_text()) + 10**15}\n")


FAULTS: dict[str, tuple[Callable[[Target], None], str]] = {
    "nan": (nan, UNREADABLE),
    "negative": (negative, UNREADABLE),
    "overlong": (overlong, UNREADABLE),
    "fifo": (fifo, UNREADABLE),
    "directory": (directory, UNREADABLE),
    "flip": (flip, IMPLAUSIBLE),
}


def restore(rig: Rig, t: Target, before: str) -> None:
    if t.path.is_dir():
        t.path.rmdir()
    elif not t.path.is_file():
        t.path.unlink()
    write_atomic(t.path, before)


with tempfile.TemporaryDirectory() as _probe:
    TARGETS = sorted(targets_of(sys_only(Path(_probe))))


@pytest.mark.slow
@settings(
    deadline=None,
    max_examples=12,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    st.dictionaries(
        st.sampled_from(TARGETS), st.sampled_from(sorted(FAULTS)), min_size=1, max_size=len(TARGETS)
    )
)
def test_each_hostile_value_shows_on_its_device_only(faults: dict[str, str]) -> None:
    with rig_in_tmp() as rig:
        rig.advance()
        before_snap = rig.step()
        before = health(before_snap)
        start = energy(before_snap)
        assert all(up for up, _ in before.values()), before
        saved = {name: rig.targets[name].path.read_text() for name in faults}
        for name, fault in faults.items():
            FAULTS[fault][0](rig.targets[name])
        rig.advance(skip=list(faults))
        snap = rig.step()
        after = health(snap)
        counted = energy(snap)
        faulted = {rig.targets[n].key: FAULTS[f][1] for n, f in faults.items()}
        for name, t in rig.targets.items():
            up, rejected = after[t.key]
            was = before[t.key][1]
            if t.key in faulted:
                reason = faulted[t.key]
                assert not up, (name, faults)
                assert rejected.get(reason, 0) == was.get(reason, 0) + 1, (name, rejected)
                assert counted.get(t.key, 0.0) == start.get(t.key, 0.0), name  # nothing counted
            else:
                assert up, (name, faults, after[t.key])
                assert rejected == was, (name, rejected)
                assert abs(counted[t.key] - start.get(t.key, 0.0) - STEP_J) < 1e-6, name
        for source in ("rapl", "hwmon"):
            # a source is down when it read none of its devices (an implausible value was read)
            unread = all(
                faulted.get(t.key) == UNREADABLE for t in rig.targets.values() if t.key[0] == source
            )
            up = next(s for s in snap.sources if s.source == source).up
            assert up == (not unread), source  # partly working is up; the devices say which
        # good values again: every device is up and counting
        for name in faults:
            restore(rig, rig.targets[name], saved[name])
        rig.advance()
        rig.step()
        rig.advance()
        final = rig.step()
        assert all(up for up, _ in health(final).values()), health(final)


def test_the_same_fault_every_interval_counts_every_interval(tmp_path: Path) -> None:
    """A device that stays broken counts one rejection per interval; the log says it once."""
    rig = make_rig(tmp_path / "host")
    target = rig.targets["rapl intel-rapl:0"]
    fifo(target)
    for i in range(1, 4):
        rig.advance(skip=["rapl intel-rapl:0"])
        up, rejected = health(rig.step())[target.key]
        assert not up
        assert rejected == {UNREADABLE: i}


# -- a source stuck in a read: every device it did not read is down, with a reason -------------


class Stuck:
    """A power source whose read blocks until released (a driver that hangs in read())."""

    name = "stuckmeter"

    def __init__(self) -> None:
        self.release = threading.Event()
        self.hang = False
        self.energy_uj = 10**9

    def read(self) -> list[EnergyReading]:
        if self.hang:
            self.release.wait(30)
        self.energy_uj += round(STEP_J * 1e6)
        return [
            EnergyReading("board", dev, self.name, self.energy_uj) for dev in ("meter0", "meter1")
        ]


def test_a_source_stuck_in_a_read_marks_each_of_its_devices_down(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stuck = Stuck()
    host = FixtureHost.copy_of(FIXTURES, tmp_path / "host")
    cpu = Cpu()
    monitor = Monitor(
        MonitorParts(
            cpu=cpu,
            activity=cpu,
            power=[RaplSource(host.sysfs), stuck],
        ),
        # long enough that a source that is not stuck is never late on a loaded machine
        monitor_settings(idle_power=IdlePower(default_w=0.0), read_timeout_s=2.0),
    )
    try:
        monitor.step()
        monitor.step()
        devices = {(d.source, d.device): d.meter for d in monitor.snapshot.devices}
        assert devices[stuck.name, "meter0"].up and devices[stuck.name, "meter1"].up
        stuck.hang = True
        reasons = []
        for _ in range(3):
            snap = monitor.step()
            status = next(s for s in snap.sources if s.source == stuck.name)
            reasons.append(status.reason)
            health_of = {(d.source, d.device): d.meter for d in snap.devices}
            for dev in ("meter0", "meter1"):
                assert not health_of[stuck.name, dev].up
            assert all(m.up for (src, _), m in health_of.items() if src == "rapl")
        assert reasons == ["timeout", "still busy", "still busy"]
        rejected = {
            d.device: dict(d.meter.rejected)
            for d in monitor.snapshot.devices
            if d.source == stuck.name
        }
        assert rejected == {"meter0": {UNREADABLE: 3}, "meter1": {UNREADABLE: 3}}
        said = [
            r.getMessage() for r in caplog.records if "stuckmeter board meter0" in r.getMessage()
        ]
        assert len(said) == 1 and "source timeout" in said[0], said  # once per episode
        stuck.hang = False
        stuck.release.set()
        for _ in range(3):
            snap = monitor.step()
        assert all(d.meter.up for d in snap.devices if d.source == stuck.name)
    finally:
        stuck.release.set()
        monitor.close()


@pytest.mark.parametrize("max_range", ["0\n", "nan\n", "-1\n", "9" * 25 + "\n", "fifo"])
def test_rapl_without_a_usable_max_energy_range_never_wraps(tmp_path: Path, max_range: str) -> None:
    """max_energy_range_uj 0, garbage or a FIFO: the zone is read with no known wrap, so a lower
    counter is a reset (counted as one, nothing invented), never a wrap of up to 2**64 uJ."""
    host = sys_only(tmp_path / "host")
    range_file = host.rapl_dir("intel-rapl:0") / "max_energy_range_uj"
    if max_range == "fifo":
        range_file.unlink()
        os.mkfifo(range_file)
    else:
        write_atomic(range_file, max_range)
    rig = make_rig_on(host)
    target = rig.targets["rapl intel-rapl:0"]
    rig.advance()
    start = energy(rig.step())[target.key]
    rig.advance()
    counted_before = energy(rig.step())[target.key]
    assert abs(counted_before - start - STEP_J) < 1e-6  # counts normally
    write_atomic(target.path, "1000\n")  # lower: a reset, not a wrap
    rig.advance(skip=["rapl intel-rapl:0"])
    snap = rig.step()
    up, rejected = health(snap)[target.key]
    assert not up and rejected == {RESET: 1}
    assert energy(snap)[target.key] == counted_before
    for _ in range(2):
        rig.advance()
        snap = rig.step()
    assert health(snap)[target.key][0]
    assert abs(energy(snap)[target.key] - counted_before - 2 * STEP_J) < 1e-6


def test_a_flipping_value_never_adds_energy(tmp_path: Path) -> None:
    """A counter that flips between its true value and an absurd one every interval: each absurd
    reading is rejected (device down for that interval), each true one counts, and the total
    counted is exactly what was drawn in the intervals that ended on a true reading."""
    rig = make_rig(tmp_path / "host")
    name = "rapl intel-rapl:0"
    target = rig.targets[name]
    rig.advance()
    start = energy(rig.step())[target.key]
    true_uj = int(target.path.read_text())
    for flip_no in range(1, 4):
        rig.advance(skip=[name])
        true_uj += round(STEP_J * 1e6)
        write_atomic(target.path, f"{true_uj + 10**15}\n")  # absurd
        up, rejected = health(rig.step())[target.key]
        assert not up and rejected == {IMPLAUSIBLE: flip_no}
        rig.advance(skip=[name])
        true_uj += round(STEP_J * 1e6)
        write_atomic(target.path, f"{true_uj}\n")  # true again: the gap counts once
        snap = rig.step()
        assert health(snap)[target.key] == (True, {IMPLAUSIBLE: flip_no})
        assert abs(energy(snap)[target.key] - start - 2 * STEP_J * flip_no) < 1e-6
