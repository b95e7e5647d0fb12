"""Hypothesis strategies for the showback settings (issue 33), and their YAML form: every
good Showback, and one bad setting at a time, each with the setting it must be refused for."""

from __future__ import annotations

import math
from typing import Any

import yaml
from hypothesis import strategies as st

from exporter.model.showback import (
    MAX_CARBON_INTENSITY,
    MAX_LABEL_CHARS,
    MAX_PRICE,
    MAX_PUE,
    GpuHourPrice,
    Price,
    Showback,
)

CURRENCIES = st.from_regex(r"\A[A-Z]{3}\Z")
AMOUNTS = st.floats(min_value=0.0, max_value=MAX_PRICE, allow_nan=False, allow_infinity=False)
PUES = st.floats(min_value=1.0, max_value=MAX_PUE, allow_nan=False)
INTENSITIES = st.floats(min_value=0.0, max_value=MAX_CARBON_INTENSITY, allow_nan=False)
# label values as a user writes them: any printable text (quotes, colons, '#', non-ASCII)
NAMES = st.text(st.characters(codec="utf-8"), min_size=1, max_size=40).filter(
    lambda t: t.isprintable()
)


@st.composite
def good_showbacks(draw: st.DrawFn) -> Showback:
    """A valid Showback: its currency stated once (the currency key or on some of its prices)."""
    currency = draw(CURRENCIES)

    def price() -> Price:
        return Price(draw(AMOUNTS), draw(st.sampled_from(["", currency])))

    entries: list[GpuHourPrice] = []
    keys: set[tuple[str, str]] = set()
    for _ in range(draw(st.integers(0, 4))):
        name = draw(NAMES)
        entry = draw(
            st.sampled_from(
                [GpuHourPrice(price(), model=name), GpuHourPrice(price(), resource=name)]
            )
        )
        if entry.key not in keys:
            keys.add(entry.key)
            entries.append(entry)
    energy = price() if draw(st.booleans()) else None
    s = Showback(
        pue=draw(st.none() | PUES),
        energy_price=energy,
        currency="",
        carbon_intensity=draw(st.none() | INTENSITIES),
        gpu_hour_prices=tuple(entries),
    )
    if draw(st.booleans()) or not s.resolved_currency():
        s = Showback(**{**s.__dict__, "currency": currency})
    return s


def _price_yaml(p: Price) -> Any:
    return f"{p.amount!r} {p.currency}" if p.currency else p.amount


def to_yaml(s: Showback) -> str:
    """The file that says s (prices with their currency written as 'AMOUNT CODE')."""
    data: dict[str, Any] = {}
    if s.pue is not None:
        data["pue"] = s.pue
    if s.energy_price is not None:
        data["energy_price"] = _price_yaml(s.energy_price)
    if s.currency:
        data["currency"] = s.currency
    if s.carbon_intensity is not None:
        data["carbon_intensity"] = s.carbon_intensity
    if s.gpu_hour_prices:
        data["gpu_hour_prices"] = [
            {
                **({"model": e.model} if e.model else {}),
                **({"resource": e.resource} if e.resource else {}),
                "price": _price_yaml(e.price),
            }
            for e in s.gpu_hour_prices
        ]
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)


NOT_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
NEGATIVE = st.floats(max_value=-1e-300, allow_nan=False, allow_infinity=False)


def over(bound: float) -> st.SearchStrategy[float]:
    """Finite numbers past a bound (issue 41: absurd values are refused too)."""
    return st.floats(min_value=math.nextafter(bound, math.inf), allow_infinity=False)


BAD_CURRENCIES = st.text(max_size=6).filter(
    lambda t: not (len(t) == 3 and t.isascii() and t.isalpha() and t.isupper())
)


@st.composite
def bad_showbacks(draw: st.DrawFn) -> tuple[Showback, str]:
    """A good Showback with one setting made bad, and the word the refusal must name."""
    s = draw(good_showbacks())
    code = s.resolved_currency()
    kind = draw(
        st.sampled_from(
            [
                "pue",
                "energy_price",
                "carbon_intensity",
                "currency",
                "two currencies",
                "gpu price",
                "gpu name",
                "gpu twice",
                "no currency",
            ]
        )
    )
    bad: dict[str, Any] = {}
    if kind == "pue":
        low = st.floats(max_value=math.nextafter(1.0, 0), allow_nan=False, allow_infinity=False)
        high = st.floats(min_value=math.nextafter(MAX_PUE, math.inf), allow_infinity=False)
        bad["pue"] = draw(low | high | NOT_FINITE)
    elif kind == "energy_price":
        bad["energy_price"] = Price(draw(NEGATIVE | NOT_FINITE | over(MAX_PRICE)), code)
    elif kind == "carbon_intensity":
        bad["carbon_intensity"] = draw(NEGATIVE | NOT_FINITE | over(MAX_CARBON_INTENSITY))
    elif kind == "currency":
        bad["currency"] = draw(BAD_CURRENCIES.filter(bool))
        bad["energy_price"] = None
        bad["gpu_hour_prices"] = ()
    elif kind == "two currencies":
        other = draw(CURRENCIES.filter(lambda c: c != code))
        bad["energy_price"] = Price(draw(AMOUNTS), other)
        bad["currency"] = code
        kind = "currencies"
    elif kind in ("gpu price", "gpu name", "gpu twice"):
        name = draw(NAMES)
        if kind == "gpu price":
            entry = GpuHourPrice(Price(draw(NEGATIVE | NOT_FINITE), code), model=name)
        elif kind == "gpu name":
            model, resource = draw(
                st.sampled_from(
                    [("", ""), (name, name), ("a\nb", ""), ("", "x" * (MAX_LABEL_CHARS + 1))]
                )
            )
            entry = GpuHourPrice(Price(1.0, code), model=model, resource=resource)
        else:
            entry = GpuHourPrice(Price(1.0, code), model=name)
            bad["gpu_hour_prices"] = (entry, entry)
        bad.setdefault("gpu_hour_prices", (*s.gpu_hour_prices, entry))
        bad["currency"] = code
        kind = "gpu_hour_prices"
    else:  # a price, and no currency anywhere
        return Showback(energy_price=Price(draw(AMOUNTS))), "currency"
    return Showback(**{**s.__dict__, **bad}), kind
