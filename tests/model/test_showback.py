"""The showback settings' validation (exporter/model/showback.py): a pure function that refuses
every bad value with one line naming the setting, and keeps every good one as it is. The
properties over every good and every bad setting go through the file
(tests/exposition/test_showback_file.py: parse, then validate)."""

from __future__ import annotations

import math

import pytest

from exporter.model.showback import (
    GpuHourPrice,
    Price,
    Showback,
    ShowbackError,
    parse_number,
    parse_price,
    validate,
)


@pytest.mark.parametrize(
    ("s", "reason"),
    [
        (Showback(pue=0.99), "pue: 0.99 is not a PUE"),
        (Showback(pue=math.nan), "pue: nan is not a finite number"),
        (Showback(pue=True), "pue: must be a number"),
        (Showback(energy_price=Price(-0.01, "EUR")), "energy_price: -0.01 is negative"),
        (Showback(carbon_intensity=-1.0), "carbon_intensity: -1 is negative"),
        (Showback(carbon_intensity=math.inf), "carbon_intensity: inf is not a finite number"),
        (Showback(currency="eur"), "currency: 'eur' is not an ISO 4217 currency code"),
        (
            Showback(energy_price=Price(0.2, "USD"), currency="EUR"),
            "two currencies (EUR, USD)",
        ),
        (Showback(energy_price=Price(0.2)), "a price needs a currency"),
        (
            Showback(gpu_hour_prices=(GpuHourPrice(Price(1.0, "EUR")),)),
            "gpu_hour_prices[0]: give exactly one of model or resource",
        ),
        (
            Showback(
                currency="EUR",
                gpu_hour_prices=(
                    GpuHourPrice(Price(1.0), resource="nvidia.com/gpu"),
                    GpuHourPrice(Price(2.0), resource="nvidia.com/gpu"),
                ),
            ),
            "gpu_hour_prices[1]: resource 'nvidia.com/gpu' is priced twice",
        ),
    ],
)
def test_refusals_say_what_is_wrong(s: Showback, reason: str) -> None:
    with pytest.raises(ShowbackError) as refused:
        validate(s)
    assert str(refused.value).startswith(reason), str(refused.value)


def test_a_model_and_a_resource_of_the_same_name_are_two_entries() -> None:
    entries = (
        GpuHourPrice(Price(2.5), model="nvidia.com/gpu"),
        GpuHourPrice(Price(0.75), resource="nvidia.com/gpu"),
    )
    validate(Showback(currency="EUR", gpu_hour_prices=entries))


def test_nothing_configured_is_valid_and_serves_nothing() -> None:
    assert not validate(Showback()).configured
    assert Showback().resolved_currency() == ""


def test_overlay_takes_each_setting_the_file_gives() -> None:
    flags = Showback(pue=1.2, energy_price=Price(0.2), currency="EUR", carbon_intensity=300.0)
    file = Showback(pue=1.4, gpu_hour_prices=(GpuHourPrice(Price(1.0), model="A100"),))
    merged = flags.overlay(file)
    assert merged == Showback(
        pue=1.4,
        energy_price=Price(0.2),
        currency="EUR",
        carbon_intensity=300.0,
        gpu_hour_prices=file.gpu_hour_prices,
    )
    assert flags.overlay(Showback()) == flags
    # a file naming another currency with the flag's price left in place is two currencies
    with pytest.raises(ShowbackError, match="two currencies"):
        validate(Showback(energy_price=Price(0.2, "EUR")).overlay(Showback(currency="USD")))


@pytest.mark.parametrize(
    ("text", "price"),
    [("0.21", Price(0.21)), (" 0.21 EUR ", Price(0.21, "EUR")), ("3", Price(3.0))],
)
def test_price_flag(text: str, price: Price) -> None:
    assert parse_price(text, "energy_price") == price


@pytest.mark.parametrize(
    "text", ["", "EUR", "0.21 eur", "-1 EUR", "nan", "inf EUR", "0.21 EUR USD", "1e400"]
)
def test_bad_price_flags_are_refused(text: str) -> None:
    with pytest.raises(ShowbackError, match=r"^energy_price: "):
        parse_price(text, "energy_price")


def test_number_flag() -> None:
    assert parse_number(" 1.25 ", "pue") == 1.25
    for text in ("", "1,25", "NaN", "-inf", "1.2x"):
        with pytest.raises(ShowbackError, match=r"^pue: "):
            parse_number(text, "pue")
