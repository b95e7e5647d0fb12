"""RAPL energy counters from the powercap class (/sys/class/powercap).

Zones are intel-rapl:N (package-N, or psys), their subzones intel-rapl:N:M (core, uncore, dram),
intel-rapl-mmio:N (the same package counter again, read through MMIO) and whatever else the
powercap class offers with an energy_uj file (AMD CPUs use the same driver names).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.host.files import fault_for, read_int, read_text, reason_for, short_error
from exporter.host.hostfile import read_text_bounded
from exporter.model.config import Config
from exporter.model.readings import ABSENT, EnergyReading, SourceAbsent, SourceError
from exporter.model.spec import (
    POWER,
    BuildContext,
    CheckResult,
    Finding,
    SourceSpec,
    fault_note,
    missing_sysfs_class,
    zones_found,
)

log = logging.getLogger(__name__)

_INDEX_SUFFIX = re.compile(r"-\d+$")
# /proc/cpuinfo: ~1.5 KiB per CPU
MAX_CPUINFO_BYTES = 8 << 20

# No RAPL domain draws this much: the largest server packages are rated around 400 W. A tighter
# bound than the generic one makes a counter reset less likely to pass for a wrap.
RAPL_MAX_POWER_W = 1_000.0

# Zone kinds split among workloads, in order of preference (see SPEC)
WORKLOAD_ZONES = ("package", "dram")
FALLBACK_ZONES = ("psys",)

FIX_PERMISSION = (
    "energy_uj is readable by root only since Linux 5.10 (CVE-2020-8694): run as root, "
    "or grant CAP_DAC_READ_SEARCH"
)


@dataclass(frozen=True, slots=True)
class RaplZone:
    device: str  # powercap directory name, e.g. intel-rapl:0:1
    name: str  # content of its name file, e.g. package-0, dram
    zone: str  # the name without its socket suffix: package, dram, core, uncore, psys
    path: str
    max_energy_uj: int | None


def zone_kind(name: str) -> str:
    """'package-1' -> 'package'; 'dram' -> 'dram'."""
    return _INDEX_SUFFIX.sub("", name.strip().lower()) or "unknown"


def discover_zones(powercap: str) -> tuple[list[RaplZone], list[str]]:
    """All zones with an energy counter, minus MMIO duplicates of MSR zones.

    Returns the zones and the names of the duplicates left out.
    """
    try:
        entries = sorted(os.listdir(powercap))
    except FileNotFoundError:
        return [], []
    zones: list[RaplZone] = []
    for entry in entries:
        path = f"{powercap}/{entry}"
        if ":" not in entry or not os.path.exists(f"{path}/energy_uj"):
            continue  # control-type directories (intel-rapl) and zones without a counter
        try:
            name = read_text(f"{path}/name")
        except OSError:
            name = entry
        try:
            max_uj: int | None = read_int(f"{path}/max_energy_range_uj")
        except (OSError, ValueError):
            max_uj = None
        zones.append(RaplZone(entry, name, zone_kind(name), path, max_uj))
    msr_names = {z.name for z in zones if "-mmio" not in z.device}
    kept = [z for z in zones if "-mmio" not in z.device or z.name not in msr_names]
    dropped = [f"{z.device} ({z.name})" for z in zones if z not in kept]
    return kept, dropped


class RaplSource:
    name = "rapl"

    def __init__(self, sysfs: Path) -> None:
        self.powercap = str(sysfs / "class" / "powercap")
        self.duplicates: list[str] = []
        # zones found at some point: losing all of them later is a fault, not absent hardware
        self._seen: set[str] = set()

    def read(self) -> list[EnergyReading]:
        """Every zone's counter. A zone that fails is returned with its fault and no value, so
        the fault is visible per device; if all fail, SourceError."""
        zones, self.duplicates = discover_zones(self.powercap)
        if not zones and self._seen:
            gone = ", ".join(sorted(self._seen))
            raise SourceError("vanished", f"RAPL zones {gone} are gone from {self.powercap}")
        if not zones:
            raise SourceAbsent(f"no RAPL zones with energy_uj under {self.powercap}")
        self._seen.update(z.device for z in zones)
        readings: list[EnergyReading] = []
        failure: tuple[str, str] | None = None
        for z in zones:
            try:
                energy = read_int(f"{z.path}/energy_uj")
            except (OSError, ValueError) as exc:
                failure = failure or (reason_for(exc), f"{z.path}/energy_uj: {short_error(exc)}")
                readings.append(
                    EnergyReading(
                        z.zone,
                        z.device,
                        self.name,
                        max_energy_uj=z.max_energy_uj,
                        max_power_w=RAPL_MAX_POWER_W,
                        fault=fault_for(exc),
                    )
                )
                continue
            readings.append(
                EnergyReading(
                    z.zone,
                    z.device,
                    self.name,
                    energy,
                    z.max_energy_uj,
                    max_power_w=RAPL_MAX_POWER_W,
                )
            )
        if failure is not None and all(r.fault for r in readings):
            reason, detail = failure
            if reason == "permission denied":
                detail = f"{detail}; {FIX_PERMISSION}"
            raise SourceError(reason, detail, tuple(readings))
        if failure is not None:
            log.debug("rapl: some zones unreadable: %s", failure[1])
        return readings


# -- wattprobe check -------------------------------------------------------------------------

FIX_ABSENT = "no RAPL here (VMs, non-x86 boards): nothing to fix; hwmon or the estimate is used"
# what stands in for RAPL, in the hints above, when --no-collector.estimated switched it off
STAND_IN = "hwmon or the estimate is used"
STAND_IN_NO_ESTIMATE = "hwmon is used if it works (the estimate is off: --no-collector.estimated)"
# failures of a driver rather than of access: what to look at
FIX_RAPL_DRIVER = (
    "the powercap driver misbehaves: look for intel_rapl in `dmesg`, then reload it "
    "(`modprobe -r intel_rapl_msr && modprobe intel_rapl_msr`)"
)
FIX_RAPL_VM = (
    "this is a virtual machine: hypervisors rarely pass RAPL through, nothing to fix here; "
    "hwmon or the estimate is used"
)
FIX_RAPL_BARE_METAL = (
    "x86 bare metal has RAPL: load its driver with `modprobe intel_rapl_msr` (AMD Zen needs "
    "Linux 5.8 or newer), then check that /sys/class/powercap/intel-rapl:0 appears"
)
FIXES = {ABSENT: FIX_ABSENT, "permission denied": FIX_PERMISSION}


def _is_virtual_machine(procfs: Path) -> bool | None:
    """From the cpuinfo flags: True in a VM, False on x86 bare metal, None when unknown."""
    try:
        text = read_text_bounded(str(procfs / "cpuinfo"), MAX_CPUINFO_BYTES)
    except OSError:
        return None
    flags = next((line for line in text.splitlines() if line.startswith("flags")), None)
    if flags is None:
        return None  # not x86
    return "hypervisor" in flags.split()


def probe(config: Config, _earlier: Sequence[CheckResult], _context: BuildContext) -> Finding:
    missing = missing_sysfs_class(config, "RAPL zone")
    if missing is not None:
        return missing
    source = RaplSource(config.sysfs)
    try:
        readings = source.read()
    except SourceError as exc:
        fix = FIXES.get(exc.reason, FIX_RAPL_DRIVER)
        if exc.reason == ABSENT:
            vm = _is_virtual_machine(config.procfs)
            if vm is not None:
                fix = FIX_RAPL_VM if vm else FIX_RAPL_BARE_METAL
            if not config.collector_on("estimated"):
                fix = fix.replace(STAND_IN, STAND_IN_NO_ESTIMATE)
        return Finding.failed(exc, fix)
    zones, duplicates = discover_zones(source.powercap)
    # a zone that failed is a reading with a fault; one not read at all vanished meanwhile
    fault = {r.device: r.fault for r in readings}
    items = [
        f"{z.zone} {z.device} ({z.name})"
        + (f", wraps at {z.max_energy_uj / 1e6:.0f} J" if z.max_energy_uj else "")
        + fault_note(fault, z.device)
        for z in zones
    ]
    items += [f"left out: {d}, the same counter as its MSR zone" for d in duplicates]
    return zones_found(readings, items, "zones")


SPEC = SourceSpec(
    name=RaplSource.name,
    kind=POWER,
    default_on=True,
    probe=probe,
    fixes=FIXES,
    build=lambda config, _context: RaplSource(config.sysfs),
    # core and uncore are parts of package, so attributing them too would count the same
    # joules twice; psys (the whole SoC) only where there is no package counter
    workload_zones=(WORKLOAD_ZONES, FALLBACK_ZONES),
)
