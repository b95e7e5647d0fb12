"""`make bench --only X` rewrites X's sections of docs/benchmarks.md and keeps the others as an
earlier run wrote them, targets included (tests/benchmarks/report.py)."""

from __future__ import annotations

from tests.benchmarks.common import Figure, Section
from tests.benchmarks.report import DOC, earlier_sections, markdown


def section(title: str, value: str, met: bool) -> Section:
    return Section(
        title,
        figures=[
            Figure("a | piped measure", value, target="<= 1 %", met=met, rerun="cmd"),
            Figure("no target here", "7"),
        ],
        method=f"How {title} was measured.",
    )


def test_a_partial_run_keeps_the_sections_it_did_not_measure() -> None:
    first = markdown([section("One", "old", False), section("Two", "two", True)], "run 1", "")
    kept = earlier_sections(first)
    assert [k.title for k in kept] == ["One", "Two"]
    assert [(f.measure, f.value, f.met) for f in kept[1].targets] == [
        ("a | piped measure", "two", True)
    ]
    second = markdown([section("One", "new", True), section("Three", "3", True)], "run 2", "", kept)
    titles = [ln for ln in second.splitlines() if ln.startswith("## ")]
    assert titles[:4] == ["## The issue's targets", "## One", "## Two", "## Three"]
    assert "| a \\| piped measure: <= 1 % | new | met |" in second  # One's new figure
    assert "| a \\| piped measure: <= 1 % | two | met |" in second  # Two's, kept
    assert "| old |" not in second
    two = second.split("## Two", 1)[1].split("## Three", 1)[0]
    assert "Measured by `run 1`" in two and "How Two was measured." in two
    assert "Measured by `run 2`" in second.split("## One", 1)[1].split("## Two", 1)[0]
    assert "kept from earlier runs" in second


def test_the_committed_document_round_trips() -> None:
    """Every section of docs/benchmarks.md parses back, with its targets in the summary."""
    text = DOC.read_text()
    kept = earlier_sections(text)
    again = markdown([], "nothing", "", kept)
    assert [k.title for k in earlier_sections(again)] == [k.title for k in kept]
    summary = text.split("## The issue's targets", 1)[1].split("\n## ", 1)[0]
    rows = [ln for ln in summary.splitlines() if ln.startswith("| ")][1:]
    assert len(rows) == sum(len(k.targets) for k in kept) > 0
