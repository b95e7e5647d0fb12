"""The --showback.* flags of `serve` (docs/showback-config.md): the node's PUE, energy price,
currency, carbon intensity, and the file that can give them all and the GPU-hour prices."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from exporter.exposition.showback_live import LiveShowback
from exporter.model.showback import (
    Showback,
    ShowbackError,
    check_values,
    parse_number,
    parse_price,
    validate,
)

F = TypeVar("F", bound=Callable[..., Any])

Convert = Callable[[click.Context, click.Parameter, Any], Any]


def _env(flag: str) -> str:
    return "WATTPROBE_" + flag.lstrip("-").replace(".", "_").replace("-", "_").upper()


def _checked(parse: Callable[[str], Showback]) -> Convert:
    """A callback building the flag's Showback and checking its value alone, so a bad value is
    one line naming its flag (the flags together are validated by load_showback)."""

    def convert(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Any:
        if value is None or not value.strip():
            return None
        try:
            one = parse(value)
            check_values(one)
        except ShowbackError as exc:
            raise click.BadParameter(str(exc).partition(": ")[2] or str(exc)) from None
        return one

    return convert


def _option(flag: str, dest: str, parse: Callable[[str], Showback], help_: str) -> Any:
    return click.option(
        flag,
        dest,
        envvar=_env(flag),
        show_envvar=True,
        default=None,
        callback=_checked(parse),
        help=help_,
    )


def showback_options(func: F) -> F:
    opts = [
        _option(
            "--showback.pue",
            "showback_pue",
            lambda t: Showback(pue=parse_number(t, "pue")),
            "the node's facility PUE (facility energy / IT energy, 1 to 10) [default: none]",
        ),
        _option(
            "--showback.energy-price",
            "showback_energy_price",
            lambda t: Showback(energy_price=parse_price(t, "energy_price")),
            "price of a kWh: AMOUNT or 'AMOUNT CURRENCY' (0.21 EUR) [default: none, no cost]",
        ),
        _option(
            "--showback.currency",
            "showback_currency",
            lambda t: Showback(currency=t.strip()),
            "ISO 4217 code of the node's prices (EUR, USD)",
        ),
        _option(
            "--showback.carbon-intensity",
            "showback_carbon_intensity",
            lambda t: Showback(carbon_intensity=parse_number(t, "carbon_intensity")),
            "carbon intensity of the node's grid in gCO2e/kWh [default: none]",
        ),
        click.option(
            "--showback.config",
            "showback_config_file",
            envvar=_env("--showback.config"),
            show_envvar=True,
            default=None,
            type=click.Path(path_type=Path, dir_okay=False),
            help="YAML file with the showback settings and GPU-hour prices; its values win over "
            "the flags; reread when it changes",
        ),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def showback_of(kw: dict[str, Any]) -> Showback:
    """The flags' settings together, taking their values out of kw (each flag was checked)."""
    merged = Showback()
    for name in ("pue", "energy_price", "currency", "carbon_intensity"):
        one = kw.pop(f"showback_{name}")
        if one is not None:
            merged = merged.overlay(one)
    return merged


def load_showback(flags: Showback, path: Path | None) -> LiveShowback:
    """The settings in force at start-up: a bad flag or file is one line naming it (exit 2)."""
    try:
        validate(flags)
    except ShowbackError as exc:
        raise click.BadParameter(str(exc), param_hint="'--showback.*' flags") from None
    try:
        return LiveShowback(flags, path)
    except ShowbackError as exc:
        raise click.BadParameter(str(exc), param_hint="'--showback.config'") from None
