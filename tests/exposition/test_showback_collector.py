"""The showback gauges (exporter/exposition/showback.py) and the settings they are served from
(exporter/exposition/showback_live.py): each family only while configured, catalogued with its
labels, and a changed file served at the next render, a bad one refused with the last good
settings kept and the reload gauge at 0."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from exporter.exposition.metrics import BY_NAME, PREFIX, SHOWBACK_CATALOGUE, render_markdown
from exporter.exposition.showback import ShowbackCollector
from exporter.exposition.showback_live import LiveShowback
from exporter.model.showback import Price, Showback, ShowbackError

Values = dict[tuple[str, tuple[tuple[str, str], ...]], float]

FULL = """\
pue: 1.25
energy_price: 0.21 EUR
carbon_intensity: 350
gpu_hour_prices:
  - model: NVIDIA H100 80GB HBM3
    price: 2.5
  - resource: nvidia.com/gpu
    price: 0.75
"""


def replace_file(path: Path, text: str) -> Path:
    """Write as kubelet updates a ConfigMap volume: a new file renamed into place."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def values(live: LiveShowback) -> Values:
    return {
        (s.name.removeprefix(PREFIX), tuple(sorted(s.labels.items()))): s.value
        for family in ShowbackCollector(live.current).collect()
        for s in family.samples
    }


def test_every_family_is_catalogued_with_its_labels(tmp_path: Path) -> None:
    live = LiveShowback(Showback(), replace_file(tmp_path / "showback.yaml", FULL))
    families = {f.name.removeprefix(PREFIX): f for f in ShowbackCollector(live.current).collect()}
    assert set(families) == {spec.name for spec in SHOWBACK_CATALOGUE}
    for name, family in families.items():
        spec = BY_NAME[name]
        assert family.type == spec.kind == "gauge"
        for sample in family.samples:
            assert sample.name == spec.exposed_name
            assert set(sample.labels) == set(spec.labels)
    assert "## Showback" in render_markdown()


def test_the_file_is_served_as_written(tmp_path: Path) -> None:
    before = time.time()
    got = values(LiveShowback(Showback(), replace_file(tmp_path / "showback.yaml", FULL)))
    stamp = got.pop(("showback_config_last_reload_success_timestamp_seconds", ()))
    assert before <= stamp <= time.time()
    assert got == {
        ("node_pue", ()): 1.25,
        ("energy_price_per_kwh", (("currency", "EUR"),)): 0.21,
        ("carbon_intensity_grams_per_kwh", ()): 350.0,
        (
            "gpu_hour_price",
            (("currency", "EUR"), ("model", "NVIDIA H100 80GB HBM3"), ("resource", "")),
        ): 2.5,
        (
            "gpu_hour_price",
            (("currency", "EUR"), ("model", ""), ("resource", "nvidia.com/gpu")),
        ): 0.75,
        ("showback_config_last_reload_successful", ()): 1.0,
    }


def test_nothing_configured_serves_nothing() -> None:
    assert values(LiveShowback(Showback(), None)) == {}
    # a currency alone prices nothing
    assert values(LiveShowback(Showback(currency="EUR"), None)) == {}
    # flags alone: their series, and no reload gauges (there is no file)
    assert values(LiveShowback(Showback(pue=1.1), None)) == {("node_pue", ()): 1.1}


def test_a_changed_file_is_served_and_a_bad_one_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    flags = Showback(pue=1.1, energy_price=Price(0.3), currency="EUR")
    path = replace_file(tmp_path / "showback.yaml", "pue: 1.5\n")
    live = LiveShowback(flags, path)
    first = values(live)
    assert first[("node_pue", ())] == 1.5  # the file wins over the flag
    assert first[("energy_price_per_kwh", (("currency", "EUR"),))] == 0.3  # the flag stands

    replace_file(path, "pue: 1.6\nenergy_price: 0.25\n")
    changed = values(live)
    assert changed[("node_pue", ())] == 1.6
    assert changed[("energy_price_per_kwh", (("currency", "EUR"),))] == 0.25
    good_at = changed[("showback_config_last_reload_success_timestamp_seconds", ())]

    caplog.set_level(logging.INFO, "exporter.exposition.showback_live")
    caplog.clear()
    for bad in (
        "pue: 0.8\n",
        "pue: [1.6\n",
        "energy_price: 0.2 EUR\ncurrency: USD\n",
        "colour: 1\n",
    ):
        replace_file(path, bad)
        refused = values(live)
        assert refused[("showback_config_last_reload_successful", ())] == 0.0, bad
        assert refused[("showback_config_last_reload_success_timestamp_seconds", ())] == good_at
        assert refused[("node_pue", ())] == 1.6, bad  # the last good settings are served
        assert refused[("energy_price_per_kwh", (("currency", "EUR"),))] == 0.25
        values(live)  # an unchanged bad file is not reread, nor logged again
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 4, [r.getMessage() for r in errors]
    assert all("refused, still serving the previous one" in r.getMessage() for r in errors)
    assert "\n" not in "".join(r.getMessage() for r in errors)

    path.unlink()  # gone: refused the same way
    assert values(live)[("showback_config_last_reload_successful", ())] == 0.0
    assert values(live)[("node_pue", ())] == 1.6

    replace_file(path, "carbon_intensity: 20\n")  # fixed: the file's settings over the flags
    fixed = values(live)
    assert fixed[("showback_config_last_reload_successful", ())] == 1.0
    assert fixed[("showback_config_last_reload_success_timestamp_seconds", ())] >= good_at
    assert fixed[("node_pue", ())] == 1.1  # the file says nothing of PUE now: the flag's
    assert fixed[("carbon_intensity_grams_per_kwh", ())] == 20.0


def test_reload_rereads_an_unchanged_file(tmp_path: Path) -> None:
    path = replace_file(tmp_path / "showback.yaml", "pue: 1.5\n")
    live = LiveShowback(Showback(), path)
    first = live.current().reload
    assert first is not None
    time.sleep(0.01)
    live.reload()
    again = live.current().reload
    assert again is not None and again.successful
    assert again.success_timestamp > first.success_timestamp


def test_a_bad_file_or_flag_at_start_is_an_error(tmp_path: Path) -> None:
    path = replace_file(tmp_path / "showback.yaml", "pue: 0.5\n")
    with pytest.raises(ShowbackError, match=r"^pue: 0\.5 is not a PUE"):
        LiveShowback(Showback(), path)
    with pytest.raises(ShowbackError, match="two currencies"):
        LiveShowback(Showback(energy_price=Price(1.0, "USD")), replace_file(path, "currency: EUR"))
    with pytest.raises(ShowbackError, match="carbon_intensity"):
        LiveShowback(Showback(carbon_intensity=-1.0), None)
