from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import pytest

from exporter.readings import SourceAbsent, SourceError
from exporter.sources.rapl import RaplSource, zone_kind
from tests.fixturehost import FixtureHost

FIXTURE_SYS = Path(__file__).parent / "fixtures" / "sys"


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
    real_open = builtins.open

    def deny_energy(path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).endswith("energy_uj"):
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", deny_energy)
    with pytest.raises(SourceError) as err:
        RaplSource(FIXTURE_SYS).read()
    assert err.value.reason == "permission denied"
    assert "CAP_DAC_READ_SEARCH" in err.value.detail


def test_one_garbage_zone_does_not_hide_the_others(host: FixtureHost) -> None:
    (host.rapl_dir("intel-rapl:0:0") / "energy_uj").write_text("garbage\n")
    devices = {r.device for r in RaplSource(host.sysfs).read()}
    assert "intel-rapl:0:0" not in devices and "intel-rapl:0" in devices
