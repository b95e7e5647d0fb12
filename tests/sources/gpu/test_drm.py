"""The DRM GPU backend (AMD amdgpu, Intel i915/xe) against fixture trees in the kernel's formats
(tests/support/drmhost.py; the checked-in tree is tests/fixtures/drm)."""

from __future__ import annotations

import os
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.accounting.gpu_merge import GpuMerge
from exporter.app.registry import REGISTRY
from exporter.model.config import Config
from exporter.model.gpu_readings import GpuReading, GpuReadings
from exporter.model.readings import SourceAbsent, SourceError
from exporter.model.spec import BuildContext
from exporter.sources.gpu.drm.clients import DrmClientScanner
from exporter.sources.gpu.drm.fdinfo import parse_fdinfo
from exporter.sources.gpu.drm.source import DrmSource, discover, drm_gpu_devices, probe
from exporter.sources.power.hwmon import HwmonSource
from tests.support import drmhost
from tests.support.drmhost import (
    ARC,
    GARBAGE_FDINFO,
    IGPU,
    PID_A,
    PID_ARC,
    PID_B,
    PID_C,
    RDNA3,
    VEGA,
    amdgpu_fdinfo,
    i915_fdinfo,
    write_fd,
    xe_fdinfo,
)
from tests.support.paths import FIXTURES

FIXTURE = FIXTURES / "drm"


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    dest = tmp_path / "drm"
    shutil.copytree(FIXTURE, dest, symlinks=True)
    return dest


def by_pci(reading: GpuReadings) -> dict[str, GpuReading]:
    return {g.pci_bus_id: g for g in reading.gpus}


def engine(gpu: GpuReading) -> dict[int, float]:
    return {e.pid: e.busy for e in gpu.process_engine_time or ()}


def _tree(root: Path) -> dict[str, str]:
    """Every file's contents and every link's target under root, links not followed."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if path.is_symlink():
                out[str(path.relative_to(root))] = "-> " + os.readlink(path)
            elif path.is_file():
                out[str(path.relative_to(root))] = path.read_text()
    return out


def test_checked_in_tree_is_what_the_generator_writes(tmp_path: Path) -> None:
    drmhost.write_tree(tmp_path)
    assert _tree(tmp_path) == _tree(FIXTURE)


def test_discovers_amd_and_intel_cards_not_connectors_or_render_nodes() -> None:
    cards = discover(FIXTURE / "sys")
    assert [(c.card, c.pci, c.vendor, c.driver) for c in cards] == [
        ("card0", RDNA3.pci, "amd", "amdgpu"),
        ("card1", VEGA.pci, "amd", "amdgpu"),
        ("card2", ARC.pci, "intel", "xe"),
        ("card3", IGPU.pci, "intel", "i915"),
    ]
    assert cards[3].hwmon is None


def test_readings_from_sysfs_and_hwmon() -> None:
    gpus = by_pci(DrmSource(FIXTURE / "sys", FIXTURE / "proc").read())
    rdna, vega, arc = gpus[RDNA3.pci], gpus[VEGA.pci], gpus[ARC.pci]
    # RDNA3: power1_input (uW), power1_cap, the edge sensor, gpu_busy_percent, mem_info_vram_*
    assert (rdna.power_w, rdna.power_limit_w, rdna.temperature_c) == (85.0, 327.0, 45.0)
    assert (rdna.utilization_ratio, rdna.energy_mj) == (0.37, None)
    assert (rdna.memory_used_bytes, rdna.memory_total_bytes) == (2147483648, 25753026560)
    assert (rdna.uuid, rdna.vendor, rdna.backend) == (RDNA3.pci, "amd", "drm")
    assert rdna.name == "AMD GPU 0x744c (amdgpu)"  # empty product_name: the PCI id
    # older amdgpu: power1_average; its FRU product name
    assert (vega.power_w, vega.power_limit_w, vega.name) == (112.0, 300.0, "Radeon Instinct MI25")
    # Intel dGPU: energy1_input (uJ) is the counter; power1_max the limit; no gpu_busy_percent
    assert (arc.energy_mj, arc.power_w, arc.power_limit_w) == (123456789, None, 190.0)
    assert arc.temperature_c == 41.0
    assert arc.utilization_ratio is None  # first read: no interval to measure engine use over
    # the integrated GPU: no hwmon, no power of its own, not metered (RAPL's package has it)
    assert IGPU.pci not in gpus
    assert [g.index for g in gpus.values()] == [0, 1, 2]


def test_fdinfo_formats() -> None:
    new = parse_fdinfo(amdgpu_fdinfo(RDNA3.pci, 18, gfx_ns=7, compute_ns=5, vram_kib=3))
    assert new is not None
    assert (new.driver, new.pdev, new.client_id) == ("amdgpu", RDNA3.pci, 18)
    assert dict(new.engine_ns) == {"gfx": 7, "compute": 5}
    assert new.local_memory_bytes == 3 * 1024
    legacy = parse_fdinfo(amdgpu_fdinfo(VEGA.pci, 7, gfx_ns=9, vram_kib=16, legacy=True))
    assert legacy is not None
    assert dict(legacy.engine_ns) == {"gfx": 9, "compute": 0, "dma": 0, "dec": 0, "enc": 0}
    assert legacy.memory["gtt"] == 0 and legacy.local_memory_bytes == 16 * 1024
    xe = parse_fdinfo(xe_fdinfo(ARC.pci, 4, rcs_cycles=30, ccs_cycles=2, total=100, vram_kib=8))
    assert xe is not None
    assert (xe.busy_cycles, xe.total_cycles["rcs"], xe.capacity["ccs"]) == (32, 100, 4)
    assert xe.engine_ns == {} and xe.local_memory_bytes == 8 * 1024
    i915 = parse_fdinfo(i915_fdinfo(IGPU.pci, 2, render_ns=11))
    assert i915 is not None
    assert i915.busy_ns == 11 and "capacity-video" not in i915.engine_ns
    assert i915.capacity == {"video": 2} and i915.local_memory_bytes is None
    assert parse_fdinfo(GARBAGE_FDINFO) is None
    assert parse_fdinfo("pos:\t0\nflags:\t0100002\nmnt_id:\t25\n") is None  # not a DRM fd


_LINE = st.text(
    st.characters(
        blacklist_categories=["Cs"],
        blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029",
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(
    garbage=st.lists(_LINE, max_size=12),
    gfx=st.integers(0, 2**63),
    client=st.integers(0, 2**40),
    position=st.integers(0, 12),
)
def test_fdinfo_garbage_never_raises_and_never_hides_good_lines(
    garbage: list[str], gfx: int, client: int, position: int
) -> None:
    """Any text parses to a client or None without raising; garbage lines around well-formed
    ones (not reusing their keys) leave the well-formed values as they are."""
    parse_fdinfo("\n".join(garbage))
    clean = [g for g in garbage if not g.lstrip().startswith("drm-")]
    good = [
        "drm-driver:\tamdgpu",
        f"drm-client-id:\t{client}",
        f"drm-pdev:\t{RDNA3.pci}",
        f"drm-engine-gfx:\t{gfx} ns",
    ]
    lines = clean[:position] + good + clean[position:]
    parsed = parse_fdinfo("\n".join(lines))
    assert parsed is not None
    assert (parsed.client_id, parsed.engine_ns.get("gfx")) == (client, gfx)


@given(value=st.text(max_size=30))
def test_fdinfo_bad_engine_values_are_skipped(value: str) -> None:
    text = f"drm-driver:\tamdgpu\ndrm-client-id:\t1\ndrm-pdev:\tx\ndrm-engine-gfx:\t{value}\n"
    parsed = parse_fdinfo(text)
    assert parsed is not None
    parts = value.split()
    ok = len(parts) == 2 and parts[1] == "ns" and parts[0].isascii() and parts[0].isdigit()
    assert ("gfx" in parsed.engine_ns) == ok


def advance(proc: Path, pid: int, fds: list[int], text: str) -> None:
    for fd in fds:
        write_fd(proc, pid, fd, RDNA3.dev_node, text)


def test_engine_time_splits_3_to_1_and_shared_clients_count_once(tree: Path) -> None:
    clock = Clock()
    source = DrmSource(tree / "sys", tree / "proc", clock=clock)
    first = by_pci(source.read())
    assert engine(first[RDNA3.pci]) == {PID_A: 0.0, PID_B: 0.0}  # baselines only
    proc = tree / "proc"
    # client 18 (pod A's fds 5 and 6, and PID_C's inherited fd 9) +3 s, client 19 +1 s
    a = amdgpu_fdinfo(RDNA3.pci, 18, gfx_ns=6_000_000_000, vram_kib=1024)
    advance(proc, PID_A, [5, 6], a)
    advance(proc, PID_C, [9], a)
    advance(proc, PID_B, [5], amdgpu_fdinfo(RDNA3.pci, 19, gfx_ns=2_000_000_000))
    clock.now += 10
    gpus = by_pci(source.read())
    assert engine(gpus[RDNA3.pci]) == {PID_A: 3e9, PID_B: 1e9}
    memory = {p.pid: p.used_memory_bytes for p in gpus[RDNA3.pci].processes}
    assert memory == {PID_A: 1024 * 1024, PID_B: 0}
    assert PID_C not in memory  # its client is pod A's: the lowest PID holding it


def test_a_process_on_two_gpus_and_xe_cycles(tree: Path) -> None:
    clock = Clock()
    source = DrmSource(tree / "sys", tree / "proc", clock=clock)
    source.read()
    proc = tree / "proc"
    advance(proc, PID_A, [5, 6], amdgpu_fdinfo(RDNA3.pci, 18, gfx_ns=3_500_000_000))
    write_fd(proc, PID_A, 7, ARC.dev_node, xe_fdinfo(ARC.pci, 4, rcs_cycles=6000, total=20_000))
    write_fd(proc, PID_ARC, 5, ARC.dev_node, xe_fdinfo(ARC.pci, 5, rcs_cycles=2000, total=20_000))
    clock.now += 1
    gpus = by_pci(source.read())
    assert engine(gpus[RDNA3.pci]) == {PID_A: 5e8, PID_B: 0.0}
    assert engine(gpus[ARC.pci]) == {PID_A: 3000.0, PID_ARC: 1000.0}  # cycles, 3:1
    # the busiest class (rcs) was busy 4000 of 10000 GPU cycles
    assert gpus[ARC.pci].utilization_ratio == pytest.approx(0.4)


def test_clients_of_new_processes_count_from_zero_others_from_their_baseline(
    tree: Path,
) -> None:
    clock = Clock()
    source = DrmSource(tree / "sys", tree / "proc", clock=clock, recheck_every=1000)
    source.read()
    proc = tree / "proc"
    # a process started since the last read: all of its engine time is this interval's
    write_fd(proc, 5000, 3, RDNA3.dev_node, amdgpu_fdinfo(RDNA3.pci, 40, gfx_ns=700))
    # a new client of a process seen before (no DRM fd then, not rechecked yet): not found
    write_fd(proc, drmhost.PID_PLAIN, 8, RDNA3.dev_node, amdgpu_fdinfo(RDNA3.pci, 41, gfx_ns=9))
    clock.now += 1
    gpu = by_pci(source.read())[RDNA3.pci]
    assert engine(gpu) == {PID_A: 0.0, PID_B: 0.0, 5000: 700.0}


def test_vanished_client_and_vanished_gpu(tree: Path) -> None:
    clock = Clock()
    source = DrmSource(tree / "sys", tree / "proc", clock=clock)
    source.read()
    proc = tree / "proc"
    shutil.rmtree(proc / str(PID_B))  # pod B's process exited
    (tree / "sys" / "class" / "drm" / "card1").unlink()  # the Vega card is gone
    clock.now += 1
    gpus = by_pci(source.read())
    assert VEGA.pci not in gpus and RDNA3.pci in gpus
    assert engine(gpus[RDNA3.pci]) == {PID_A: 0.0}
    assert gpus[RDNA3.pci].index == 0 and gpus[ARC.pci].index == 2  # indexes stay
    shutil.rmtree(tree / "sys" / "class" / "drm")
    with pytest.raises(SourceError) as err:
        source.read()
    assert err.value.reason == "vanished"


def test_no_drm_gpu_is_absent(tmp_path: Path, tree: Path) -> None:
    with pytest.raises(SourceAbsent):
        DrmSource(tmp_path, tmp_path).read()
    for card in ("card0", "card1", "card2"):  # an integrated GPU alone: nothing to meter
        (tree / "sys" / "class" / "drm" / card).unlink()
    with pytest.raises(SourceAbsent) as err:
        DrmSource(tree / "sys", tree / "proc").read()
    assert "card3 (i915)" in err.value.detail


def test_incremental_scan_walks_drm_processes_new_ones_and_a_rotating_slice(tmp_path: Path) -> None:
    proc = tmp_path / "proc"
    for pid in range(100, 200):
        (proc / str(pid) / "fd").mkdir(parents=True)
        (proc / str(pid) / "fd" / "0").symlink_to("/dev/null")
    write_fd(proc, 150, 4, RDNA3.dev_node, amdgpu_fdinfo(RDNA3.pci, 1, gfx_ns=1))
    scanner = DrmClientScanner(proc, recheck_every=10)
    first = scanner.scan()
    assert first.walked == 100 and set(first.clients) == {(RDNA3.pci, 1)}
    walks = []
    for _ in range(10):
        walks.append(scanner.scan().walked)
    # each read: the DRM process plus a tenth of the others
    assert all(w <= 1 + 10 for w in walks) and sum(walks) == 10 + 99
    # a process that opens a GPU later is found within recheck_every reads
    write_fd(proc, 120, 4, RDNA3.dev_node, amdgpu_fdinfo(RDNA3.pci, 2, gfx_ns=1))
    found = [(RDNA3.pci, 2) in scanner.scan().clients for _ in range(10)]
    assert any(found)


def test_merge_keeps_the_primary_indexes_and_never_collides() -> None:
    def gpu(index: int, uuid: str) -> GpuReading:
        return GpuReading(index=index, uuid=uuid, name="", pci_bus_id=uuid)

    def readings(*gpus: GpuReading) -> GpuReadings:
        return GpuReadings("550", "12.550", "12.4", gpus)

    merge = GpuMerge()
    nvml = readings(gpu(0, "GPU-a"), gpu(1, "GPU-b"))
    drm = GpuReadings("6.12", "", "", (gpu(0, RDNA3.pci), gpu(1, VEGA.pci)))
    merged = merge.merge([nvml, drm])
    assert merged is not None
    assert [(g.index, g.uuid) for g in merged.gpus] == [
        (0, "GPU-a"),
        (1, "GPU-b"),
        (2, RDNA3.pci),
        (3, VEGA.pci),
    ]
    assert merged.driver_version == "550"
    # NVML misses an interval: the DRM GPUs keep their indexes and NVML's versions stay
    again = merge.merge([None, drm])
    assert again is not None and again.driver_version == "550"
    assert [g.index for g in again.gpus] == [2, 3]
    # only DRM on the node (NVML absent from the start): DRM GPUs from 0
    alone = GpuMerge().merge([None, drm])
    assert alone is not None and [g.index for g in alone.gpus] == [0, 1]
    assert alone.driver_version == "6.12"
    # NVML shows up later with indexes the DRM GPUs hold: NVML keeps them, DRM is renumbered
    late = GpuMerge()
    late.merge([None, drm])
    both = late.merge([nvml, drm])
    assert both is not None
    indexes = [g.index for g in both.gpus]
    assert indexes[:2] == [0, 1] and len(set(indexes)) == 4
    assert GpuMerge().merge([None, None]) is None


def test_hwmon_leaves_metered_drm_gpus_to_the_drm_backend() -> None:
    sysfs = FIXTURE / "sys"
    assert drm_gpu_devices(sysfs) == {RDNA3.pci, VEGA.pci, ARC.pci}
    every = {r.device for r in HwmonSource(sysfs).read()}
    assert every == {RDNA3.pci, VEGA.pci, ARC.pci}
    config = Config(sysfs=sysfs, procfs=FIXTURE / "proc")
    (hwmon,) = REGISTRY.power_sources(replace(config, collectors=frozenset({"hwmon", "drm"})))
    with pytest.raises(SourceAbsent):  # every hwmon sensor here is a metered GPU's
        hwmon.read()
    off = replace(config, collectors=frozenset({"hwmon"}))  # --no-collector.drm
    (hwmon,) = REGISTRY.power_sources(off)
    assert {r.device for r in hwmon.read()} == every


def test_check_says_what_each_gpu_lacks() -> None:
    finding = probe(Config(sysfs=FIXTURE / "sys", procfs=FIXTURE / "proc"), [], BuildContext())
    assert finding.ok
    assert finding.found.startswith("3 GPUs: ")  # metered; the iGPU is listed below
    items = dict(item.split(" ", 1) for item in finding.items)
    assert items["card0"] == f"{RDNA3.pci} AMD GPU 0x744c (amdgpu) [amdgpu]"
    assert items["card1"] == f"{VEGA.pci} Radeon Instinct MI25 [amdgpu]"
    assert items["card2"] == f"{ARC.pci} Intel GPU 0xe20b (xe) [xe]"  # fdinfo gives utilization
    assert items["card3"] == (
        f"{IGPU.pci} Intel GPU 0xa780 (i915) [i915]: no hwmon, not metered "
        "(an integrated GPU's power is in the CPU package: RAPL)"
    )


def test_check_names_a_gpu_without_fdinfo_clients(tree: Path) -> None:
    shutil.rmtree(tree / "proc" / str(PID_ARC))
    shutil.rmtree(tree / "proc" / str(PID_A))
    finding = probe(Config(sysfs=tree / "sys", procfs=tree / "proc"), [], BuildContext())
    card2 = next(i for i in finding.items if i.startswith("card2 "))
    assert "no utilization" in card2 and "no DRM client in fdinfo" in card2


def test_a_failed_fdinfo_scan_is_reported_and_the_next_covers_it(tree: Path) -> None:
    """processes_unread makes the monitor hold the GPUs' energy (accounting/gpu.py); the next
    scan's deltas are taken from the last good one, so they cover the failed interval."""
    clock = Clock()
    source = DrmSource(tree / "sys", tree / "proc", clock=clock)
    assert {g.processes_unread for g in source.read().gpus} == {""}
    proc = tree / "proc"
    proc.rename(tree / "proc-away")
    clock.now += 1
    failed = source.read()
    assert {g.processes_unread for g in failed.gpus} == {"fdinfo scan failed"}
    assert {g.process_engine_time for g in failed.gpus} == {None}
    (tree / "proc-away").rename(proc)
    # client 18 was at 3 s of gfx time at the first scan
    advance(proc, PID_A, [5, 6], amdgpu_fdinfo(RDNA3.pci, 18, gfx_ns=6_000_000_000))
    clock.now += 1
    gpus = by_pci(source.read())
    assert gpus[RDNA3.pci].processes_unread == ""
    assert engine(gpus[RDNA3.pci]) == {PID_A: 3e9, PID_B: 0.0}
