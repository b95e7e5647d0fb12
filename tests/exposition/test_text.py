"""exporter/exposition/text.py writes exactly what prometheus_client's generate_latest writes."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import CollectorRegistry
from prometheus_client.utils import floatToGoString

from exporter.exposition.text import TextRenderer, go_float

KINDS = ["counter", "gauge", "untyped", "unknown", "info", "stateset", "summary"]
NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True)
VALUES = st.text(
    st.characters(blacklist_categories=["Cs"]), max_size=12
)  # any text: quotes, backslashes, newlines, non-ASCII
FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e6, 123456.7, 1234567.0, 1e-7, 5e21, 0.1 + 0.2]),
)


@st.composite
def families(draw: st.DrawFn) -> list[Metric]:
    out = []
    for _ in range(draw(st.integers(1, 4))):
        name = draw(NAMES)
        metric = Metric(name, draw(VALUES), draw(st.sampled_from(KINDS)))
        label_names = draw(st.lists(NAMES, max_size=4, unique=True))
        for _ in range(draw(st.integers(0, 6))):
            labels = {k: draw(VALUES) for k in label_names}
            suffix = draw(st.sampled_from(["", "", "_total", "_created", "_gsum", "_gcount"]))
            ts = draw(st.one_of(st.none(), st.floats(0, 2e9)))
            metric.add_sample(name + suffix, labels, draw(FLOATS), ts)
        out.append(metric)
    return out


def _expected(fams: list[Metric]) -> bytes:
    class Fixed:
        def collect(self) -> list[Metric]:
            return fams

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed())
    return generate_latest(registry)


@settings(max_examples=300)
@given(families(), families())
def test_same_bytes_as_generate_latest(first: list[Metric], second: list[Metric]) -> None:
    renderer = TextRenderer()
    assert renderer.render(first) == _expected(first)
    # the second render reuses label sets of the first where they repeat
    assert renderer.render(second) == _expected(second)
    assert renderer.render(first) == _expected(first)


@given(FLOATS)
def test_go_float_matches_client_python(value: float) -> None:
    assert go_float(value) == floatToGoString(value)  # type: ignore[no-untyped-call]


def test_go_float_examples() -> None:
    assert go_float(1234567.0) == "1.234567e+06"
    assert go_float(math.inf) == "+Inf" and go_float(-math.inf) == "-Inf"
    assert go_float(math.nan) == "NaN"
    assert go_float(2) == "2.0"


def test_label_sets_of_an_earlier_render_are_dropped() -> None:
    renderer = TextRenderer()
    a, b = Metric("a", "", "gauge"), Metric("a", "", "gauge")
    a.add_sample("a", {"pod": "x"}, 1)
    b.add_sample("a", {"pod": "y"}, 1)
    renderer.render([a])
    renderer.render([b])
    assert list(renderer._labels) == [(("pod", "y"),)]
