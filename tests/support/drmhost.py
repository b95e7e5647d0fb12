"""AMD and Intel GPUs in fixture sysfs and procfs trees, in the kernel's own formats.

    python -m tests.support.drmhost DEST    # writes DEST/sys and DEST/proc (tests/fixtures/drm is
    this)

sysfs, as a 6.x kernel lays it out: /sys/class/drm/cardN -> ../../devices/pci.../<PCI>/drm/cardN,
whose `device` links back to the PCI device (vendor, device, uevent with DRIVER= and
PCI_SLOT_NAME=, amdgpu's gpu_busy_percent and mem_info_vram_*), the connectors (card0-DP-1) and
render nodes beside the cards, and the device's hwmon/hwmonN (also linked from /sys/class/hwmon).

procfs: /proc/<pid>/fd/<fd> links to /dev/dri/renderD*, and /proc/<pid>/fdinfo/<fd> in the
formats drm_show_fdinfo and the drivers print (Documentation/gpu/drm-usage-stats.rst): amdgpu
before 6.9 (drm-memory-*, amd-* lines), amdgpu since (drm_print_memory_stats: drm-total-* ...;
engines with no use left out), xe (drm-cycles-*, drm-total-cycles-*, drm-engine-capacity-*).
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from pathlib import Path

AMD = "0x1002"
INTEL = "0x8086"


@dataclass(frozen=True)
class Card:
    card: int
    pci: str
    vendor: str
    device_id: str
    driver: str
    render: int  # renderD<N>
    hwmon: int | None = None
    hwmon_files: tuple[tuple[str, str], ...] = ()  # name -> contents
    device_files: tuple[tuple[str, str], ...] = ()

    @property
    def bridge(self) -> str:
        """The parent PCI path: integrated GPUs hang off the root complex."""
        return "pci0000:00" if self.pci.startswith("0000:00:") else "pci0000:00/0000:00:01.1"

    @property
    def dev_node(self) -> str:
        return f"/dev/dri/renderD{self.render}"


# An RDNA3 card (Radeon RX 7900 XTX): power1_input, the PPT label, edge/junction/mem sensors.
RDNA3 = Card(
    card=0,
    pci="0000:0c:00.0",
    vendor=AMD,
    device_id="0x744c",
    driver="amdgpu",
    render=128,
    hwmon=7,
    hwmon_files=(
        ("name", "amdgpu"),
        ("power1_input", "85000000"),
        ("power1_label", "PPT"),
        ("power1_cap", "327000000"),
        ("power1_cap_max", "402000000"),
        ("temp1_input", "45000"),
        ("temp1_label", "edge"),
        ("temp2_input", "52000"),
        ("temp2_label", "junction"),
        ("temp3_input", "60000"),
        ("temp3_label", "mem"),
    ),
    device_files=(
        ("gpu_busy_percent", "37"),
        ("mem_info_vram_used", "2147483648"),
        ("mem_info_vram_total", "25753026560"),
        ("product_name", ""),
    ),
)
# An older amdgpu card (Vega 10, Radeon Instinct MI25): power1_average, product name from FRU.
VEGA = Card(
    card=1,
    pci="0000:0f:00.0",
    vendor=AMD,
    device_id="0x6860",
    driver="amdgpu",
    render=129,
    hwmon=8,
    hwmon_files=(
        ("name", "amdgpu"),
        ("power1_average", "112000000"),
        ("power1_label", "PPT"),
        ("power1_cap", "300000000"),
        ("temp1_input", "38000"),
        ("temp1_label", "edge"),
    ),
    device_files=(
        ("gpu_busy_percent", "0"),
        ("mem_info_vram_used", "17825792"),
        ("mem_info_vram_total", "17163091968"),
        ("product_name", "Radeon Instinct MI25"),
    ),
)
# An Intel discrete GPU (Arc B580, xe): an energy counter, power1_max, no gpu_busy_percent.
ARC = Card(
    card=2,
    pci="0000:13:00.0",
    vendor=INTEL,
    device_id="0xe20b",
    driver="xe",
    render=130,
    hwmon=9,
    hwmon_files=(
        ("name", "xe"),
        ("energy1_input", "123456789000"),
        ("power1_max", "190000000"),
        ("power1_rated_max", "190000000"),
        ("temp2_input", "41000"),
        ("temp2_label", "pkg"),
    ),
)
# An integrated Intel GPU (i915): no hwmon, its power is in the CPU package.
IGPU = Card(card=3, pci="0000:00:02.0", vendor=INTEL, device_id="0xa780", driver="i915", render=131)
CARDS = (RDNA3, VEGA, ARC, IGPU)


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink():
        path.unlink()
    path.symlink_to(target)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def device_dir(sys: Path, card: Card) -> Path:
    return sys / "devices" / card.bridge / card.pci


def hwmon_dir(sys: Path, card: Card) -> Path:
    return device_dir(sys, card) / "hwmon" / f"hwmon{card.hwmon}"


def write_card(sys: Path, card: Card) -> None:
    dev = device_dir(sys, card)
    rel = f"../../devices/{card.bridge}/{card.pci}"
    vendor_id = card.vendor[2:].upper()
    _write(dev / "vendor", f"{card.vendor}\n")
    _write(dev / "device", f"{card.device_id}\n")
    _write(dev / "class", "0x030000\n")
    _write(
        dev / "uevent",
        f"DRIVER={card.driver}\nPCI_CLASS=30000\n"
        f"PCI_ID={vendor_id}:{card.device_id[2:].upper()}\nPCI_SUBSYS_ID=1DA2:E471\n"
        f"PCI_SLOT_NAME={card.pci}\n"
        f"MODALIAS=pci:v0000{vendor_id}d0000{card.device_id[2:].upper()}sv00001DA2sd0000E471"
        "bc03sc00i00\n",
    )
    for name, text in card.device_files:
        _write(dev / name, f"{text}\n")
    for node in (f"card{card.card}", f"renderD{card.render}"):
        _write(
            dev / "drm" / node / "dev", f"226:{card.render if 'render' in node else card.card}\n"
        )
        _link(dev / "drm" / node / "device", f"../../../{card.pci}")
        _link(sys / "class" / "drm" / node, f"{rel}/drm/{node}")
    connector = f"card{card.card}-DP-1"
    _write(dev / "drm" / f"card{card.card}" / connector / "status", "disconnected\n")
    _link(sys / "class" / "drm" / connector, f"{rel}/drm/card{card.card}/{connector}")
    if card.hwmon is not None:
        h = hwmon_dir(sys, card)
        for name, text in card.hwmon_files:
            _write(h / name, f"{text}\n")
        _link(h / "device", f"../../../{card.pci}")
        _link(sys / "class" / "hwmon" / f"hwmon{card.hwmon}", f"{rel}/hwmon/hwmon{card.hwmon}")


# -- fdinfo ----------------------------------------------------------------------------------

_HEADER = "pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t{ino}\n"
_DRM = "drm-driver:\t{driver}\ndrm-client-id:\t{client}\ndrm-pdev:\t{pdev}\n"


def amdgpu_fdinfo(
    pdev: str,
    client: int,
    *,
    gfx_ns: int,
    compute_ns: int = 0,
    dma_ns: int = 0,
    vram_kib: int = 0,
    gtt_kib: int = 0,
    legacy: bool = False,
) -> str:
    """amdgpu_show_fdinfo's text: legacy is the pre-6.9 layout (drm-memory-*, every engine)."""
    text = _HEADER.format(ino=1000 + client) + _DRM.format(
        driver="amdgpu", client=client, pdev=pdev
    )
    text += f"pasid:\t{32768 + client}\n"
    if legacy:
        text += (
            f"drm-memory-vram:\t{vram_kib} KiB\ndrm-memory-gtt: \t{gtt_kib} KiB\n"
            "drm-memory-cpu: \t0 KiB\namd-memory-visible-vram:\t0 KiB\n"
            "amd-evicted-vram:\t0 KiB\namd-evicted-visible-vram:\t0 KiB\n"
            f"amd-requested-vram:\t{vram_kib} KiB\namd-requested-visible-vram:\t0 KiB\n"
            f"amd-requested-gtt:\t{gtt_kib} KiB\n"
        )
        engines = {"gfx": gfx_ns, "compute": compute_ns, "dma": dma_ns, "dec": 0, "enc": 0}
        for name, ns in engines.items():
            text += f"drm-engine-{name}:\t{ns} ns\n"
        return text
    for region, kib in (("cpu", 0), ("gtt", gtt_kib), ("vram", vram_kib)):
        text += (
            f"drm-total-{region}:\t{kib} KiB\ndrm-shared-{region}:\t0\n"
            f"drm-active-{region}:\t0\ndrm-resident-{region}:\t{kib} KiB\n"
            f"drm-purgeable-{region}:\t0\n"
        )
    text += f"amd-evicted-vram:\t0 KiB\namd-requested-vram:\t{vram_kib} KiB\n"
    text += f"amd-requested-gtt:\t{gtt_kib} KiB\n"
    for name, ns in (("gfx", gfx_ns), ("compute", compute_ns), ("dma", dma_ns)):
        if ns:  # amdgpu prints only engines the client used
            text += f"drm-engine-{name}:\t{ns} ns\n"
    return text


def xe_fdinfo(
    pdev: str, client: int, *, rcs_cycles: int, ccs_cycles: int = 0, total: int, vram_kib: int = 0
) -> str:
    """xe_drm_client_fdinfo's text: memory per region, then cycles per engine class."""
    text = _HEADER.format(ino=2000 + client) + _DRM.format(driver="xe", client=client, pdev=pdev)
    for region, kib in (("system", 0), ("gtt", 192), ("vram0", vram_kib)):
        text += (
            f"drm-total-{region}:\t{kib} KiB\ndrm-shared-{region}:\t0\n"
            f"drm-active-{region}:\t0\ndrm-resident-{region}:\t{kib} KiB\n"
        )
        if region != "gtt":
            text += f"drm-purgeable-{region}:\t0\n"
    for engine, cycles, capacity in (
        ("rcs", rcs_cycles, 1),
        ("bcs", 0, 1),
        ("vcs", 0, 2),
        ("vecs", 0, 2),
        ("ccs", ccs_cycles, 4),
    ):
        text += f"drm-cycles-{engine}:\t{cycles}\ndrm-total-cycles-{engine}:\t{total}\n"
        if capacity > 1:
            text += f"drm-engine-capacity-{engine}:\t{capacity}\n"
    return text


def i915_fdinfo(pdev: str, client: int, *, render_ns: int) -> str:
    """i915_drm_client_fdinfo's text on an integrated GPU (system memory only)."""
    text = _HEADER.format(ino=3000 + client) + _DRM.format(driver="i915", client=client, pdev=pdev)
    text += "drm-total-system0:\t4096 KiB\ndrm-shared-system0:\t0\ndrm-active-system0:\t0\n"
    text += "drm-resident-system0:\t4096 KiB\ndrm-purgeable-system0:\t0\n"
    text += f"drm-engine-render:\t{render_ns} ns\ndrm-engine-copy:\t0 ns\n"
    text += "drm-engine-video:\t0 ns\ndrm-engine-capacity-video:\t2\n"
    text += "drm-engine-video-enhance:\t0 ns\n"
    return text


def write_fd(proc: Path, pid: int, fd: int, target: str, fdinfo: str) -> None:
    """An open fd of a process: its link and its fdinfo (rewritten in place to move counters)."""
    _link(proc / str(pid) / "fd" / str(fd), target)
    _write(proc / str(pid) / "fdinfo" / str(fd), fdinfo)


def remove_fd(proc: Path, pid: int, fd: int) -> None:
    (proc / str(pid) / "fd" / str(fd)).unlink()
    (proc / str(pid) / "fdinfo" / str(fd)).unlink()


# The checked-in tree's processes: (pid, fd, target, fdinfo)
PID_A, PID_B, PID_C, PID_OLD, PID_ARC, PID_IGPU, PID_PLAIN, PID_GARBAGE = (
    4101,
    4102,
    4103,
    4104,
    4105,
    4106,
    4107,
    4108,
)
GARBAGE_FDINFO = "pos:\t0\nflags:\t02\ndrm-driver:\tamdgpu\ndrm-client-id:\tnot-a-number\n"


def write_processes(proc: Path) -> None:
    rdna = RDNA3.pci
    # pod A's process: one client on the RDNA3 card through two fds (dup'ed), and one on the Arc
    write_fd(proc, PID_A, 5, RDNA3.dev_node, amdgpu_fdinfo(rdna, 18, gfx_ns=3_000_000_000))
    write_fd(proc, PID_A, 6, RDNA3.dev_node, amdgpu_fdinfo(rdna, 18, gfx_ns=3_000_000_000))
    write_fd(proc, PID_A, 7, ARC.dev_node, xe_fdinfo(ARC.pci, 4, rcs_cycles=3000, total=10_000))
    write_fd(proc, PID_B, 5, RDNA3.dev_node, amdgpu_fdinfo(rdna, 19, gfx_ns=1_000_000_000))
    # pod C's process inherited pod A's client (fork): the same client id, counted once
    write_fd(proc, PID_C, 9, RDNA3.dev_node, amdgpu_fdinfo(rdna, 18, gfx_ns=3_000_000_000))
    write_fd(
        proc,
        PID_OLD,
        5,
        VEGA.dev_node,
        amdgpu_fdinfo(VEGA.pci, 7, gfx_ns=5_000, vram_kib=16384, legacy=True),
    )
    write_fd(proc, PID_ARC, 5, ARC.dev_node, xe_fdinfo(ARC.pci, 5, rcs_cycles=1000, total=10_000))
    write_fd(proc, PID_IGPU, 5, IGPU.dev_node, i915_fdinfo(IGPU.pci, 2, render_ns=7_000))
    _link(proc / str(PID_PLAIN) / "fd" / "0", "/dev/null")
    _link(proc / str(PID_PLAIN) / "fd" / "1", "socket:[12345]")
    _write(proc / str(PID_PLAIN) / "fdinfo" / "0", "pos:\t0\nflags:\t0100002\nmnt_id:\t25\n")
    write_fd(proc, PID_GARBAGE, 5, RDNA3.dev_node, GARBAGE_FDINFO)
    _write(proc / "sys" / "kernel" / "osrelease", "6.12.0-amd64\n")


def write_tree(dest: Path, cards: tuple[Card, ...] = CARDS) -> None:
    for card in cards:
        write_card(dest / "sys", card)
    write_processes(dest / "proc")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    write_tree(parser.parse_args().dest)


if __name__ == "__main__":
    main()
