"""The estimate on a node without power sensors: the node's facts through --path.procfs and
--path.sysfs, the monitor's package and dram zones, the idle baseline and estimate_info in
/metrics, and `check`'s basis line.

The expected watts are boaviztapi 2.5.0's own for an m5.xlarge (4 vCPUs of a Xeon Platinum
8175M host, 16 GB), computed with its functions: at 0 % load CPU 2.385 W and memory 1.666 W, at
50 % CPU 14.963 W and memory 2.023 W (tests/sources/power/test_cpumodel_reference.py reruns them).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.exposition.collector import SnapshotCollector
from exporter.exposition.text import TextRenderer
from exporter.model.config import Config, IdleAttribution, IdlePower
from exporter.model.readings import EnergyReading, SourceAbsent
from exporter.model.snapshot import EstimateInfo
from exporter.model.spec import POWER, BuildContext, CheckResult
from exporter.sources.power.cpumodel.node import (
    NodeFacts,
    cpu_model_name,
    instance_type,
    mem_total_bytes,
    read_facts,
)
from exporter.sources.power.estimate import EstimateSource, NodeModels, probe
from tests.accounting.test_monitor import CGROUPS, Activity, Clock, FakeHost, task
from tests.support.invariants import check_snapshot
from tests.support.monitor import monitor_settings

XEON = "Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz"
CPUINFO = "".join(
    f"processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel name\t: {XEON}\n"
    "flags\t\t: fpu hypervisor\n\n"
    for i in range(4)
)
ARM_CPUINFO = "processor\t: 0\nBogoMIPS\t: 243.75\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\n"


def node_tree(tmp_path: Path, dmi: str | None) -> Config:
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cpuinfo").write_text(CPUINFO)
    (proc / "meminfo").write_text("MemTotal:       16181560 kB\nMemFree:  1 kB\n")
    (proc / "stat").write_text(
        "cpu  100 0 100 1000 0 0 0 0 0 0\n"
        + "".join(f"cpu{i} 25 0 25 250 0 0 0 0 0 0\n" for i in range(4))
    )
    sys = tmp_path / "sys"
    if dmi is not None:
        (sys / "class/dmi/id").mkdir(parents=True)
        (sys / "class/dmi/id/product_name").write_text(dmi + "\n")
    else:
        sys.mkdir()
    return Config(procfs=proc, sysfs=sys)


class Absent:
    name = "rapl"

    def read(self) -> Sequence[EnergyReading]:
        raise SourceAbsent("no powercap")


def test_facts_from_the_node_files(tmp_path: Path) -> None:
    config = node_tree(tmp_path, "m5.xlarge")
    facts = read_facts(config.procfs, config.sysfs)
    assert facts == NodeFacts(XEON, 16181560 * 1024, "m5.xlarge")
    assert instance_type("", facts) == "m5.xlarge"  # AWS Nitro's DMI product name
    assert instance_type("c5.large", facts) == "c5.large"  # the flag wins
    assert instance_type("", NodeFacts(XEON, 0, "Google Compute Engine")) == ""
    assert cpu_model_name(ARM_CPUINFO) == ""  # Arm has no model name
    assert mem_total_bytes("MemTotal: lots kB\n") == 0
    missing = read_facts(tmp_path / "nowhere", tmp_path / "nowhere")
    assert missing == NodeFacts("", 0, "")


def test_hostile_node_files_give_fallbacks(tmp_path: Path) -> None:
    proc, sys = tmp_path / "proc", tmp_path / "sys"
    proc.mkdir()
    os.mkfifo(proc / "cpuinfo")  # would block a plain open() forever
    (proc / "meminfo").write_bytes(b"MemTotal: \xff\xfe99999999999999999999 kB\n" * 10_000)
    (sys / "class/dmi/id").mkdir(parents=True)
    (sys / "class/dmi/id/product_name").mkdir()  # a directory, not a file
    assert read_facts(proc, sys) == NodeFacts("", 0, "")


@settings(deadline=None, max_examples=80)
@given(text=st.text(max_size=400))
def test_any_cpuinfo_or_meminfo_text_parses(text: str) -> None:
    name = cpu_model_name(text)
    assert len(name) <= 200 and "\n" not in name
    assert mem_total_bytes(text) >= 0
    if "MemTotal" not in text:  # the real line after any garbage is found
        assert mem_total_bytes(text + "\nMemTotal:  1024 kB\n") == 1 << 20


def test_monitor_estimates_package_and_dram(tmp_path: Path) -> None:
    config = node_tree(tmp_path, "m5.xlarge")
    host = FakeHost()
    clock = Clock()
    host.tasks = {1: task(1, 1, CGROUPS[2], 0.0)}
    estimate = EstimateSource(host.cpu_times, NodeModels(config), clock)
    monitor = Monitor(
        MonitorParts(cpu=host, activity=Activity(host), power=[Absent(), estimate]),
        monitor_settings(idle_power=IdlePower(), idle_policy=IdleAttribution.NONE),
        clock=clock,
        wall_clock=clock,
    )
    monitor.step()
    clock.now += 10
    host.busy += 20.0  # 20 of 40 CPU-seconds busy: u = 0.5
    host.idle += 20.0
    host.tasks[1] = task(1, 1, CGROUPS[2], 20.0)
    snap = monitor.step()
    zones = {(z.zone, z.source): z for z in snap.node_energy}
    pkg, dram = zones["package", "estimated"], zones["dram", "estimated"]
    assert pkg.idle_j == pytest.approx(2.385 * 10, rel=1e-3)
    assert pkg.active_j + pkg.idle_j == pytest.approx(14.963 * 10, rel=1e-3)
    assert dram.idle_j == pytest.approx(1.666 * 10, rel=1e-3)
    assert dram.active_j + dram.idle_j == pytest.approx(2.023 * 10, rel=1e-3)
    assert set(snap.attributed_zones) == {"dram", "package"}  # both split among workloads
    assert snap.estimate == EstimateInfo("Intel Xeon Platinum 8175M", "m5.xlarge", "instance")
    check_snapshot(snap)

    text = TextRenderer().render(SnapshotCollector(lambda: snap).collect()).decode()
    assert (
        'wattprobe_estimate_info{basis="instance",cpu_model="Intel Xeon Platinum 8175M",'
        'instance_type="m5.xlarge"} 1.0' in text
    )
    idle = [line for line in text.splitlines() if line.startswith("wattprobe_idle_power_watts{")]
    assert any('origin="model"' in x and 'zone="package"' in x and " 2.38" in x for x in idle), idle
    assert any('zone="dram"' in x and 'source="estimated"' in x for x in idle), idle


def test_check_says_the_basis_and_what_would_improve_it(tmp_path: Path) -> None:
    config = node_tree(tmp_path, None)  # no instance type: the CPU model decides
    finding = probe(config, [], BuildContext())
    assert finding.ok
    assert "basis cpu (CPU 'Intel(R) Xeon(R) Platinum 8175M" in finding.found
    assert any("--estimate.instance-type" in i for i in finding.items)
    assert any("RAPL" in i for i in finding.items)
    assert any("--estimate.idle-watts" in i for i in finding.items)


def test_check_says_whether_memory_is_estimated_beside_measured_power(tmp_path: Path) -> None:
    """The per-zone fallback in `check`: RAPL with package only leaves memory to the estimate;
    RAPL with dram leaves it nothing."""
    config = node_tree(tmp_path, "m5.xlarge")

    def rapl(*zones: str) -> CheckResult:
        return CheckResult("rapl", POWER, True, found="zones", zones=zones)

    package_only = probe(config, [rapl("package")], BuildContext()).found
    assert package_only.startswith("standby: measured power is available")
    assert "memory 1.67 W idle (in use: no measured source has a dram zone)" in package_only
    with_dram = probe(config, [rapl("dram", "package")], BuildContext()).found
    assert "memory 1.67 W idle (standby: a measured source has a dram zone)" in with_dram
