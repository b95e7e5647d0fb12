"""The source registry: a new power source or GPU vendor is one module and one entry.

The fake source below is declared here alone (no other module is edited): registering it
gives it a --collector flag, a `check` entry with its fixes, a place among the power sources the
exporter builds, its zones split among workloads and a place in `top`'s zone table. The fake
GPU vendor at the end gets its flag, its check entry, its backend built and read into the
Snapshot, and its device plugin's IDs resolved for PodResources.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.accounting.zones import ZoneId, workload_zones
from exporter.app.check import SourceCheck, checks_of, exit_status, run_checks
from exporter.app.cli import collector_flags, collectors_of
from exporter.app.registry import REGISTRY, Registry
from exporter.app.wiring import power_sources
from exporter.kube.gpus import DeviceAssignment, directory_from_gpus, resolve_holdings
from exporter.model.config import Config
from exporter.model.gpu_directory import GpuDirectory, GpuRef
from exporter.model.gpu_readings import GpuReading, GpuReadings
from exporter.model.readings import ABSENT, EnergyReading, SourceAbsent
from exporter.model.spec import (
    GPU,
    POWER,
    BuildContext,
    CheckResult,
    DevicePlugin,
    Finding,
    SourceSpec,
)
from exporter.sources.gpu.backend import LatestGpus
from exporter.sources.power.estimate import ESTIMATED
from tests.sources.gpu.nvml.scripted import StaticActivity, StaticCpu
from tests.support.monitor import monitor_settings

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


# -- a GPU vendor, registered from this file alone ------------------------------------------


class FakeGpus:
    """One board of a vendor wattprobe has never heard of: an energy counter that grows."""

    name = "fakegpu"

    def __init__(self) -> None:
        self.energy_mj = 0

    def read(self) -> GpuReadings:
        self.energy_mj += 100_000
        gpu = GpuReading(
            0, "FAKE-0001", "Fake Accelerator", "0000:aa:00.0", energy_mj=self.energy_mj,
            power_w=100.0, vendor="fake", backend=self.name, device_names=("accel0",),
        )  # fmt: skip
        return GpuReadings("1.0", "", "", (gpu,))

    def close(self) -> None:
        pass


def resolve_fake(device_id: str, directory: GpuDirectory) -> GpuRef | None:
    if not device_id.startswith("accel"):
        return None
    uuid = directory.uuid_by_device_name.get(device_id, "")
    return GpuRef(uuid, directory.index_by_uuid.get(uuid, ""), "")


FAKE_PLUGIN = DevicePlugin("Fake", ("fake.example/accel",), resolve_fake)
FAKE_GPU = SourceSpec(
    name="fakegpu",
    kind=GPU,
    default_on=True,
    probe=lambda _config, _earlier, _context: Finding.works("1 fake accelerator"),
    gpu_backend=lambda _config: FakeGpus(),
    device_plugins=(FAKE_PLUGIN,),
)
WITH_FAKE_GPU = REGISTRY.with_source(FAKE_GPU)


def test_a_gpu_vendor_gets_its_flag_check_backend_and_device_plugin() -> None:
    assert WITH_FAKE_GPU.collector_defaults["fakegpu"] is True
    (check,) = [c for c in checks_of(WITH_FAKE_GPU) if isinstance(c, SourceCheck)][-1:]
    assert check.source == "fakegpu"
    config = WITH_FAKE_GPU.resolve(Config())
    (result,) = run_checks(config, [check], WITH_FAKE_GPU)
    assert (result.kind, result.ok, result.found) == (POWER, True, "1 fake accelerator")
    backends = WITH_FAKE_GPU.gpu_backends(config)
    assert [b.name for b in backends][-1] == "fakegpu"
    assert FAKE_PLUGIN in WITH_FAKE_GPU.build_context(config).device_plugins
    off = WITH_FAKE_GPU.resolve(Config(collectors=frozenset({"rapl"})))
    assert WITH_FAKE_GPU.gpu_backends(off) == []
    assert WITH_FAKE_GPU.build_context(off).device_plugins == ()


def test_a_gpu_vendor_reaches_the_snapshot_and_its_allocations_resolve() -> None:
    clock = [100.0]
    latest = LatestGpus()
    fake = WITH_FAKE_GPU.gpu_backends(Config(collectors=frozenset({"fakegpu"})))
    monitor = Monitor(
        MonitorParts(
            cpu=StaticCpu(), activity=StaticActivity([]), gpus=fake, on_gpus=latest.publish
        ),
        monitor_settings(),
        clock=lambda: clock[0],
        wall_clock=lambda: clock[0],
    )
    monitor.step()
    clock[0] += 1.0
    snapshot = monitor.step()
    (gpu,) = snapshot.gpus
    assert (gpu.uuid, gpu.model) == ("FAKE-0001", "Fake Accelerator")
    assert sum(e.joules for e in gpu.energy) == pytest.approx(100.0)  # 100,000 mJ in 1 s
    directory = directory_from_gpus(latest.gpus(), {})
    held = resolve_holdings(
        [DeviceAssignment("ml", "p", "c", "fake.example/accel", "accel0")],
        directory=directory,
        plugins=WITH_FAKE_GPU.build_context(
            Config(collectors=frozenset({"fakegpu"}))
        ).device_plugins,
    )
    assert [(h.pod, h.ref.uuid, h.ref.gpu) for h in held.holdings] == [("p", "FAKE-0001", "0")]
