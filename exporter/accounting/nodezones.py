"""The node's power zones through an interval: one meter per zone (RAPL domains, hwmon sensors,
the estimate) turning readings into active and idle joules, the choice of which zone kinds are
split among workloads, and those zones' energy ready for attribution."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from exporter.accounting.attribution import ZoneEnergy
from exporter.accounting.idle import IdleBaseline
from exporter.accounting.meter import DeviceSample, ZoneMeter
from exporter.accounting.zones import ZoneFill, ZoneId, ZonePreferences, workload_zones
from exporter.model.config import IdlePower
from exporter.model.health import IdleOrigin, MeterHealth
from exporter.model.readings import EnergyReading, TaskKey

ZoneJoules = dict[ZoneId, tuple[float, float]]  # zone -> (active, idle) joules


class NodeZones:
    """Meters every node zone; a zone's first reading, and a rejected one, give nothing."""

    def __init__(
        self,
        idle_power: IdlePower,
        *,
        configured_zones: tuple[str, ...] = (),
        preferences: ZonePreferences = (),
        fills: Sequence[ZoneFill] = (),
    ) -> None:
        self._idle_power = idle_power
        self._configured = configured_zones  # --attribution.zones; empty: from what is measured
        self._preferences = preferences
        self._fills = tuple(fills)
        self._meters: dict[ZoneId, ZoneMeter] = {}

    def measure(
        self,
        readings: Sequence[tuple[EnergyReading, float]],
        usage: float | None,
        interval: int,
        *,
        unread: Mapping[str, str] | None = None,
    ) -> ZoneJoules:
        """(active, idle) joules per measured zone over the interval.

        unread: source -> why it gave nothing this interval (failed, timed out, still busy):
        each zone it had is marked down with that reason, so the fault shows per device (device
        up 0, a rejection counted, a log line per episode), not only on source_up."""
        out: ZoneJoules = {}
        for source, why in (unread or {}).items():
            fault = f"source {why or 'gave nothing'}"
            for (_zone, _device, src), down in self._meters.items():
                if src == source:
                    down.measure(
                        DeviceSample(stamp=0.0, fault=fault), interval=interval, utilization=None
                    )
        for reading, stamp in readings:
            zid = (reading.zone, reading.device, reading.source)
            meter = self._meters.get(zid)
            if meter is None:
                origin = IdleOrigin.CONFIGURED if reading.idle_w is None else IdleOrigin.MODEL
                meter = self._meters[zid] = ZoneMeter(
                    IdleBaseline(fixed_w=self._fixed_idle(reading), fixed_origin=origin),
                    name=f"{reading.source} {reading.zone} {reading.device}",
                )
            measured = meter.measure(
                _device_sample(reading, stamp), interval=interval, utilization=usage
            )
            if measured is not None:
                out[zid] = (measured.active_j, measured.idle_j)
        return out

    def _fixed_idle(self, reading: EnergyReading) -> float | None:
        # a model (the estimate) knows its own idle power; a measured zone's is configured
        # (--power.idle) or learned
        if reading.idle_w is not None:
            return reading.idle_w
        return self._idle_power.for_zone(reading.zone)

    def attributed_kinds(self, zone_ids: Iterable[ZoneId]) -> tuple[str, ...]:
        """Which zone kinds are split among workloads (exporter/accounting/zones.py)."""
        return workload_zones(self._configured, zone_ids, self._preferences, self._fills)

    def health(self) -> list[tuple[ZoneId, MeterHealth]]:
        return [(zid, meter.health()) for zid, meter in sorted(self._meters.items())]


def attributable(
    zone_energy: Mapping[ZoneId, tuple[float, float]],
    kinds: Sequence[str],
    weights: Mapping[TaskKey, float],
    idle_weights: Mapping[TaskKey, float] | None,
) -> list[ZoneEnergy]:
    """The energy of the attributed zone kinds, summed per kind over devices, with the activity
    that splits it (idle_weights None: idle stays on the node)."""
    per_kind: dict[str, list[float]] = {}
    for (zone, _device, _source), (active, idle) in zone_energy.items():
        if zone in kinds:
            acc = per_kind.setdefault(zone, [0.0, 0.0])
            acc[0] += active
            acc[1] += idle
    return [
        ZoneEnergy(zone, "", active, idle, weights, idle_weights)
        for zone, (active, idle) in sorted(per_kind.items())
    ]


def _device_sample(reading: EnergyReading, stamp: float) -> DeviceSample:
    return DeviceSample(
        stamp=stamp,
        energy_uj=reading.energy_uj,
        max_energy_uj=reading.max_energy_uj,
        power_w=reading.power_w,
        max_power_w=reading.max_power_w,
        fault=reading.fault,
    )
