"""--showback.config's parser and reader (exporter/exposition/showback_file.py): every good file
reads back as the settings it was written from, every bad one is refused with one line, and the
file is read without blocking or reading without bound (a FIFO, a huge file)."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from exporter.exposition.showback_file import (
    MAX_FILE_BYTES,
    parse_showback,
    read_showback,
)
from exporter.model.showback import GpuHourPrice, Price, Showback, ShowbackError, validate
from tests.support.props import PROPERTY
from tests.support.showback import bad_showbacks, good_showbacks, to_yaml

EXAMPLE = """\
pue: 1.3
energy_price: 0.21
currency: EUR
carbon_intensity: 350
gpu_hour_prices:
  - model: NVIDIA H100 80GB HBM3
    price: 2.50
  - resource: nvidia.com/mig-1g.10gb
    price: "0.40 EUR"
"""


def test_the_documented_example() -> None:
    assert parse_showback(EXAMPLE) == Showback(
        pue=1.3,
        energy_price=Price(0.21),
        currency="EUR",
        carbon_intensity=350.0,
        gpu_hour_prices=(
            GpuHourPrice(Price(2.5), model="NVIDIA H100 80GB HBM3"),
            GpuHourPrice(Price(0.4, "EUR"), resource="nvidia.com/mig-1g.10gb"),
        ),
    )
    doc = Path(__file__).resolve().parents[2] / "docs" / "showback-config.md"
    assert EXAMPLE in doc.read_text(), "docs/showback-config.md shows this example"


@PROPERTY
@given(good_showbacks())
def test_every_good_file_round_trips(s: Showback) -> None:
    assert validate(s) is s
    assert validate(parse_showback(to_yaml(s))) == s


@PROPERTY
@given(bad_showbacks())
def test_every_bad_value_in_a_file_is_refused(case: tuple[Showback, str]) -> None:
    s, setting = case
    with pytest.raises(ShowbackError) as refused:
        validate(parse_showback(to_yaml(s)))
    assert "\n" not in str(refused.value)
    assert setting in str(refused.value), str(refused.value)
    with pytest.raises(ShowbackError, match=re.escape(setting)):  # and without the file
        validate(s)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("pue: 1.3\nPUE: 1.4\n", "PUE: unknown key"),
        ("pue: 1.3\npue: 1.4\n", "duplicate key 'pue'"),
        ("currency: EUR\ncurrency: USD\n", "duplicate key 'currency'"),
        ("pue: [1.3\n", "not valid YAML"),
        ("pue: '1.3'\n", "pue: must be a number"),
        ("pue: yes\n", "pue: must be a number"),
        ("pue: .nan\n", "pue: nan is not a finite number"),
        ("energy_price: -.inf\ncurrency: EUR\n", "energy_price: -inf is not a finite number"),
        ("energy_price: 0.2 eur\n", "energy_price: 'eur' is not an ISO 4217"),
        ("energy_price: [0.2]\n", "energy_price: must be a number or"),
        ("currency: 978\n", "currency: must be a code"),
        ("- pue: 1.3\n", "the file: must be a mapping"),
        ("1: 2\n", "not valid YAML: a key is not a name"),
        ("gpu_hour_prices: {model: A100}\n", "gpu_hour_prices: must be a list"),
        ("gpu_hour_prices: [{model: A100}]\n", "gpu_hour_prices[0]: missing price"),
        (
            "gpu_hour_prices: [{model: A100, price: 1, cost: 2}]\n",
            "gpu_hour_prices[0].cost: unknown",
        ),
        ("gpu_hour_prices: [{model: 7, price: 1}]\n", "gpu_hour_prices[0].model: must be a string"),
        ("gpu_hour_prices: [A100]\n", "gpu_hour_prices[0]: must be a mapping"),
        ("x: &a [*a]\n", "aliases (*name) are not supported, at line 1"),
        ("pue: " + "[" * 100 + "]" * 100 + "\n", "not valid YAML: nested deeper than"),
        ("pue: !!python/object:os.system x\n", "not valid YAML"),
    ],
)
def test_bad_files_are_refused_with_one_line(text: str, reason: str) -> None:
    with pytest.raises(ShowbackError) as refused:
        validate(parse_showback(text))
    message = str(refused.value)
    assert reason in message and "\n" not in message, message


def test_an_empty_file_gives_nothing() -> None:
    assert parse_showback("") == Showback()
    assert parse_showback("# only a comment\n") == Showback()


@PROPERTY
@given(st.text(max_size=200) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_any_text_is_settings_or_one_refusal(text: str) -> None:
    try:
        validate(parse_showback(text))
    except ShowbackError as exc:
        assert "\n" not in str(exc)


def test_reads_a_file_and_a_link_to_one(tmp_path: Path) -> None:
    # a ConfigMap volume: the file is a link through ..data to the current version's directory
    version = tmp_path / "..2026_11_26"
    version.mkdir()
    (version / "showback.yaml").write_text(EXAMPLE)
    (tmp_path / "..data").symlink_to(version.name)
    (tmp_path / "showback.yaml").symlink_to("..data/showback.yaml")
    assert read_showback(tmp_path / "showback.yaml").pue == 1.3


def test_a_fifo_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "showback.yaml"
    os.mkfifo(fifo)
    outcome: list[str] = []

    def read() -> None:
        try:
            read_showback(fifo)
        except ShowbackError as exc:
            outcome.append(str(exc))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(30)  # a blocking open would wait for a writer forever
    if reader.is_alive():  # unblock it before failing
        with open(fifo, "wb"):
            pass
    assert outcome and "not a regular file (FIFO)" in outcome[0], outcome


def test_a_huge_file_is_refused_after_reading_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "showback.yaml"
    path.write_text("# " + "x" * (MAX_FILE_BYTES * 4) + "\npue: 1.3\n")
    with pytest.raises(ShowbackError, match=f"larger than {MAX_FILE_BYTES} bytes"):
        read_showback(path)
    with pytest.raises(ShowbackError, match="not a regular file"):
        read_showback(Path("/dev/zero"))


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(ShowbackError, match=r"cannot read .*No such file"):
        read_showback(tmp_path / "missing.yaml")
    with pytest.raises(ShowbackError, match="not a regular file"):
        read_showback(tmp_path)
    (tmp_path / "latin1.yaml").write_bytes(b"gpu_hour_prices: [{model: caf\xe9, price: 1}]\n")
    with pytest.raises(ShowbackError, match="is not UTF-8 text"):
        read_showback(tmp_path / "latin1.yaml")
