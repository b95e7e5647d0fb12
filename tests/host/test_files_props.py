"""Properties of sysfs number reading: numbers round-trip, everything else is refused."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from exporter.host.files import fault_for, read_int, reason_for
from exporter.host.kernelnum import MAX_DIGITS, parse_uint
from tests.support.props import PROPERTY

_DIR = Path(tempfile.mkdtemp(prefix="wattprobe-props-"))
_ASCII_NUMBER = re.compile(r"^[ \t\r\n]*[0-9]+[ \t\r\n]*$")


def _write(content: str) -> str:
    path = _DIR / "value"
    path.write_text(content, encoding="utf-8")
    return str(path)


@PROPERTY
@given(
    st.integers(min_value=0, max_value=2**64 - 1),
    st.sampled_from(["", "\n", " \n", "\t", "\n\n"]),
)
def test_numbers_round_trip(value: int, tail: str) -> None:
    assert read_int(_write(f"{value}{tail}")) == value


@PROPERTY
@given(st.text(max_size=40))
@example("\u0663")  # ARABIC-INDIC DIGIT THREE: str.isdigit() and int() accept it
@example("1_000")  # int() accepts underscores
@example("+5")
@example("-0")
@example("")
@example("0\x1f")  # str.strip() takes \x1c-\x1f as whitespace (found at 5000 examples)
def test_anything_else_is_refused(text: str) -> None:
    path = _write(text)
    if _ASCII_NUMBER.match(text) and len(text.strip(" \t\r\n")) <= MAX_DIGITS:
        assert read_int(path) == int(text)
        return
    try:
        value = read_int(path)
    except ValueError as exc:
        assert reason_for(exc) == "unparsable value"
        return
    raise AssertionError(f"{text!r} read as {value}")


@PROPERTY
@given(st.integers(min_value=MAX_DIGITS + 1, max_value=20_000), st.sampled_from("0123456789-"))
@example(309, "9")  # float(value) / 1e6 overflowed: the whole hwmon source was 'internal error'
@example(4301, "9")  # past int()'s default digit limit (a ValueError of another kind)
def test_long_numbers_are_out_of_range_not_exceptions(length: int, lead: str) -> None:
    text = lead + "9" * (length - 1)
    path = _write(text + "\n")
    readers: list[Callable[[], int]] = [lambda: read_int(path), lambda: parse_uint(text)]
    for read in readers:
        try:
            read()
        except ValueError as exc:  # no OverflowError, no other exception
            assert fault_for(exc) == "out of range"
            assert reason_for(exc) == "unparsable value"
            assert len(str(exc)) < 4200  # the message does not carry the number
            continue
        raise AssertionError(f"a {length}-character number was read")
