from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from exporter.model.readings import SourceAbsent, SourceError
from exporter.sources.power.rapl import RaplSource, zone_kind
from tests.support.fixturehost import FixtureHost
from tests.support.paths import FIXTURES

FIXTURE_SYS = FIXTURES / "sys"


def test_reads_both_sockets_and_drops_the_mmio_duplicate() -> None:
    source = RaplSource(FIXTURE_SYS)
    readings = {r.device: r for r in source.read()}
    assert set(readings) == {
        "intel-rapl:0",
        "intel-rapl:0:0",
        "intel-rapl:0:1",
        "intel-rapl:1",
        "intel-rapl:1:0",
        "intel-rapl:1:1",
    }
    assert source.duplicates == ["intel-rapl-mmio:0 (package-0)"]
    pkg = readings["intel-rapl:1"]
    assert (pkg.zone, pkg.source, pkg.energy_uj, pkg.max_energy_uj) == (
        "package",
        "rapl",
        98_765_432_100,
        262143328850,
    )
    assert readings["intel-rapl:0:1"].zone == "dram"
    assert readings["intel-rapl:1:0"].zone == "core"


def test_mmio_zone_kept_when_it_is_the_only_one(host: FixtureHost) -> None:
    powercap = host.sysfs / "class" / "powercap"
    for entry in powercap.iterdir():
        if not entry.name.startswith("intel-rapl-mmio"):
            entry.unlink()
    (reading,) = RaplSource(host.sysfs).read()
    assert (reading.zone, reading.device) == ("package", "intel-rapl-mmio:0")


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("package-0", "package"),
        ("package-12", "package"),
        ("dram", "dram"),
        ("psys", "psys"),
        ("", "unknown"),
    ],
)
def test_zone_kind(name: str, kind: str) -> None:
    assert zone_kind(name) == kind


def test_no_powercap_is_absent(tmp_path: Path) -> None:
    with pytest.raises(SourceAbsent):
        RaplSource(tmp_path).read()


def test_permission_denied_on_every_zone_says_why_and_how_to_fix(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_open = os.open

    # root reads any mode, so the kernel's refusal (EACCES) is played at the syscall
    def deny_energy(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).endswith("energy_uj"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny_energy)
    with pytest.raises(SourceError) as err:
        RaplSource(FIXTURE_SYS).read()
    assert err.value.reason == "permission denied"
    assert "CAP_DAC_READ_SEARCH" in err.value.detail


@pytest.mark.parametrize(
    ("content", "fault"),
    [
        ("garbage\n", "garbage"),
        ("", "garbage"),
        ("-5\n", "out of range"),
        ("9" * 21 + "\n", "out of range"),
        ("9" * 4301 + "\n", "out of range"),  # past int()'s digit limit
    ],
)
def test_one_bad_zone_is_a_faulted_reading_and_the_others_read_on(
    host: FixtureHost, content: str, fault: str
) -> None:
    (host.rapl_dir("intel-rapl:0:0") / "energy_uj").write_text(content)
    readings = {r.device: r for r in RaplSource(host.sysfs).read()}
    bad = readings["intel-rapl:0:0"]
    assert (bad.fault, bad.energy_uj, bad.power_w, bad.zone) == (fault, None, None, "core")
    assert bad.max_energy_uj is not None and bad.max_power_w is not None  # bounds kept
    for device in ("intel-rapl:0", "intel-rapl:0:1", "intel-rapl:1"):
        good = readings[device]
        assert good.fault == "" and good.energy_uj == host.energy_uj(device)


def test_unreadable_zone_is_faulted(host: FixtureHost) -> None:
    energy = host.rapl_dir("intel-rapl:1") / "energy_uj"
    energy.unlink()
    energy.mkdir()  # still listed, but not a file: refused before any read
    readings = {r.device: r for r in RaplSource(host.sysfs).read()}
    assert readings["intel-rapl:1"].fault == "not a regular file"
    assert readings["intel-rapl:0"].fault == ""


def test_all_zones_bad_is_still_a_source_error(host: FixtureHost) -> None:
    for device in ("intel-rapl:0", "intel-rapl:0:0", "intel-rapl:0:1"):
        (host.rapl_dir(device) / "energy_uj").write_text("x\n")
    for device in ("intel-rapl:1", "intel-rapl:1:0", "intel-rapl:1:1"):
        (host.rapl_dir(device) / "energy_uj").write_text("9" * 400 + "\n")
    with pytest.raises(SourceError) as err:
        RaplSource(host.sysfs).read()
    assert err.value.reason == "unparsable value"
