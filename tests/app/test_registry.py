"""The source registry: a new power source is one module and one entry.

The fake source below is declared here alone (no other module is edited): registering it
gives it a --collector flag, a `check` entry with its fixes, a place among the power sources the
exporter builds, its zones split among workloads and a place in `top`'s zone table.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from exporter.accounting.zones import ZoneId, workload_zones
from exporter.app.check import SourceCheck, checks_of, exit_status, run_checks
from exporter.app.cli import collector_flags, collectors_of
from exporter.app.registry import REGISTRY, Registry
from exporter.app.wiring import power_sources
from exporter.model.config import Config
from exporter.model.readings import ABSENT, EnergyReading, SourceAbsent
from exporter.model.spec import POWER, BuildContext, CheckResult, Finding, SourceSpec
from exporter.sources.power.estimate import ESTIMATED

FIX_FAKE = "plug the fake meter in"


class FakeMeter:
    """A board meter with one energy counter, read from a file under sysfs."""

    name = "fake"

    def __init__(self, sysfs: Path) -> None:
        self.path = sysfs / "fake_meter_uj"

    def read(self) -> list[EnergyReading]:
        try:
            energy = int(self.path.read_text())
        except FileNotFoundError:
            raise SourceAbsent(f"no {self.path}") from None
        return [EnergyReading("board", "fake0", self.name, energy_uj=energy)]


def probe_fake(config: Config, _earlier: Sequence[CheckResult], _context: BuildContext) -> Finding:
    try:
        readings = FakeMeter(config.sysfs).read()
    except SourceAbsent as exc:
        return Finding.failed(exc, FIX_FAKE)
    return Finding.works(f"{len(readings)} zone: board")


FAKE = SourceSpec(
    name="fake",
    kind=POWER,
    default_on=False,
    probe=probe_fake,
    fixes={ABSENT: FIX_FAKE},
    build=lambda config, _context: FakeMeter(config.sysfs),
    workload_zones=(("board",),),
)
# preferred over RAPL: a node with both splits the board meter's energy
WITH_FAKE = REGISTRY.with_source(FAKE, before="rapl")


def test_its_flag_is_generated_off_by_default() -> None:
    seen: dict[str, frozenset[str]] = {}

    def command(**kw: Any) -> None:
        seen["collectors"] = collectors_of(kw, WITH_FAKE)

    for flag in collector_flags(WITH_FAKE):
        command = flag(command)
    cmd = click.command()(command)
    runner = CliRunner()
    assert "--collector.fake / --no-collector.fake" in runner.invoke(cmd, ["--help"]).output
    assert runner.invoke(cmd, []).exit_code == 0
    assert "fake" not in seen["collectors"]
    assert "rapl" in seen["collectors"]
    assert runner.invoke(cmd, ["--collector.fake"]).exit_code == 0
    assert "fake" in seen["collectors"]
    assert runner.invoke(cmd, [], env={"WATTPROBE_COLLECTOR_FAKE": "true"}).exit_code == 0
    assert "fake" in seen["collectors"]


def test_its_check_entry_and_fix(tmp_path: Path) -> None:
    (tmp_path / "class").mkdir()
    on = Config(sysfs=tmp_path, procfs=tmp_path, collectors=frozenset({"fake"}))
    (fake,) = [c for c in checks_of(WITH_FAKE) if isinstance(c, SourceCheck) and c.source == "fake"]
    assert checks_of(WITH_FAKE).index(fake) == 2  # after procfs and ebpf, before rapl
    (absent,) = run_checks(on, [fake])
    assert (absent.kind, absent.status, absent.fix) == (POWER, "absent", FIX_FAKE)
    assert WITH_FAKE.fixes()[("fake", ABSENT)] == FIX_FAKE

    (tmp_path / "fake_meter_uj").write_text("123456\n")
    results = run_checks(on, [fake])
    assert results == [CheckResult("fake", POWER, True, found="1 zone: board")]
    # a working power source counts towards check's exit status like the built-in ones
    activity = CheckResult("procfs", "activity", True)
    assert exit_status([*results, activity]) == 0

    (off,) = run_checks(Config(sysfs=tmp_path), [fake], WITH_FAKE)
    assert off.status == "disabled"
    assert off.fix == "--collector.fake to enable"


def test_it_is_built_and_read_when_switched_on(tmp_path: Path) -> None:
    (tmp_path / "fake_meter_uj").write_text("42\n")
    on = Config(sysfs=tmp_path, collectors=frozenset({"fake", "hwmon"}))
    built = power_sources(on, WITH_FAKE)
    assert [s.name for s in built] == ["fake", "hwmon"]
    assert list(built[0].read()) == [EnergyReading("board", "fake0", "fake", energy_uj=42)]
    # the estimate is a power source too: a fallback, read until a measured source reads
    assert [s.name for s in power_sources(Config(sysfs=tmp_path), WITH_FAKE)] == [
        "rapl",
        "hwmon",
        ESTIMATED,
    ]


def test_its_zones_are_split_among_workloads() -> None:
    measured = [("board", "fake0", "fake"), ("package", "intel-rapl:0", "rapl")]
    assert workload_zones((), measured, WITH_FAKE.zone_preferences) == ("board",)
    assert workload_zones((), measured, REGISTRY.zone_preferences) == ("package",)
    assert WITH_FAKE.source_order == {"fake": 0, "rapl": 1, "hwmon": 2, ESTIMATED: 3}


def test_a_name_is_registered_once() -> None:
    try:
        WITH_FAKE.with_source(FAKE)
    except ValueError as exc:
        assert "fake" in str(exc)
    else:
        raise AssertionError("registered twice")


def test_built_in_defaults() -> None:
    assert REGISTRY.collector_defaults == {
        "rapl": True,
        "hwmon": True,
        "estimated": True,
        "nvml": True,
        "drm": True,
        "process": False,
        "container": False,
    }
    assert isinstance(REGISTRY, Registry)


# -- the registry's zone choice is the one the monitor hard-coded before --------------------


def hard_coded(zone_ids: Sequence[ZoneId]) -> tuple[str, ...]:
    """Monitor._workload_zones before the registry, as an oracle."""
    by_source: dict[str, set[str]] = {}
    for zone, _device, source in zone_ids:
        by_source.setdefault(source, set()).add(zone)
    if "rapl" in by_source:
        found = by_source["rapl"]
        chosen = [z for z in ("package", "dram") if z in found]
        return tuple(chosen or [z for z in ("psys",) if z in found])
    if "hwmon" in by_source:
        return tuple(sorted(by_source["hwmon"]))
    if ESTIMATED in by_source:
        return ("package",)
    return ()


ZONE_IDS = st.lists(
    st.tuples(
        st.sampled_from(["package", "dram", "core", "uncore", "psys", "board", "gpu"]),
        st.sampled_from(["", "d0", "d1"]),
        st.sampled_from(["rapl", "hwmon", ESTIMATED, "nvml", "other"]),
    ),
    max_size=8,
).map(lambda ids: [i for i in ids if i[2] != ESTIMATED or i[0] == "package"])  # as the model


@given(ZONE_IDS)
def test_zone_choice_matches_the_hard_coded_one(zone_ids: list[ZoneId]) -> None:
    assert workload_zones((), zone_ids, REGISTRY.zone_preferences) == hard_coded(zone_ids)


@given(ZONE_IDS)
def test_configured_zones_win(zone_ids: list[ZoneId]) -> None:
    assert workload_zones(("dram",), zone_ids, REGISTRY.zone_preferences) == ("dram",)
