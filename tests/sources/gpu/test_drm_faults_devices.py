"""Hostile DRM values per GPU: the cards' hwmon power and energy files, and fdinfo.

Three metered cards of tests/drmhost.py (an RDNA3 power1_input, a Vega power1_average, an Arc
energy1_input counter) under a Monitor stepped on a fake clock. Each example breaks any set of
them, each its own way (NaN, negative, 25 digits, a FIFO, a directory, an absurd value); each
broken card is device_up 0 with one more rejection of the expected reason and counts nothing,
the others stay up and count exactly what they drew; all are up once the values are good. And
hostile fdinfo (the per-process engine time) never reaches a card's health or energy.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.model.config import IdlePower
from exporter.model.health import IMPLAUSIBLE, UNREADABLE
from exporter.model.snapshot import Snapshot
from exporter.sources.gpu.drm.source import DrmSource
from tests.sources.gpu.nvml.scripted import StaticActivity, StaticCpu
from tests.support.drmhost import ARC, CARDS, RDNA3, VEGA, Card, hwmon_dir, write_fd, write_tree
from tests.support.fixturehost import write_atomic
from tests.support.monitor import monitor_settings

WATTS = 50  # every card draws this: power sensors read it, the counter advances by it per second
METERED = {RDNA3.pci: "power1_input", VEGA.pci: "power1_average", ARC.pci: "energy1_input"}
BY_PCI = {c.pci: c for c in CARDS}


def _replace(path: Path, make: Callable[[Path], None]) -> None:
    path.unlink()
    make(path)


def absurd(path: Path) -> None:
    if path.name.startswith("energy"):
        write_atomic(path, f"{int(path.read_text()) + 10**15}\n")  # 10^9 J in a second
    else:
        write_atomic(path, f"{10**12}\n")  # 1 MW


FAULTS: dict[str, tuple[Callable[[Path], None], str]] = {
    "nan": (lambda p: write_atomic(p, "nan\n"), UNREADABLE),
    "negative": (lambda p: write_atomic(p, "-5000000\n"), UNREADABLE),
    "overlong": (lambda p: write_atomic(p, "9" * 25 + "\n"), UNREADABLE),
    "fifo": (lambda p: _replace(p, os.mkfifo), UNREADABLE),
    "directory": (lambda p: _replace(p, Path.mkdir), UNREADABLE),
    "absurd": (absurd, IMPLAUSIBLE),
}


class Rig:
    def __init__(self, root: Path) -> None:
        write_tree(root)
        self.root = root
        self.clock = [0.0]
        self.drm = DrmSource(root / "sys", root / "proc", clock=lambda: self.clock[0])
        self.monitor = Monitor(
            MonitorParts(
                cpu=StaticCpu(),
                activity=StaticActivity([]),
                power=[],
                gpus=[self.drm],
            ),
            monitor_settings(idle_power=IdlePower(default_w=0.0)),
            clock=lambda: self.clock[0],
            wall_clock=lambda: self.clock[0],
        )

    def path(self, pci: str) -> Path:
        return hwmon_dir(self.root / "sys", BY_PCI[pci]) / METERED[pci]

    def step(self, skip: frozenset[str] = frozenset()) -> Snapshot:
        self.clock[0] += 1.0
        for pci in METERED:
            if pci in skip:
                continue
            path = self.path(pci)
            if path.name.startswith("energy"):
                write_atomic(path, f"{int(path.read_text()) + WATTS * 10**6}\n")
            else:
                write_atomic(path, f"{WATTS * 10**6}\n")
        return self.monitor.step()


def health(snap: Snapshot) -> dict[str, tuple[bool, dict[str, int]]]:
    index = {str(g.index): g.uuid for g in snap.gpus}
    return {
        index[d.device]: (d.meter.up, dict(d.meter.rejected))
        for d in snap.devices
        if d.source == "drm"
    }


def counted(snap: Snapshot) -> dict[str, float]:
    return {g.uuid: sum(e.joules for e in g.energy) for g in snap.gpus}


@pytest.mark.slow
@settings(deadline=None, max_examples=10, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(sorted(METERED)), st.sampled_from(sorted(FAULTS)), min_size=1)
)
def test_each_hostile_card_value_shows_on_its_gpu_only(faults: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="wattprobe-drm-") as tmp:
        rig = Rig(Path(tmp))
        rig.step()
        rig.step()
        before_snap = rig.step()
        before, start = health(before_snap), counted(before_snap)
        assert set(before) == set(METERED) and all(up for up, _ in before.values()), before
        saved = {pci: rig.path(pci).read_text() for pci in faults}
        for pci, fault in faults.items():
            FAULTS[fault][0](rig.path(pci))
        snap = rig.step(skip=frozenset(faults))
        after, now = health(snap), counted(snap)
        for pci in METERED:
            up, rejected = after[pci]
            was = before[pci][1]
            if pci in faults:
                reason = FAULTS[faults[pci]][1]
                assert not up, (pci, faults)
                assert rejected.get(reason, 0) == was.get(reason, 0) + 1, (pci, rejected)
                assert now[pci] == start[pci], (pci, faults)
            else:
                assert up, (pci, faults, after[pci])
                assert rejected == was, (pci, rejected)
                assert abs(now[pci] - start[pci] - WATTS) < 1e-6, pci
        for pci in faults:
            path = rig.path(pci)
            if path.is_dir():
                path.rmdir()
            elif not path.is_file():
                path.unlink()
            write_atomic(path, saved[pci])
        rig.step()
        final = rig.step()
        assert all(up for up, _ in health(final).values()), health(final)


HOSTILE_FDINFO = {
    "nan": "drm-driver:\tamdgpu\ndrm-client-id:\t77\ndrm-pdev:\t{pdev}\ndrm-engine-gfx:\tnan ns\n",
    "negative": "drm-driver:\tamdgpu\ndrm-client-id:\t77\ndrm-pdev:\t{pdev}\n"
    "drm-engine-gfx:\t-5000000 ns\n",
    "overlong": "drm-driver:\tamdgpu\ndrm-client-id:\t77\ndrm-pdev:\t{pdev}\n"
    f"drm-engine-gfx:\t{'9' * 25} ns\ndrm-memory-vram:\t{'9' * 25} KiB\n",
    "huge": "drm-driver:\tamdgpu\ndrm-client-id:\t77\ndrm-pdev:\t{pdev}\n" + "x" * 200_000,
}


@pytest.mark.parametrize("kind", [*sorted(HOSTILE_FDINFO), "fifo"])
def test_hostile_fdinfo_never_reaches_a_cards_health_or_energy(tmp_path: Path, kind: str) -> None:
    rig = Rig(tmp_path)
    rig.step()
    before_snap = rig.step()
    start = counted(before_snap)
    proc = tmp_path / "proc"
    pid = 4242
    card: Card = RDNA3
    if kind == "fifo":
        write_fd(proc, pid, 3, card.dev_node, "")
        fdinfo = proc / str(pid) / "fdinfo" / "3"
        fdinfo.unlink()
        os.mkfifo(fdinfo)  # refused at once by the reader, not waited on
    else:
        write_fd(proc, pid, 3, card.dev_node, HOSTILE_FDINFO[kind].format(pdev=card.pci))
    for _ in range(2):
        snap = rig.step()
    assert all(up for up, _ in health(snap).values()), health(snap)
    assert all(not rejected for _, rejected in health(snap).values())
    now = counted(snap)
    for pci in METERED:
        assert abs(now[pci] - start[pci] - 2 * WATTS) < 1e-6, pci
    assert next(s for s in snap.sources if s.source == "drm").up
