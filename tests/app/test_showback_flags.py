"""The --showback.* flags (exporter/app/cli/showback.py): each value checked alone and named by
its flag, the flags together validated at start-up (one currency, a currency for a price), and
the file's values over them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest

from exporter.app.cli import serve
from exporter.app.cli.showback import load_showback, showback_of
from exporter.model.showback import Price, Showback


def _flags(*args: str) -> dict[str, Any]:
    with click.Context(serve) as ctx:
        serve.parse_args(ctx, list(args))
    return dict(ctx.params)


def test_a_bare_price_takes_the_currency_flag(tmp_path: Path) -> None:
    kw = _flags("--showback.energy-price", "0.21", "--showback.currency", "EUR")
    flags = showback_of(kw)
    assert not any(k.startswith("showback_") and k != "showback_config_file" for k in kw)
    live = load_showback(flags, None)
    assert live.current().settings == Showback(energy_price=Price(0.21), currency="EUR")
    assert live.current().reload is None  # no file, no reload gauges
    path = tmp_path / "showback.yaml"
    path.write_text("energy_price: 0.25\npue: 1.2\n")
    settings = load_showback(flags, path).current().settings
    assert settings == Showback(pue=1.2, energy_price=Price(0.25), currency="EUR")


def test_unset_flags_are_nothing() -> None:
    assert showback_of(_flags()) == Showback()
    assert showback_of(_flags("--showback.pue", " ")) == Showback()  # an empty env var


@pytest.mark.parametrize(
    ("args", "flag", "reason"),
    [
        (("--showback.pue", "0.5"), "--showback.pue", "0.5 is not a PUE"),
        (("--showback.pue", "inf"), "--showback.pue", "inf is not a finite number"),
        (("--showback.currency", "euro"), "--showback.currency", "not an ISO 4217"),
        (("--showback.energy-price", "-2"), "--showback.energy-price", "-2 is negative"),
        (("--showback.carbon-intensity", "x"), "--showback.carbon-intensity", "is not a number"),
    ],
)
def test_a_bad_value_names_its_flag(args: tuple[str, ...], flag: str, reason: str) -> None:
    with pytest.raises(click.BadParameter) as refused:
        _flags(*args)
    message = refused.value.format_message()
    assert flag in message and reason in message and "\n" not in message, message


def test_the_flags_together_are_validated_at_start(tmp_path: Path) -> None:
    with pytest.raises(click.BadParameter, match="a price needs a currency") as refused:
        load_showback(showback_of(_flags("--showback.energy-price", "0.21")), None)
    assert "--showback.*" in refused.value.format_message()
    path = tmp_path / "showback.yaml"
    path.write_text("currency: USD\n")
    flags = showback_of(_flags("--showback.energy-price", "0.21 EUR"))
    with pytest.raises(click.BadParameter, match="two currencies") as refused:
        load_showback(flags, path)
    assert "'--showback.config'" in refused.value.format_message()
