"""Power and energy sensors from the hwmon class (/sys/class/hwmon).

power<N>_input / power<N>_average are microwatts (integrated by the monitor over the interval);
energy<N>_input is a cumulative microjoule counter. Each sensor is its own zone, named from its
chip and label, because sensors on one board may overlap (a board total and its rails).
A sensor's own power<N>_max, power<N>_crit or power<N>_cap (microwatts) bounds what it can
plausibly read (max_power_w); an energy sensor takes the bound of the power sensor with its label.

The sensors of an AMD or Intel GPU that the DRM backend meters (--collector.drm, on by default:
exporter/sources/gpu/drm/source.py) are left out: that GPU's energy is a GPU zone split by engine
time, and counting its amdgpu_ppt or i915 energy sensor here as well would count the same joules
twice on the node. With --no-collector.drm they are node zones again, as before the DRM backend.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from exporter.host.files import fault_for, read_int, read_text, reason_for, short_error
from exporter.model.config import Config
from exporter.model.readings import ABSENT, EnergyReading, SourceAbsent, SourceError
from exporter.model.spec import (
    ALL_ZONES,
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

_SENSOR = re.compile(r"^(power|energy)(\d+)_(input|average)$")
_UNSAFE = re.compile(r"[^a-z0-9]+")
_LIMITS = ("max", "crit", "cap")  # power<N>_<limit> files, in microwatts
# A limit above this is not a sane bound for one sensor (the largest accelerator boards draw a
# few kW; a rack PSU tens): a sensor that reports one gets the monitor's generic bound instead.
MAX_SANE_LIMIT_W = 100_000.0


@dataclass(frozen=True, slots=True)
class HwmonSensor:
    zone: str  # <chip>_<label>, lower-case
    device: str  # the hwmon device's bus name, or hwmonN when it has none
    kind: str  # power or energy
    path: str
    max_power_w: float | None = None  # from the sensor's own limits; None: none given or sane


def sensor_zone(chip: str, label: str) -> str:
    return _UNSAFE.sub("_", f"{chip}_{label}".lower()).strip("_")


def sensor_limit(chip_dir: str, index: str, files: set[str] | list[str]) -> float | None:
    """The largest sane power<index>_{max,crit,cap} in watts, or None.

    The largest, not the first: the bound rejects readings above it, and a short excursion over a
    cap or a max is real power, while a value over the critical limit is not credible.
    """
    best: float | None = None
    for limit in _LIMITS:
        name = f"power{index}_{limit}"
        if name not in files:
            continue
        try:
            watts = read_int(f"{chip_dir}/{name}") / 1e6
        except (OSError, ValueError):
            continue
        if 0 < watts <= MAX_SANE_LIMIT_W and (best is None or watts > best):
            best = watts
    return best


def _chip_dir(hwmon_dir: str) -> str:
    # Old drivers keep their attributes under hwmonN/device/.
    if os.path.exists(f"{hwmon_dir}/name"):
        return hwmon_dir
    return f"{hwmon_dir}/device"


def _device_name(hwmon_dir: str, entry: str) -> str:
    try:
        return os.path.basename(os.path.realpath(f"{hwmon_dir}/device"))
    except OSError:
        return entry


def discover_sensors(hwmon_class: str) -> list[HwmonSensor]:
    try:
        entries = sorted(os.listdir(hwmon_class))
    except FileNotFoundError:
        return []
    sensors: list[HwmonSensor] = []
    for entry in entries:
        hwmon_dir = f"{hwmon_class}/{entry}"
        chip_dir = _chip_dir(hwmon_dir)
        try:
            chip = read_text(f"{chip_dir}/name")
            files = set(os.listdir(chip_dir))
        except OSError:
            continue
        device = _device_name(hwmon_dir, entry) if os.path.islink(f"{hwmon_dir}/device") else entry
        found: dict[tuple[str, str], str] = {}
        for fname in files:
            m = _SENSOR.match(fname)
            if not m:
                continue
            kind, index, suffix = m.groups()
            key = (kind, index)
            if suffix == "input" or key not in found:  # *_input wins over *_average
                found[key] = fname
        labels: dict[tuple[str, str], str] = {}
        for kind, index in found:
            try:
                labels[kind, index] = read_text(f"{chip_dir}/{kind}{index}_label")
            except OSError:
                labels[kind, index] = f"{kind}{index}"
        # a power index's limits also bound the energy counter with its label
        limit_by_label = {
            labels[kind, index]: sensor_limit(chip_dir, index, files)
            for kind, index in found
            if kind == "power"
        }
        labels_seen: set[str] = set()
        # energy first: a rail with both a counter and a power reading is counted by its counter
        for (kind, index), fname in sorted(found.items()):
            label = labels[kind, index]
            if kind == "power" and label in labels_seen:
                continue
            labels_seen.add(label)
            sensors.append(
                HwmonSensor(
                    sensor_zone(chip, label),
                    device,
                    kind,
                    f"{chip_dir}/{fname}",
                    limit_by_label.get(label),
                )
            )
    return sensors


class HwmonSource:
    name = "hwmon"

    def __init__(
        self, sysfs: Path, skip_devices: Callable[[], frozenset[str]] | None = None
    ) -> None:
        self.hwmon_class = str(sysfs / "class" / "hwmon")
        # devices (PCI addresses) whose sensors another source meters: the DRM GPUs
        self._skip = skip_devices
        # sensors found at some point: losing all of them later is a fault, not absent hardware
        self._seen: set[str] = set()

    def sensors(self) -> list[HwmonSensor]:
        sensors = discover_sensors(self.hwmon_class)
        skip = self._skip() if self._skip is not None and sensors else frozenset()
        return [s for s in sensors if s.device not in skip]

    def read(self) -> list[EnergyReading]:
        sensors = self.sensors()
        if not sensors and self._seen:
            gone = ", ".join(sorted(self._seen))
            raise SourceError("vanished", f"hwmon sensors {gone} are gone from {self.hwmon_class}")
        if not sensors:
            raise SourceAbsent(f"no hwmon power or energy sensors under {self.hwmon_class}")
        self._seen.update(s.zone for s in sensors)
        readings: list[EnergyReading] = []
        failure: tuple[str, str] | None = None
        for s in sensors:
            bound = s.max_power_w
            try:
                value = read_int(s.path)
            except (OSError, ValueError) as exc:
                failure = failure or (reason_for(exc), f"{s.path}: {short_error(exc)}")
                fault = fault_for(exc)
                readings.append(
                    EnergyReading(s.zone, s.device, self.name, max_power_w=bound, fault=fault)
                )
                continue
            if s.kind == "energy":
                readings.append(
                    EnergyReading(s.zone, s.device, self.name, energy_uj=value, max_power_w=bound)
                )
            else:
                watts = value / 1e6
                readings.append(
                    EnergyReading(s.zone, s.device, self.name, power_w=watts, max_power_w=bound)
                )
        if failure is not None and all(r.fault for r in readings):
            raise SourceError(*failure, tuple(readings))
        if failure is not None:
            log.debug("hwmon: some sensors unreadable: %s", failure[1])
        return readings


# -- wattprobe check -------------------------------------------------------------------------

FIX_HWMON_DRIVER = "the sensor's driver misbehaves: look for its chip in `dmesg` and `sensors`"
FIXES = {
    ABSENT: "no hwmon power sensors: nothing to fix unless the board has some (load its driver, "
    "e.g. acpi_power_meter or amdgpu)",
    "permission denied": "run as root or grant CAP_DAC_READ_SEARCH",
}


def probe(config: Config, _earlier: Sequence[CheckResult], context: BuildContext) -> Finding:
    missing = missing_sysfs_class(config, "hwmon sensor")
    if missing is not None:
        return missing
    source = build(config, context)
    try:
        readings = source.read()
    except SourceError as exc:
        return Finding.failed(exc, FIXES.get(exc.reason, FIX_HWMON_DRIVER))
    fault = {(r.zone, r.device): r.fault for r in readings}
    items = [
        f"{s.zone} ({s.device}, {s.kind} {'counter' if s.kind == 'energy' else 'reading'})"
        + (f", at most {s.max_power_w:g} W" if s.max_power_w is not None else "")
        + fault_note(fault, (s.zone, s.device))
        for s in source.sensors()
    ]
    return zones_found(readings, items, "sensors")


def build(config: Config, context: BuildContext) -> HwmonSource:
    """hwmon, leaving the sensors of GPUs that a GPU backend meters to that backend."""
    return HwmonSource(config.sysfs, context.gpu_metered_pci)


SPEC = SourceSpec(
    name=HwmonSource.name,
    kind=POWER,
    default_on=True,
    probe=probe,
    fixes=FIXES,
    build=build,
    workload_zones=((ALL_ZONES,),),  # each sensor is its own zone kind
)
