"""Properties of the flag parsers: durations, listen addresses, --power.idle."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from exporter.model.config import (
    MAX_IDLE_WATTS,
    IdlePower,
    parse_duration,
    parse_listen_address,
)
from tests.support.props import PROPERTY

UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


@PROPERTY
@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=10**6), st.sampled_from(sorted(UNITS))),
        min_size=1,
        max_size=4,
    )
)
def test_duration_round_trip(parts: list[tuple[int, str]]) -> None:
    text = "".join(f"{n}{unit}" for n, unit in parts)
    total = sum(n * UNITS[unit] for n, unit in parts)
    if total <= 0:
        try:
            parse_duration(text)
        except ValueError:
            return
        raise AssertionError(f"{text!r} accepted as a zero duration")
    assert math.isclose(parse_duration(text), total, rel_tol=1e-12)


@PROPERTY
@given(st.text(max_size=30))
@example("nan")
@example("inf")
@example("-5s")
@example("1e400")
@example("5s5")
def test_duration_garbage(text: str) -> None:
    try:
        seconds = parse_duration(text)
    except ValueError:
        return
    assert math.isfinite(seconds) and seconds > 0


hosts = st.sampled_from(["", "127.0.0.1", "0.0.0.0", "node-1.example", "[::1]", "[::]"])


@PROPERTY
@given(hosts, st.integers(min_value=0, max_value=65535))
def test_listen_address_round_trip(host: str, port: int) -> None:
    assert parse_listen_address(f"{host}:{port}") == (host.strip("[]"), port)


@PROPERTY
@given(st.text(max_size=40))
@example(":\u0663")  # a non-ASCII digit is not a port
@example(":+80")
@example(":99999")
@example("::")
def test_listen_address_garbage(text: str) -> None:
    try:
        _host, port = parse_listen_address(text)
    except ValueError:
        return
    port_text = text.rsplit(":", 1)[1]
    assert port_text.isascii() and port_text.isdigit() and int(port_text) == port
    assert 0 <= port <= 65535


watts = st.floats(min_value=0, max_value=MAX_IDLE_WATTS, allow_nan=False, allow_infinity=False)
zones = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=12)


@PROPERTY
@given(st.dictionaries(zones, watts, max_size=5), st.one_of(st.none(), watts))
def test_idle_power_round_trip(per_zone: dict[str, float], default: float | None) -> None:
    items = [f"{zone}={w!r}" for zone, w in per_zone.items()]
    if default is not None:
        items.append(f"*={default!r}W")
    if not items:
        return
    parsed = IdlePower.parse(",".join(items))
    for zone, w in per_zone.items():
        assert parsed.for_zone(zone) == w
    assert parsed.for_zone("\x00never a zone") == default


@PROPERTY
@given(st.text(max_size=40))
@example("nan")
@example("package=inf")
@example("=5")
@example("package=-1")
def test_idle_power_garbage(text: str) -> None:
    try:
        parsed = IdlePower.parse(text)
    except ValueError:
        return
    values = [w for _, w in parsed.per_zone_w]
    if parsed.default_w is not None:
        values.append(parsed.default_w)
    assert all(math.isfinite(w) and w >= 0 for w in values)


def test_idle_power_over_the_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="out of range"):
        IdlePower.parse(f"{MAX_IDLE_WATTS * 2:g}")
