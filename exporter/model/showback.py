"""Showback settings: the node's facility PUE, energy price, grid carbon intensity, GPU-hour prices.

They are data, not constants in queries (issue 33): each node serves its own as gauges
(exporter/exposition/showback.py), and recording rules and `wattprobe report` multiply its energy
by them. Nothing has a default: a node without a price has no cost, never a made-up one.

validate() is a pure function over the frozen Showback; the flags and the config file
(exporter/exposition/showback_file.py) both build a Showback and go through it, so a value the
flags refuse is refused in the file too, with the same one-line reason.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace

CURRENCY = re.compile(r"[A-Z]{3}")  # an ISO 4217 alphabetic code's shape (EUR, USD, JPY)
# Label values are shown in dashboards and CSV: printable, one line, of a sane length.
MAX_LABEL_CHARS = 256
# A PUE above this is a typo (a percentage, a price) rather than a facility: the worst
# datacentres measured are around 3, and a PUE multiplies every kWh billed.
MAX_PUE = 10.0
# The dirtiest grids are about 1,200 gCO2e/kWh (lignite); 10,000 is no grid
MAX_CARBON_INTENSITY = 10_000.0
# A price (of a kWh or a GPU-hour) in any currency: even in currencies of many digits
# (IDR, VND) a GPU-hour is under 10^6; past it the value is a typo, not a price
MAX_PRICE = 1e6


class ShowbackError(ValueError):
    """A showback value that cannot be served. The message is one line naming the setting."""


@dataclass(frozen=True)
class Price:
    """An amount of money; currency "" when it was given as a bare number (the node's currency)."""

    amount: float
    currency: str = ""


@dataclass(frozen=True)
class GpuHourPrice:
    """The price of one allocated GPU for one hour: of a GPU model (as in wattprobe_gpu_info's
    model label) or of a device plugin resource (nvidia.com/gpu); exactly one of the two."""

    price: Price
    model: str = ""
    resource: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.model, self.resource)


@dataclass(frozen=True)
class Showback:
    """None (or no entries): not configured, and then not served."""

    pue: float | None = None
    energy_price: Price | None = None  # per kWh
    currency: str = ""  # "" : taken from the prices, if they name one
    carbon_intensity: float | None = None  # gCO2e per kWh
    gpu_hour_prices: tuple[GpuHourPrice, ...] = ()

    @property
    def configured(self) -> bool:
        return self != Showback()

    def resolved_currency(self) -> str:
        """The node's one currency (validate() has checked there is at most one)."""
        stated = _currencies(self)
        return stated[0] if stated else ""

    def overlay(self, other: Showback) -> Showback:
        """self with every setting other gives replacing self's (the file's values win over the
        flags'). A list of GPU-hour prices replaces the whole list."""
        return replace(
            self,
            pue=other.pue if other.pue is not None else self.pue,
            energy_price=other.energy_price
            if other.energy_price is not None
            else self.energy_price,
            currency=other.currency or self.currency,
            carbon_intensity=(
                other.carbon_intensity
                if other.carbon_intensity is not None
                else self.carbon_intensity
            ),
            gpu_hour_prices=other.gpu_hour_prices or self.gpu_hour_prices,
        )


def _currencies(s: Showback) -> list[str]:
    prices = [p.price for p in s.gpu_hour_prices]
    if s.energy_price is not None:
        prices.insert(0, s.energy_price)
    found: list[str] = []
    for code in (s.currency, *(p.currency for p in prices)):
        if code and code not in found:
            found.append(code)
    return found


def validate(s: Showback) -> Showback:
    """s itself if every value can be served; else ShowbackError, whose message names the first
    bad setting. Pure: no I/O, no clock."""
    check_values(s)
    currencies = _currencies(s)
    if len(currencies) > 1:
        raise ShowbackError(
            f"two currencies ({', '.join(currencies)}): a node has one currency for all its prices"
        )
    has_price = s.energy_price is not None or bool(s.gpu_hour_prices)
    if has_price and not currencies:
        raise ShowbackError(
            "a price needs a currency: set currency (--showback.currency) or write it after "
            "the amount (0.21 EUR)"
        )
    return s


def check_values(s: Showback) -> None:
    """Each value on its own (what one flag can be checked for): validate() without the rules
    that tie the prices to one currency."""
    if s.pue is not None:
        _finite(s.pue, "pue")
        if not 1.0 <= s.pue <= MAX_PUE:
            raise ShowbackError(
                f"pue: {s.pue:g} is not a PUE (facility energy / IT energy: 1 to {MAX_PUE:g})"
            )
    if s.energy_price is not None:
        _price(s.energy_price, "energy_price")
    if s.carbon_intensity is not None:
        _finite(s.carbon_intensity, "carbon_intensity")
        if s.carbon_intensity < 0:
            raise ShowbackError(f"carbon_intensity: {s.carbon_intensity:g} is negative")
        if s.carbon_intensity > MAX_CARBON_INTENSITY:
            raise ShowbackError(
                f"carbon_intensity: {s.carbon_intensity:g} is over {MAX_CARBON_INTENSITY:g} "
                "gCO2e/kWh"
            )
    if s.currency:
        _currency(s.currency, "currency")
    _gpu_hour_prices(s.gpu_hour_prices)


def _gpu_hour_prices(entries: tuple[GpuHourPrice, ...]) -> None:
    seen: set[tuple[str, str]] = set()
    for i, entry in enumerate(entries):
        where = f"gpu_hour_prices[{i}]"
        if bool(entry.model) == bool(entry.resource):
            raise ShowbackError(f"{where}: give exactly one of model or resource")
        for name, value in (("model", entry.model), ("resource", entry.resource)):
            if value and (not value.isprintable() or len(value) > MAX_LABEL_CHARS):
                raise ShowbackError(
                    f"{where}.{name}: must be one printable line of at most "
                    f"{MAX_LABEL_CHARS} characters"
                )
        if entry.key in seen:
            what = f"model {entry.model!r}" if entry.model else f"resource {entry.resource!r}"
            raise ShowbackError(f"{where}: {what} is priced twice")
        seen.add(entry.key)
        _price(entry.price, f"{where}.price")


def _finite(value: float, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ShowbackError(f"{where}: must be a number")
    if not math.isfinite(value):
        raise ShowbackError(f"{where}: {value} is not a finite number")


def _price(price: Price, where: str) -> None:
    _finite(price.amount, where)
    if price.amount < 0:
        raise ShowbackError(f"{where}: {price.amount:g} is negative")
    if price.amount > MAX_PRICE:
        raise ShowbackError(f"{where}: {price.amount:g} is over {MAX_PRICE:g}")
    if price.currency:
        _currency(price.currency, where)


def _currency(code: str, where: str) -> None:
    if not (isinstance(code, str) and CURRENCY.fullmatch(code)):
        shown = code if isinstance(code, str) and code.isprintable() else repr(code)
        raise ShowbackError(
            f"{where}: {shown[:16]!r} is not an ISO 4217 currency code (three capital letters, "
            "e.g. EUR)"
        )


def parse_number(text: str, where: str) -> float:
    """A flag's number ('1.3'); ShowbackError for anything else (NaN and inf included)."""
    try:
        value = float(text.strip())
    except ValueError:
        raise ShowbackError(f"{where}: {text.strip()[:32]!r} is not a number") from None
    _finite(value, where)
    return value


def parse_price(text: str, where: str) -> Price:
    """'0.21' (the node's currency) or '0.21 EUR'."""
    amount, _, code = text.strip().partition(" ")
    price = Price(parse_number(amount, where), code.strip())
    _price(price, where)
    return price
