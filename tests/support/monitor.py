"""Monitor settings as `wattprobe serve` makes them: the registry's zone preferences and fallback
power sources (exporter/app/wiring.py), with a test's own settings on top."""

from __future__ import annotations

from typing import Any

from exporter.accounting.monitor import MonitorSettings
from exporter.app.registry import REGISTRY


def monitor_settings(**settings: Any) -> MonitorSettings:
    return MonitorSettings(
        zone_preferences=REGISTRY.zone_preferences,
        fallback_sources=REGISTRY.fallback_sources,
        zone_fills=REGISTRY.zone_fills,
        **settings,
    )
