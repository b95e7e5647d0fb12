"""End to end: a node whose RAPL has package but no DRAM domain (most AMD CPUs) gets an estimated
dram zone from its installed memory, split among workloads, and every sum still holds exactly;
the fixture node whose RAPL has dram gets none.

The fixture host (tests/fixtures) has two sockets with package, core and dram; the AMD-like node
is the same tree with its dram subzones removed and a /proc/meminfo and /proc/cpuinfo added.
`wattprobe serve` runs with its defaults (the idle baseline learned, no --power.idle).
"""

from __future__ import annotations

import math
import shutil
import time

import pytest

from exporter.app.wiring import build_monitor
from exporter.model.config import ActivitySource, Config, PodSource
from tests.conftest import StartExporter
from tests.support.fixturehost import FixtureHost
from tests.support.invariants import check_exposition, check_snapshot
from tests.support.promtool import check_metrics
from tests.support.running import parse_samples, select

EPYC = "AMD EPYC 7R13 48-Core Processor"
MEM_KB = 64 * 1024 * 1024  # 64 GiB


def amd_like(host: FixtureHost) -> FixtureHost:
    """The fixture node without RAPL's dram subzones, with memory and an AMD CPU to model."""
    for dram in ("intel-rapl:0:1", "intel-rapl:1:1"):
        link = host.rapl_dir(dram)  # class/powercap's link to the device under devices/
        shutil.rmtree(link.resolve())
        link.unlink()
    ncpu = sum(1 for line in (host.procfs / "stat").read_text().splitlines() if line[3:4].isdigit())
    (host.procfs / "cpuinfo").write_text(
        "".join(f"processor\t: {i}\nmodel name\t: {EPYC}\n\n" for i in range(ncpu))
    )
    (host.procfs / "meminfo").write_text(f"MemTotal:       {MEM_KB} kB\nMemFree: 1 kB\n")
    return host


def advance(host: FixtureHost, joules: float = 50.0) -> None:
    """An interval's work: both packages draw the joules; pids 1001 and 1101 (two pods) run."""
    for package in ("intel-rapl:0", "intel-rapl:1"):
        host.add_energy_j(package, joules)
    host.add_process_ticks(1001, 100)
    host.add_process_ticks(1101, 60)
    host.add_cpu_ticks(busy=160, idle=240)


@pytest.mark.slow  # a `wattprobe serve` process through three intervals: about 6 s
def test_serve_splits_estimated_dram_beside_rapl_package(
    host: FixtureHost, exporter: StartExporter
) -> None:
    amd_like(host)
    started = time.monotonic()
    proc = exporter(*host.args(), "--activity-source", "procfs", "--interval", "1s")
    proc.wait_for("/readyz")
    proc.wait_next_interval()
    advance(host)
    proc.wait_next_interval()
    advance(host)
    body = proc.wait_next_interval()
    samples = parse_samples(body)
    elapsed = time.monotonic() - started
    check_metrics(body)

    node = select(samples, "wattprobe_node_energy_joules_total")
    by = {(dict(k)["zone"], dict(k)["source"], dict(k)["mode"]): 0.0 for k in node}
    for k, v in node.items():
        lbl = dict(k)
        by[lbl["zone"], lbl["source"], lbl["mode"]] += v
    assert ("dram", "rapl", "active") not in by
    assert ("package", "estimated", "active") not in by  # RAPL measures the CPU
    assert by["package", "rapl", "active"] + by["package", "rapl", "idle"] == pytest.approx(200.0)
    dram_idle, dram_active = by["dram", "estimated", "idle"], by["dram", "estimated", "active"]
    assert dram_idle > 0 and dram_active > 0  # the load moved it above its idle power

    (idle_w,) = select(
        samples, "wattprobe_idle_power_watts", zone="dram", source="estimated", origin="model"
    ).values()
    # the estimate's idle joules are its idle watts over the time it covered, inside this run
    assert 0 < dram_idle / idle_w < elapsed
    (up,) = select(samples, "wattprobe_source_up", source="estimated").values()
    assert up == 1.0

    # the estimated dram is split like RAPL's: pods and pseudo-containers add up to the node
    check_exposition(samples)
    pods = select(samples, "wattprobe_pod_energy_joules_total", zone="dram", mode="active")
    pseudo = select(samples, "wattprobe_container_energy_joules_total", zone="dram", mode="active")
    assert len(pods) >= 2 and all(v > 0 for v in pods.values())
    parts = math.fsum([*pods.values(), *pseudo.values()])
    assert math.isclose(parts, dram_active, rel_tol=1e-9)


def test_rapl_with_dram_gets_no_estimated_zone(host: FixtureHost) -> None:
    """In process, as serve wires it: the fixture node's RAPL dram leaves the estimate out; the
    same tree without its dram subzones gets it."""
    for tree, estimated in ((host, False), (amd_like(_copy(host)), True)):
        config = Config(
            procfs=tree.procfs,
            sysfs=tree.sysfs,
            activity_source=ActivitySource.PROCFS,
            pod_source=PodSource.NONE,
        )
        monitor = build_monitor(config)
        try:
            monitor.step()
            advance(tree, 0.05)  # 0.1 W or less: plausible however long the step takes
            time.sleep(0.5)
            snap = monitor.step()
        finally:
            monitor.close()
        got = {(z.zone, z.source) for z in snap.node_energy}
        assert (("dram", "estimated") in got) is estimated, got
        assert (("dram", "rapl") in got) is not estimated, got
        assert "package" in snap.attributed_zones and "dram" in snap.attributed_zones
        check_snapshot(snap)


def _copy(host: FixtureHost) -> FixtureHost:
    dest = host.root.parent / "amd"
    dest.mkdir()
    for tree in ("sys", "proc"):
        shutil.copytree(host.root / tree, dest / tree, symlinks=True)
    return FixtureHost(dest)
