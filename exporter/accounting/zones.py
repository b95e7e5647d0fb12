"""Which zone kinds are split among workloads: the first measuring source's preference decides.

A pure function of the zones measured and the sources' declared preferences
(SourceSpec.workload_zones, in registry order), so a new power source brings its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from exporter.model.spec import ALL_ZONES

# (zone kind, device, source label), as the monitor keys node zones
ZoneId = tuple[str, str, str]
ZonePreferences = Sequence[tuple[str, tuple[tuple[str, ...], ...]]]


def workload_zones(
    configured: tuple[str, ...], zone_ids: Iterable[ZoneId], preferences: ZonePreferences
) -> tuple[str, ...]:
    """--attribution.zones when given; else, for the first source in preference order that
    measures any zone, the first of its groups with a measured kind (filtered to those)."""
    if configured:
        return configured
    by_source: dict[str, set[str]] = {}
    for zone, _device, source in zone_ids:
        by_source.setdefault(source, set()).add(zone)
    for source, groups in preferences:
        found = by_source.get(source)
        if not found:
            continue
        for group in groups:
            chosen = sorted(found) if ALL_ZONES in group else [z for z in group if z in found]
            if chosen:
                return tuple(chosen)
        return ()  # this source decides even when none of its kinds is measured
    return ()
