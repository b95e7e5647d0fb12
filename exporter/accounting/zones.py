"""Which zone kinds are split among workloads, and which zones a fallback source fills.

Pure functions of the zones measured and the sources' declarations (SourceSpec.workload_zones in
registry order, SourceSpec.fills_zones), so a new power source brings its own:
- the first measuring source's preference decides the kinds split among workloads; a kind a
  fallback source fills counts as that source's own when choosing (the estimate's dram beside
  RAPL's package is split like RAPL's dram would be);
- a fallback source fills a zone kind only while no measured source has given that kind, so a
  kind is never counted from a measurement and an estimate at once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from exporter.model.spec import ALL_ZONES

R = TypeVar("R")

# (zone kind, device, source label), as the monitor keys node zones
ZoneId = tuple[str, str, str]
ZonePreferences = Sequence[tuple[str, tuple[tuple[str, ...], ...]]]


@dataclass(frozen=True)
class ZoneFill:
    """Zone kinds a fallback power source goes on giving beside measured sources."""

    source: str  # the source's name (SourceSpec.name)
    label: str  # the source label of its readings (SourceSpec.zone_label)
    zones: tuple[str, ...]


def filled_kinds(fill: Sequence[str], measured_kinds: Iterable[str]) -> frozenset[str]:
    """The kinds a fallback source still fills: those it declares that no measured source has
    given. Per kind, not per device: attribution splits by kind, so one measured dram device
    (one socket's) ends the estimate for all memory."""
    return frozenset(fill) - frozenset(measured_kinds)


def fill_readings(
    readings: Sequence[R],
    fill: Sequence[str],
    measured_kinds: Iterable[str],
    kind: Callable[[R], str],
) -> list[R]:
    """The readings of a fallback source that count beside measured sources."""
    keep = filled_kinds(fill, measured_kinds)
    return [r for r in readings if kind(r) in keep]


def workload_zones(
    configured: tuple[str, ...],
    zone_ids: Iterable[ZoneId],
    preferences: ZonePreferences,
    fills: Sequence[ZoneFill] = (),
) -> tuple[str, ...]:
    """--attribution.zones when given; else, for the first source in preference order that
    measures any zone, the first of its groups with a measured kind (filtered to those), the
    kinds fallback sources fill beside it counting as measured by it."""
    if configured:
        return configured
    by_source: dict[str, set[str]] = {}
    for zone, _device, source in zone_ids:
        by_source.setdefault(source, set()).add(zone)
    filled = {
        zone for fill in fills for zone in by_source.get(fill.label, ()) if zone in fill.zones
    }
    fill_labels = {fill.label for fill in fills}
    for source, groups in preferences:
        found = by_source.get(source)
        if not found:
            continue
        # a measured source decides with the kinds filled beside it, but only in a group that
        # names them: RAPL's (package, dram) takes the estimate's dram beside its package; psys
        # (platform power, memory included) takes none, and neither does hwmon's every-sensor
        # group, whose sensors may be whole-board rails (an ACPI power_meter, a board's input
        # rail) that hold memory already: there the estimate shows on the node, not split
        extra = set() if source in fill_labels else filled
        for group in groups:
            own = [z for z in found if ALL_ZONES in group or z in group]
            if not own:
                continue
            if ALL_ZONES in group:
                return tuple(sorted(found))
            return tuple(z for z in group if z in found or z in extra)
        return ()  # this source decides even when none of its kinds is measured
    return ()
