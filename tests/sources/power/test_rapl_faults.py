"""RAPL faults against a running exporter: unreadable, vanishing, garbage and reset counters.

Each fault: the exporter keeps serving; wattprobe_source_up{source="rapl"} is 0 with a reason
when every zone fails (1 when only some do); hwmon and procfs go on unaffected; the source
recovers by itself; no counter goes back; and the joules counted add up exactly to the energy
the fixture counters advanced by (a reset loses at most the interval it happened in).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter.sources.power.rapl import RAPL_MAX_POWER_W, RaplSource
from tests.support.faults_support import EPS_J, CounterWatch, node_energy, source_up
from tests.support.fixturehost import FixtureHost
from tests.support.paths import FIXTURES
from tests.support.realparts import require_binary, require_root
from tests.support.running import REPO, ExporterProcess, Samples, select, start_exporter

INTERVAL = "0.2s"
STEP_J = 7.5  # energy added to every zone per step: ~37 W at 0.2 s, well inside the limit
HWMON_ENERGY = ("hwmon3", "energy1_input")  # the i915 energy counter: a second, healthy source
HWMON_DEVICE = "0000:00:02.0"

Fault = Callable[[FixtureHost, str], None]


def rapl_devices(host: FixtureHost) -> list[str]:
    """MSR zones whose counters the exporter reads (the MMIO duplicate is left out)."""
    powercap = host.sysfs / "class" / "powercap"
    return sorted(
        d.name
        for d in powercap.iterdir()
        if ":" in d.name and "mmio" not in d.name and (d / "energy_uj").exists()
    )


def all_zone_devices(host: FixtureHost) -> list[str]:
    """Every zone with a counter, the MMIO duplicate included: "every zone fails" means all."""
    powercap = host.sysfs / "class" / "powercap"
    return sorted(d.name for d in powercap.iterdir() if (d / "energy_uj").exists())


class Run:
    """An exporter on a fixture host, with the energy each zone was advanced by since start."""

    def __init__(self, host: FixtureHost, exporter: ExporterProcess) -> None:
        self.host = host
        self.exporter = exporter
        self.watch = CounterWatch(exporter)
        self.devices = rapl_devices(host)
        self.added = dict.fromkeys(self.devices, 0.0)
        self.hwmon_added = 0.0
        self.start = self.watch.next()  # every zone has its baseline now

    def advance(self, devices: list[str] | None = None, joules: float = STEP_J) -> None:
        for device in devices if devices is not None else self.devices:
            self.host.add_energy_j(device, joules)
            self.added[device] += joules
        self.host.add_hwmon_energy_j(*HWMON_ENERGY, joules)
        self.hwmon_added += joules

    def counted(self, samples: Samples, device: str) -> float:
        return node_energy(samples, "rapl", device) - node_energy(self.start, "rapl", device)

    def hwmon_counted(self, samples: Samples) -> float:
        return node_energy(samples, "hwmon", HWMON_DEVICE) - node_energy(
            self.start, "hwmon", HWMON_DEVICE
        )


@pytest.fixture
def run(host: FixtureHost, tmp_path: Path) -> Iterator[Run]:
    exporter = start_exporter([*host.args(), "--interval", INTERVAL], log_dir=tmp_path)
    try:
        yield Run(host, exporter)
    finally:
        exporter.stop()


def garbage(host: FixtureHost, device: str) -> None:
    (host.rapl_dir(device) / "energy_uj").write_text("not a number\n")


def empty(host: FixtureHost, device: str) -> None:
    (host.rapl_dir(device) / "energy_uj").write_text("")


def negative(host: FixtureHost, device: str) -> None:
    (host.rapl_dir(device) / "energy_uj").write_text("-5\n")


def huge(host: FixtureHost, device: str) -> None:
    # past int()'s 4300-digit limit: no kernel writes this, and it must not raise past the source
    (host.rapl_dir(device) / "energy_uj").write_text("9" * 5000 + "\n")


def vanish(host: FixtureHost, device: str) -> None:
    (host.rapl_dir(device) / "energy_uj").unlink()


def directory(host: FixtureHost, device: str) -> None:
    path = host.rapl_dir(device) / "energy_uj"
    path.unlink()
    path.mkdir()


def fifo(host: FixtureHost, device: str) -> None:
    path = host.rapl_dir(device) / "energy_uj"
    path.unlink()
    os.mkfifo(path)  # refused at once (not a regular file), never waited on


def _restore(host: FixtureHost, device: str, value_uj: int) -> None:
    path = host.rapl_dir(device) / "energy_uj"
    if path.is_dir():
        path.rmdir()
    elif os.path.lexists(path) and not path.is_file():
        path.unlink()
    host.set_energy_uj(device, value_uj)


FAULTS: dict[str, tuple[Fault, str]] = {
    "garbage": (garbage, "unparsable value"),
    "empty": (empty, "unparsable value"),
    "negative": (negative, "unparsable value"),
    "vanished": (vanish, "vanished"),
    "huge": (huge, "unparsable value"),
    "directory": (directory, "not a regular file"),
    "fifo": (fifo, "not a regular file"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_zone_fails_then_recovers(run: Run, fault: str) -> None:
    inject, reason = FAULTS[fault]
    for _ in range(2):
        run.advance()
        run.watch.next()
    every = all_zone_devices(run.host)
    before = {d: run.host.energy_uj(d) for d in every}
    frozen = run.watch.next()
    for device in every:
        inject(run.host, device)
    for _ in range(3):
        run.host.add_hwmon_energy_j(*HWMON_ENERGY, STEP_J)
        run.hwmon_added += STEP_J
        samples = run.watch.next()
        assert source_up(samples, "rapl") == (0.0, reason)
        # and on each zone: down, its rejections counted
        rapl_up = select(samples, "wattprobe_device_up", source="rapl")
        assert len(rapl_up) == len(run.devices) and set(rapl_up.values()) == {0.0}, rapl_up
        assert source_up(samples, "hwmon") == (1.0, "")
        assert source_up(samples, "procfs") == (1.0, "")
        for device in run.devices:  # frozen, not zeroed, not gone
            assert node_energy(samples, "rapl", device) == node_energy(frozen, "rapl", device)
        assert abs(run.hwmon_counted(samples) - run.hwmon_added) < EPS_J
        assert run.exporter.get("/healthz")[0] == 200
    # the counters come back having moved on by what was drawn during the gap
    for device in every:
        _restore(run.host, device, before[device])
    run.advance()
    samples = run.watch.next(3)
    assert source_up(samples, "rapl") == (1.0, "")
    for _ in range(2):
        run.advance()
        samples = run.watch.next()
    for device in run.devices:
        assert abs(run.counted(samples, device) - run.added[device]) < EPS_J, device
    assert run.exporter.proc.poll() is None


@pytest.mark.parametrize("fault", ["garbage", "vanished", "huge"])
def test_one_zone_fails_the_rest_count_on(run: Run, fault: str) -> None:
    inject, _reason = FAULTS[fault]
    broken = "intel-rapl:0"
    healthy = [d for d in run.devices if d != broken]
    before = run.host.energy_uj(broken)
    frozen = run.watch.next()
    inject(run.host, broken)
    for _ in range(3):
        run.advance(healthy)
        samples = run.watch.next()
        assert source_up(samples, "rapl") == (1.0, "")  # partly working is up
        assert node_energy(samples, "rapl", broken) == node_energy(frozen, "rapl", broken)
        for device in healthy:
            assert abs(run.counted(samples, device) - run.added[device]) < EPS_J, device
    _restore(run.host, broken, before)
    run.advance()
    samples = run.watch.next(3)
    for device in run.devices:
        assert abs(run.counted(samples, device) - run.added[device]) < EPS_J, device


def test_reset_without_wrap_is_not_a_jump(run: Run) -> None:
    """A driver reload restarts energy_uj near zero, far below max_energy_range_uj.

    Read as a wrap, that would be ~max_energy_range (hundreds of kJ) in one interval; the
    plausibility bound rejects it, the interval is dropped for that zone, counting resumes.
    """
    device = "intel-rapl:0"
    run.advance()
    samples = run.watch.next()
    counted_before = run.counted(samples, device)
    run.host.set_energy_uj(device, 1_000)  # reset: lower, and no wrap could explain it
    samples = run.watch.next()
    assert source_up(samples, "rapl") == (1.0, "")
    assert run.counted(samples, device) == counted_before  # nothing counted for the reset
    for _ in range(3):
        run.advance()
        samples = run.watch.next()
    # after the reset interval, every joule counts again, exactly
    counted_after = run.counted(samples, device) - counted_before
    assert abs(counted_after - 3 * STEP_J) < EPS_J
    assert "counter reset" in run.exporter.log()


def test_real_wrap_is_counted(run: Run) -> None:
    """intel-rapl:1:1 starts 1.5 J below its max_energy_range_uj: each step wraps it once."""
    device = "intel-rapl:1:1"
    for _ in range(3):
        run.advance([device], joules=2.0)
        samples = run.watch.next()
    assert abs(run.counted(samples, device) - 6.0) < EPS_J


# -- EACCES: a real permission error, from an exporter that is not root ---------------------


@pytest.fixture
def unprivileged_host() -> Iterator[FixtureHost]:
    """A fixture host in a directory an unprivileged user can traverse (pytest's is 0700)."""
    base = Path(tempfile.mkdtemp(prefix="wattprobe-eacces-"))
    base.chmod(0o755)
    try:
        yield FixtureHost.copy_of(FIXTURES, base / "host")
    finally:
        shutil.rmtree(base)


def test_unreadable_energy_uj(unprivileged_host: FixtureHost, tmp_path: Path) -> None:
    """energy_uj mode 0400 root, as Linux >= 5.10 ships it (CVE-2020-8694), read as nobody.

    As root, chmod does not stop reads, so the exporter runs as an unprivileged user with no
    capabilities (setpriv), exactly as a non-root deployment would.
    """
    require_root()
    setpriv = require_binary("setpriv")
    host = unprivileged_host
    drop = [
        setpriv,
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--no-new-privs",
    ]
    exporter = start_exporter(
        [*host.args(), "--interval", INTERVAL],
        log_dir=tmp_path,
        prefix=drop,
        env={"HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1"},
    )
    try:
        assert int(_proc_status(exporter.proc.pid)["Uid"].split()[0]) == 65534
        run = Run(host, exporter)
        run.advance()
        run.watch.next()
        frozen = run.watch.next()
        every = all_zone_devices(host)
        for _ in range(2):
            run.advance()  # the hardware counts on while nobody can read it
            for device in every:  # (advancing wrote new files: lock each one again)
                (host.rapl_dir(device) / "energy_uj").chmod(0o400)
            samples = run.watch.next()
            assert source_up(samples, "rapl") == (0.0, "permission denied")
            assert source_up(samples, "hwmon") == (1.0, "")
            for device in run.devices:
                assert node_energy(samples, "rapl", device) == node_energy(frozen, "rapl", device)
        # `wattprobe check`, run the same way, says what is wrong and how to fix it
        check = subprocess.run(
            [*drop, sys.executable, "-m", "exporter", "check", "--json", *host.args()],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "HOME": "/nonexistent", "PYTHONDONTWRITEBYTECODE": "1"},
        )
        rapl = next(r for r in json.loads(check.stdout)["sources"] if r["source"] == "rapl")
        assert rapl["ok"] is False and rapl["reason"].startswith("permission denied")
        assert "CAP_DAC_READ_SEARCH" in rapl["fix"]
        for device in every:
            (host.rapl_dir(device) / "energy_uj").chmod(0o444)
        run.advance()
        samples = run.watch.next(3)
        assert source_up(samples, "rapl") == (1.0, "")
        for device in run.devices:
            assert abs(run.counted(samples, device) - run.added[device]) < EPS_J, device
    finally:
        exporter.stop()


def _proc_status(pid: int) -> dict[str, str]:
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return dict(line.split(":\t", 1) for line in lines if ":\t" in line)


def test_wrap_during_a_gap_is_dropped_not_guessed(run: Run) -> None:
    """intel-rapl:1:1 sits 1.5 J below its range. It turns unreadable, wraps while unseen,
    and comes back lower: a wrap or a reset? After a gap that cannot be told, so the gap is
    not counted (losing energy rather than inventing it), and counting then resumes exactly."""
    device = "intel-rapl:1:1"
    samples = run.watch.next()
    counted = run.counted(samples, device)
    before = run.host.energy_uj(device)
    garbage(run.host, device)
    samples = run.watch.next()
    assert node_energy(samples, "rapl", device) - node_energy(run.start, "rapl", device) == counted
    max_uj = int((run.host.rapl_dir(device) / "max_energy_range_uj").read_text())
    run.host.set_energy_uj(device, (before + 3_000_000) % max_uj)  # 3 J later, past the wrap
    samples = run.watch.next()
    assert source_up(samples, "rapl") == (1.0, "")
    assert run.counted(samples, device) == counted  # the gap: dropped
    run.advance([device], joules=2.0)
    samples = run.watch.next()
    assert abs(run.counted(samples, device) - counted - 2.0) < EPS_J


def test_one_garbage_zone_is_a_faulted_reading_while_the_others_read_on(host: FixtureHost) -> None:
    """What the source hands the monitor, interval after interval, on a fixture host whose
    intel-rapl:0:0 turns to garbage and back: that zone is a reading with a fault (so the
    monitor can show it per device), never a missing one, and the others read exact values."""
    source = RaplSource(host.sysfs)
    devices = rapl_devices(host)
    broken = "intel-rapl:0:0"
    before = host.energy_uj(broken)
    for step, content in enumerate(["garbage\n", "", "-3\n", "9" * 309 + "\n", "9" * 5000]):
        for device in devices:
            if device != broken:
                host.add_energy_j(device, STEP_J)
        (host.rapl_dir(broken) / "energy_uj").write_text(content)
        readings = {r.device: r for r in source.read()}
        assert set(readings) == set(devices), step
        bad = readings[broken]
        assert bad.fault in ("garbage", "out of range") and bad.energy_uj is None, content[:8]
        assert (bad.source, bad.zone, bad.max_power_w) == ("rapl", "core", RAPL_MAX_POWER_W)
        for device in devices:
            if device != broken:
                assert readings[device].fault == ""
                assert readings[device].energy_uj == host.energy_uj(device)
    host.set_energy_uj(broken, before)
    readings = {r.device: r for r in source.read()}
    assert (readings[broken].fault, readings[broken].energy_uj) == ("", before)


def test_one_garbage_zone_shows_in_the_exposition_and_recovers(run: Run) -> None:
    """Issue 15: garbage in one RAPL zone left source_up at 1 and froze the zone with a debug
    line. Through `wattprobe serve`: within two intervals that zone's wattprobe_device_up is 0
    and its unreadable count grows while the source stays up; once the file reads again the
    zone counts what its counter moved by since its last good reading."""
    broken = "intel-rapl:0:0"
    ids = {"source": "rapl", "device": broken}

    def health(samples: Samples) -> tuple[float, float]:
        (up,) = select(samples, "wattprobe_device_up", **ids).values()
        (bad,) = select(
            samples, "wattprobe_device_rejected_readings_total", reason="unreadable", **ids
        ).values()
        return up, bad

    assert health(run.start) == (1.0, 0.0)
    good = run.host.energy_uj(broken)
    garbage(run.host, broken)
    run.advance([d for d in run.devices if d != broken])
    faulted = run.watch.next()  # two intervals
    up, unreadable = health(faulted)
    assert up == 0.0 and unreadable >= 1
    assert source_up(faulted, "rapl") == (1.0, "")
    assert run.counted(faulted, "intel-rapl:0") == pytest.approx(STEP_J, abs=EPS_J)
    run.host.set_energy_uj(broken, good + round(3 * STEP_J * 1e6))  # it drew on meanwhile
    recovered = run.watch.next()
    up, unreadable_after = health(recovered)
    assert up == 1.0 and unreadable_after >= unreadable  # the count stays: a counter
    assert run.counted(recovered, broken) == pytest.approx(3 * STEP_J, abs=EPS_J)
