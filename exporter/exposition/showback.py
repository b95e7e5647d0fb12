"""The node's showback settings as gauges (issue 33; docs/showback-config.md).

Every family is built fresh from one ShowbackView taken at the start of collect(), so one scrape
never mixes the old and the new settings of a reload. A setting that is not configured has no
series at all: a node without a price has no cost, never a made-up one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from exporter.exposition.metrics import BY_NAME, PREFIX
from exporter.exposition.showback_live import ShowbackView


def _family(name: str) -> Metric:
    spec = BY_NAME[name]
    return Metric(PREFIX + spec.name, spec.help, spec.kind)


def _gauge(name: str, value: float, labels: dict[str, str] | None = None) -> Metric:
    family = _family(name)
    family.add_sample(family.name, labels or {}, value)
    return family


class ShowbackCollector(Collector):
    def __init__(self, view: Callable[[], ShowbackView]) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        view = self._view()
        s = view.settings
        currency = s.resolved_currency()
        if s.pue is not None:
            yield _gauge("node_pue", s.pue)
        if s.energy_price is not None:
            yield _gauge("energy_price_per_kwh", s.energy_price.amount, {"currency": currency})
        if s.carbon_intensity is not None:
            yield _gauge("carbon_intensity_grams_per_kwh", s.carbon_intensity)
        if s.gpu_hour_prices:
            prices = _family("gpu_hour_price")
            for entry in s.gpu_hour_prices:
                labels = {"currency": currency, "model": entry.model, "resource": entry.resource}
                prices.add_sample(prices.name, labels, entry.price.amount)
            yield prices
        if view.reload is not None:
            yield _gauge(
                "showback_config_last_reload_successful", 1.0 if view.reload.successful else 0.0
            )
            yield _gauge(
                "showback_config_last_reload_success_timestamp_seconds",
                view.reload.success_timestamp,
            )
