"""--showback.config: the showback settings as a YAML file (docs/showback-config.md).

    pue: 1.3
    energy_price: 0.21          # per kWh; or "0.21 EUR"
    currency: EUR
    carbon_intensity: 350       # gCO2e per kWh
    gpu_hour_prices:
      - model: NVIDIA H100 80GB HBM3
        price: 2.50
      - resource: nvidia.com/mig-1g.10gb
        price: 0.40

Like the web config, unknown and duplicate keys are errors: a misspelt `pue:` silently ignored
would bill at the flags' PUE. The file is read through exporter/host/hostfile.py (non-blocking,
regular files only, bounded), so a FIFO or a device mounted in its place is refused at once
instead of hanging the reader, and a huge file costs at most MAX_FILE_BYTES.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from exporter.host.hostfile import read_bounded
from exporter.host.strictyaml import NamesLoader, YamlRefused, load_strict
from exporter.model.showback import (
    GpuHourPrice,
    Price,
    Showback,
    ShowbackError,
    parse_price,
)

MAX_FILE_BYTES = 64 * 1024  # a showback file is a few hundred bytes, a long GPU list a few KiB
MAX_DEPTH = 8  # the deepest valid file nests 3 (gpu_hour_prices: [ {price: ...} ])
MAX_GPU_PRICES = 1024
_TOP_KEYS = ("pue", "energy_price", "currency", "carbon_intensity", "gpu_hour_prices")
_ENTRY_KEYS = ("model", "resource", "price")


def parse_showback(text: str) -> Showback:
    """The settings a file's text gives (not yet validated, not yet over the flags)."""
    try:
        data = load_strict(text, max_depth=MAX_DEPTH, aliases=False, loader=NamesLoader)
    except YamlRefused as exc:
        raise ShowbackError(str(exc)) from None
    if data is None:
        return Showback()  # an empty file: the flags stand
    top = _mapping(data, "the file")
    _known(top, "", _TOP_KEYS)
    currency = top.get("currency")
    if currency is not None and not isinstance(currency, str):
        raise ShowbackError("currency: must be a code such as EUR")
    return Showback(
        pue=_number(top, "pue", ""),
        energy_price=_price(top.get("energy_price"), "energy_price"),
        currency=currency or "",
        carbon_intensity=_number(top, "carbon_intensity", ""),
        gpu_hour_prices=_gpu_prices(top.get("gpu_hour_prices")),
    )


def read_showback(path: Path) -> Showback:
    """The file's settings; ShowbackError (one line naming the file) when it cannot be used."""
    try:
        raw = read_bounded(str(path), MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ShowbackError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise ShowbackError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ShowbackError(f"{path} is not UTF-8 text") from None
    return parse_showback(text)


def _shown(key: str) -> str:
    return key if key.isprintable() and len(key) <= 64 else repr(key[:64])


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise ShowbackError(f"{where}: must be a mapping of names to values")
    return value


def _known(section: Mapping[str, Any], where: str, known: tuple[str, ...]) -> None:
    for key in section:
        if key not in known:
            raise ShowbackError(f"{where}{_shown(key)}: unknown key (known: {', '.join(known)})")


def _number(section: Mapping[str, Any], key: str, where: str) -> float | None:
    value = section.get(key)
    if value is None:
        return None
    # YAML's true is an int to Python: a flag-like `pue: yes` must not read as 1
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ShowbackError(f"{where}{key}: must be a number")
    return float(value)


def _price(value: Any, where: str) -> Price | None:
    if value is None:
        return None
    if isinstance(value, str):
        return parse_price(value, where)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ShowbackError(f"{where}: must be a number or 'AMOUNT CURRENCY' (0.21 EUR)")
    return Price(float(value))


def _gpu_prices(value: Any) -> tuple[GpuHourPrice, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ShowbackError("gpu_hour_prices: must be a list of {model or resource, price}")
    if len(value) > MAX_GPU_PRICES:
        raise ShowbackError(f"gpu_hour_prices: more than {MAX_GPU_PRICES} entries")
    entries = []
    for i, item in enumerate(value):
        where = f"gpu_hour_prices[{i}]"
        entry = _mapping(item, where)
        _known(entry, where + ".", _ENTRY_KEYS)
        names = {}
        for name in ("model", "resource"):
            text = entry.get(name)
            if text is not None and not isinstance(text, str):
                raise ShowbackError(f"{where}.{name}: must be a string")
            names[name] = text or ""
        price = _price(entry.get("price"), f"{where}.price")
        if price is None:
            raise ShowbackError(f"{where}: missing price")
        entries.append(GpuHourPrice(price, model=names["model"], resource=names["resource"]))
    return tuple(entries)
