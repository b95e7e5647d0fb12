"""The web server's own series: what it shed to keep serving, and the web config's reloads.

The counters are plain integers written on the event loop and read by the render thread when a
snapshot is rendered (a torn read is impossible for a Python int).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from exporter.exposition.metrics import BY_NAME, PREFIX
from exporter.web.live import LiveWebConfig

SHED_REASONS = ("silent", "idle", "refused", "tls_handshake", "slow_reader")


@dataclass
class WebCounters:
    """Mutable on purpose: the event loop counts, the collector reads."""

    auth_refused: int = 0
    shed_silent: int = 0
    shed_refused: int = 0
    shed_idle: int = 0
    shed_tls_handshake: int = 0
    shed_slow_reader: int = 0

    def shed(self, reason: str) -> None:
        """Count one connection shed for reason (one of SHED_REASONS)."""
        name = f"shed_{reason}"
        setattr(self, name, getattr(self, name) + 1)


def _family(name: str) -> Metric:
    spec = BY_NAME[name]
    return Metric(PREFIX + spec.name, spec.help, spec.kind)


class WebTelemetry(Collector):
    def __init__(self, counters: WebCounters, web: LiveWebConfig | None) -> None:
        self._counters = counters
        self._web = web

    def collect(self) -> Iterator[Metric]:
        counters = self._counters
        refused = _family("web_auth_refused")
        refused.add_sample(refused.name + "_total", {}, counters.auth_refused)
        yield refused
        shed = _family("web_connections_shed")
        for reason in SHED_REASONS:
            value = getattr(counters, f"shed_{reason}")
            shed.add_sample(shed.name + "_total", {"reason": reason}, value)
        yield shed
        if self._web is None:
            return
        reload = self._web.last_reload
        ok = _family("web_config_last_reload_successful")
        ok.add_sample(ok.name, {}, 1.0 if reload.successful else 0.0)
        yield ok
        when = _family("web_config_last_reload_success_timestamp_seconds")
        when.add_sample(when.name, {}, reload.success_timestamp)
        yield when
