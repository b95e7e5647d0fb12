"""AMD (amdgpu) and Intel (i915, xe) GPUs through the kernel's own interfaces: a GPU backend.

Discovery: <sysfs>/class/drm/cardN/device, a PCI device of vendor 0x1002 (AMD) or 0x8086 (Intel)
bound (uevent DRIVER=) to amdgpu, i915 or xe. Its PCI address (uevent PCI_SLOT_NAME=) is its
identity: the GpuReading's uuid and pci_bus_id, which is also the device ID AMD's and Intel's
Kubernetes device plugins give PodResources.

Per GPU, from the device directory:
- utilization: amdgpu's gpu_busy_percent; elsewhere the busiest engine class's share of the
  interval from the clients' fdinfo engine time (exporter/sources/gpu/drm/clients.py);
- memory: amdgpu's mem_info_vram_used / mem_info_vram_total (bytes);
- hwmon/hwmonN under the device: power1_input (RDNA3 and newer: instantaneous) or power1_average
  (older amdgpu) in uW, power1_cap (amdgpu) or power1_max (i915/xe) in uW as the limit,
  energy1_input in uJ (Intel discrete GPUs: a counter, preferred over power),
  temp*_input in millidegrees, the "edge" label preferred (else the first).
Per process, from /proc/<pid>/fdinfo of fds on /dev/dri: engine time (ProcessEngineTime) and
device-local memory (GpuProcess.used_memory_bytes), clients deduplicated by drm-client-id.

Only GPUs with a hwmon power or energy sensor are read (metered): an integrated GPU has none, its
power is part of the CPU package that RAPL measures, and a GPU with nothing to split would only
show as an unreadable device. `check` lists every GPU found, saying which are not metered.
"""

from __future__ import annotations

import logging
import os
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from exporter.host.files import fault_for, read_int, read_text, short_error
from exporter.model.config import Config
from exporter.model.gpu_readings import GpuProcess, GpuReading, GpuReadings, ProcessEngineTime
from exporter.model.readings import ABSENT, SourceAbsent, SourceError
from exporter.model.spec import (
    GPU,
    BuildContext,
    CheckResult,
    Finding,
    SourceSpec,
    missing_sysfs_class,
)
from exporter.sources.gpu.drm.clients import (
    RECHECK_EVERY,
    ClientUsage,
    DrmClientScanner,
    EngineDeltas,
    busy_ratio,
)
from exporter.sources.gpu.drm.podresources import AMD, INTEL

log = logging.getLogger(__name__)

NAME = "drm"
VENDORS = {"0x1002": "amd", "0x8086": "intel"}
DRIVERS = ("amdgpu", "i915", "xe")
_CARD = re.compile(r"^card(\d+)$")
_TEMP = re.compile(r"^temp(\d+)_input$")


@dataclass(frozen=True)
class DrmCard:
    """A DRM GPU found in sysfs."""

    card: str  # card1
    device: str  # the PCI device directory
    pci: str  # 0000:03:00.0
    vendor: str  # amd or intel
    driver: str  # amdgpu, i915 or xe
    device_id: str  # PCI device id, 0x744c
    hwmon: str | None  # the device's hwmon directory, if it has one


def _uevent(device: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in read_text(f"{device}/uevent").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key] = value
    return out


def _hwmon_dir(device: str) -> str | None:
    try:
        entries = sorted(os.listdir(f"{device}/hwmon"))
    except OSError:
        return None
    return f"{device}/hwmon/{entries[0]}" if entries else None


def discover(sysfs: Path) -> list[DrmCard]:
    """The AMD and Intel GPUs under <sysfs>/class/drm, by card number; each PCI device once."""
    base = sysfs / "class" / "drm"
    try:
        entries = os.listdir(base)
    except OSError:
        return []
    cards: list[DrmCard] = []
    seen: set[str] = set()
    for entry in sorted((e for e in entries if _CARD.match(e)), key=lambda e: int(e[4:])):
        device = os.path.realpath(base / entry / "device")
        try:
            vendor = read_text(f"{device}/vendor")
            uevent = _uevent(device)
        except OSError:
            continue
        driver = uevent.get("DRIVER", "")
        pci = uevent.get("PCI_SLOT_NAME", "")
        if vendor not in VENDORS or driver not in DRIVERS or not pci or pci in seen:
            continue
        seen.add(pci)
        try:
            device_id = read_text(f"{device}/device")
        except OSError:
            device_id = ""
        cards.append(
            DrmCard(entry, device, pci, VENDORS[vendor], driver, device_id, _hwmon_dir(device))
        )
    return cards


def _maybe_int(path: str) -> int | None:
    try:
        return read_int(path)
    except (OSError, ValueError):
        return None


def _model(card: DrmCard) -> str:
    try:
        product = read_text(f"{card.device}/product_name")
    except OSError:
        product = ""
    if product:
        return product
    return f"{'AMD' if card.vendor == 'amd' else 'Intel'} GPU {card.device_id} ({card.driver})"


def _temperature(hwmon: str) -> float | None:
    try:
        names = os.listdir(hwmon)
    except OSError:
        return None
    inputs = sorted((int(m.group(1)), n) for n in names if (m := _TEMP.match(n)))
    chosen = None
    for index, name in inputs:
        try:
            label = read_text(f"{hwmon}/temp{index}_label")
        except OSError:
            label = ""
        if label == "edge":
            chosen = name
            break
    if chosen is None and inputs:
        chosen = inputs[0][1]
    value = _maybe_int(f"{hwmon}/{chosen}") if chosen else None
    return value / 1000 if value is not None else None


@dataclass(frozen=True)
class PowerFiles:
    """Which hwmon power and energy files a card has (what `check` reports)."""

    power: str | None  # power1_input or power1_average
    energy: str | None  # energy1_input
    cap: str | None  # power1_cap or power1_max


def power_files(card: DrmCard) -> PowerFiles:
    if card.hwmon is None:
        return PowerFiles(None, None, None)

    def first(*names: str) -> str | None:
        return next((n for n in names if os.path.exists(f"{card.hwmon}/{n}")), None)

    return PowerFiles(
        first("power1_input", "power1_average"),
        first("energy1_input"),
        first("power1_cap", "power1_max"),
    )


class DrmSource:
    """The DRM GPU backend (exporter/sources/gpu/backend.py's GpuBackend)."""

    name = NAME

    def __init__(
        self,
        sysfs: Path,
        procfs: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        recheck_every: int = RECHECK_EVERY,
    ) -> None:
        self._sysfs = sysfs
        try:
            self._kernel = read_text(str(procfs / "sys" / "kernel" / "osrelease"))
        except OSError:
            self._kernel = ""
        self._clients = DrmClientScanner(procfs, recheck_every)
        self._deltas = EngineDeltas()
        self._clock = clock
        self._last: float | None = None
        self._indexes: dict[str, int] = {}  # PCI address -> index, in order of first sight
        self._seen = False
        self._devices: frozenset[str] = frozenset()  # PCI addresses with fdinfo clients
        self.walked = 0  # processes whose fds the last read listed (benchmarks, tests)

    def read(self) -> GpuReadings:
        found = discover(self._sysfs)
        cards = [c for c in found if metered(c)]
        if not cards:
            where = self._sysfs / "class" / "drm"
            if self._seen:
                raise SourceError("vanished", f"the AMD/Intel GPUs under {where} are gone")
            if found:
                names = ", ".join(f"{c.card} ({c.driver})" for c in found)
                raise SourceAbsent(f"no power or energy sensor on the GPUs under {where}: {names}")
            raise SourceAbsent(f"no amdgpu, i915 or xe GPU under {where}")
        self._seen = True
        now = self._clock()
        dt_ns = (now - self._last) * 1e9 if self._last is not None else 0.0
        self._last = now
        usage: Mapping[str, Mapping[int, ClientUsage]] | None
        unread = ""
        try:
            scan = self._clients.scan()
        except OSError as exc:
            log.debug("drm: no per-process stats: %s", exc)
            usage = None
            # the next scan's deltas cover this interval: its energy waits for them
            unread = "fdinfo scan failed"
        else:
            self.walked = scan.walked
            usage = self._deltas.update(scan)
            self._devices = frozenset(pdev for pdev, _client in scan.clients)
        for card in cards:
            self._indexes.setdefault(card.pci, len(self._indexes))
        gpus = tuple(self._read_card(card, usage, dt_ns, unread) for card in cards)
        return GpuReadings(
            driver_version=self._kernel,  # amdgpu, i915 and xe ship with the kernel
            nvml_version="",
            cuda_version="",
            gpus=gpus,
        )

    def close(self) -> None:
        pass

    def clients_by_device(self) -> frozenset[str]:
        """The GPUs (PCI addresses) that had DRM clients in fdinfo at the last read."""
        return self._devices

    def _read_card(
        self,
        card: DrmCard,
        usage: Mapping[str, Mapping[int, ClientUsage]] | None,
        dt_ns: float,
        unread: str,
    ) -> GpuReading:
        files = power_files(card)
        hwmon = card.hwmon or ""
        power_uw, power_fault = _sensor(hwmon, files.power)
        energy_uj, energy_fault = _sensor(hwmon, files.energy)
        cap_uw = _maybe_int(f"{hwmon}/{files.cap}") if files.cap else None
        clients = usage.get(card.pci, {}) if usage is not None else {}
        busy = _maybe_int(f"{card.device}/gpu_busy_percent")
        utilization = busy / 100 if busy is not None else None
        if utilization is None and usage is not None:
            utilization = busy_ratio(clients.values(), dt_ns)
        return GpuReading(
            index=self._indexes[card.pci],
            uuid=card.pci,
            name=_model(card),
            pci_bus_id=card.pci,
            utilization_ratio=utilization,
            memory_used_bytes=_maybe_int(f"{card.device}/mem_info_vram_used"),
            memory_total_bytes=_maybe_int(f"{card.device}/mem_info_vram_total"),
            temperature_c=_temperature(hwmon) if hwmon else None,
            power_w=power_uw / 1e6 if power_uw is not None else None,
            power_limit_w=cap_uw / 1e6 if cap_uw else None,
            energy_mj=energy_uj // 1000 if energy_uj is not None else None,
            processes=tuple(
                GpuProcess(pid=pid, used_memory_bytes=u.memory_bytes)
                for pid, u in sorted(clients.items())
            ),
            process_engine_time=_engine_time(clients) if usage is not None else None,
            vendor=card.vendor,
            backend=NAME,
            device_names=(card.card,),
            # a sensor the card has that gave no number: the GPU is faulted, not read on the
            # other sensor alone (that would hide a hostile energy1_input behind power1_*)
            fault=energy_fault or power_fault,
            processes_unread=unread,
        )


def _sensor(hwmon: str, name: str | None) -> tuple[int | None, str]:
    """A card's hwmon power or energy value and "", or None and why it could not be read."""
    if name is None:
        return None, ""
    path = f"{hwmon}/{name}"
    try:
        return read_int(path), ""
    except (OSError, ValueError) as exc:
        log.debug("drm: %s: %s", path, short_error(exc))
        return None, fault_for(exc)


def _engine_time(clients: Mapping[int, ClientUsage]) -> tuple[ProcessEngineTime, ...]:
    """Per PID busy time; ns where any client reports ns, else cycles (never mixed on a GPU)."""
    if any(u.busy_ns for u in clients.values()):
        return tuple(ProcessEngineTime(pid, float(u.busy_ns)) for pid, u in sorted(clients.items()))
    return tuple(ProcessEngineTime(pid, float(u.busy_cycles)) for pid, u in sorted(clients.items()))


def metered(card: DrmCard) -> bool:
    """Whether the backend reads the GPU: it has a hwmon power or energy sensor."""
    files = power_files(card)
    return bool(files.power or files.energy)


def drm_gpu_devices(sysfs: Path) -> frozenset[str]:
    """PCI addresses of the DRM GPUs this backend meters: the hwmon source leaves their sensors
    to it (exporter/sources/power/hwmon.py)."""
    return frozenset(card.pci for card in discover(sysfs) if metered(card))


# -- wattprobe check -------------------------------------------------------------------------

FIXES = {
    ABSENT: "no AMD or Intel GPU bound to amdgpu, i915 or xe: nothing to fix unless the node has "
    "one (then load its driver)",
    "permission denied": "run as root or grant CAP_DAC_READ_SEARCH and CAP_SYS_PTRACE "
    "(fdinfo of other processes)",
}


def lacks(card: DrmCard, fdinfo_clients: bool) -> list[str]:
    """What a found GPU lacks, in words, for `check`."""
    missing = []
    files = power_files(card)
    if card.hwmon is None:
        missing.append(
            "no hwmon, not metered (an integrated GPU's power is in the CPU package: RAPL)"
        )
    elif not files.power and not files.energy:
        missing.append("hwmon without power or energy, not metered")
    if not os.path.exists(f"{card.device}/gpu_busy_percent") and not fdinfo_clients:
        missing.append("no utilization (no gpu_busy_percent, no fdinfo engine time)")
    if not fdinfo_clients:
        missing.append(
            "no DRM client in fdinfo (no process uses it, or a kernel without drm-usage-stats): "
            "energy is split evenly or by ioctls"
        )
    return missing


def probe(config: Config, _earlier: Sequence[CheckResult], _context: BuildContext) -> Finding:
    missing = missing_sysfs_class(config, "DRM GPU")
    if missing is not None:
        return missing
    source = DrmSource(config.sysfs, config.procfs)
    try:
        reading = source.read()
    except SourceError as exc:
        return Finding.failed(exc, FIXES.get(exc.reason, ""))
    clients = source.clients_by_device()
    items = []
    for card in discover(config.sysfs):
        gaps = lacks(card, card.pci in clients)
        items.append(
            f"{card.card} {card.pci} {_model(card)} [{card.driver}]"
            + (f": {'; '.join(gaps)}" if gaps else "")
        )
    summary = ", ".join(f"{g.pci_bus_id} ({g.vendor})" for g in reading.gpus)
    return Finding.works(f"{len(reading.gpus)} GPUs: {summary}", items)


SPEC = SourceSpec(
    name=NAME,
    kind=GPU,
    default_on=True,
    probe=probe,
    fixes=FIXES,
    gpu_backend=lambda config: DrmSource(config.sysfs, config.procfs),
    gpu_metered_pci=lambda config: partial(drm_gpu_devices, config.sysfs),
    device_plugins=(AMD, INTEL),
)
