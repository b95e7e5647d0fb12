"""docs/benchmarks.md and the terminal table, from the sections the benchmarks returned."""

from __future__ import annotations

import os
import platform
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from tests.benchmarks.common import REPO, Figure, Section

DOC = REPO / "docs" / "benchmarks.md"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _commit() -> str:
    done = subprocess.run(
        ["git", "describe", "--always", "--dirty"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def machine() -> str:
    mem_kib = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return (
        f"{os.cpu_count()} CPUs ({_cpu_model()}), {mem_kib / 2**20:.0f} GiB, Linux "
        f"{platform.release()}, Python {platform.python_version()}"
    )


def table(sections: Sequence[Section]) -> str:
    """The terminal summary: every figure, one line each."""
    rows = [(f.measure, f.value, f.target, f.verdict) for s in sections for f in s.figures]
    width = min(max((len(r[0]) for r in rows), default=10), 70)
    lines = []
    for measure, value, target, verdict in rows:
        tail = f"  [{target}: {verdict.strip('*')}]" if target else ""
        lines.append(f"{measure[:width]:<{width}}  {value}{tail}")
    return "\n".join(lines)


def _figures(figures: Sequence[Figure]) -> list[str]:
    out = ["| measure | value | target | verdict |", "|---|---|---|---|"]
    for f in figures:
        out.append(f"| {_cell(f.measure)} | {_cell(f.value)} | {f.target} | {f.verdict} |")
    return out


def recorded_elsewhere() -> list[str]:
    """Links to the benchmark records `make bench` does not rewrite (runs too long for it, or
    written by their own commands), so that benchmarks.md is the one place to start from."""
    lines = [
        "## Recorded elsewhere",
        "",
        "Runs that `make bench` does not repeat (too long, or run by their own command); each "
        "file says how it was measured and how to rerun it.",
        "",
    ]
    for path in sorted(DOC.parent.glob("benchmarks-*.md")):
        first = path.read_text().split("\n", 1)[0]
        title = first.lstrip("# ").strip() or path.stem
        lines.append(f"- [{title}]({path.name})")
    return lines


# Sections of benchmarks.md that markdown() always writes itself, never keeps from a run before.
GENERATED = ("The issue's targets", "Recorded elsewhere", "Notes")
MEASURED = "Measured by "


@dataclass(frozen=True)
class Kept:
    """A section of the document as an earlier run wrote it: its title, its Markdown (without
    the title) and the figures of its first table that had a target."""

    title: str
    body: list[str]
    targets: list[Figure]


def _cells(row: str) -> list[str]:
    inner = row.strip().removeprefix("|").removesuffix("|")
    return [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", inner)]


def earlier_sections(text: str) -> list[Kept]:
    """The sections of an earlier benchmarks.md, so that a run of some benchmarks (--only)
    rewrites their sections and keeps the others with the figures they had. A section written
    before sections were dated gets the earlier run's line from the document's header."""
    run = next(
        (ln.removeprefix("- Run: ") for ln in text.splitlines() if ln.startswith("- Run: ")), ""
    )
    out: list[Kept] = []
    for block in text.split("\n## ")[1:]:
        title, _, rest = block.partition("\n")
        if title in GENERATED:
            continue
        body = rest.strip("\n").splitlines()
        if run and not any(ln.startswith(MEASURED) for ln in body):
            body = [f"{MEASURED}{run.removesuffix('.')}.", "", *body]
        targets: list[Figure] = []
        rows = [ln for ln in body if ln.startswith("|")]
        if rows and _cells(rows[0]) == ["measure", "value", "target", "verdict"]:
            for row in rows[2:]:
                if not row.startswith("| "):
                    break
                cells = _cells(row)
                if len(cells) == 4 and cells[2]:
                    measure, value, target, verdict = cells
                    targets.append(Figure(measure, value, target, verdict == "met"))
        out.append(Kept(title, body, targets))
    return out


def section_lines(s: Section) -> list[str]:
    """One section on its own, as a benchmark run as a script prints it."""
    return _section_lines(s, f"{MEASURED}this run at {datetime.now(UTC):%Y-%m-%d %H:%M} UTC.")


def _section_lines(s: Section, measured: str) -> list[str]:
    lines = ["", f"## {s.title}", "", measured, ""]
    if s.method:
        lines += [s.method, ""]
    if s.load is not None:
        lines += [f"Machine load while measuring: {s.load.describe()}.", ""]
    lines += _figures(s.figures)
    if s.details:
        lines += ["", s.details]
    reruns = sorted({f.rerun for f in s.figures if f.rerun})
    if reruns:
        lines += ["", "Rerun: " + ", ".join(f"`{r}`" for r in reruns) + "."]
    return lines


def markdown(
    sections: Sequence[Section], command: str, notes: str, earlier: Sequence[Kept] = ()
) -> str:
    """The document: the sections of this run, and those of `earlier` that this run did not
    measure, kept in their place (new sections go after them)."""
    ran = {s.title: s for s in sections}
    kept = [k for k in earlier if k.title not in ran]
    order: list[Section | Kept] = [ran.get(k.title, k) for k in earlier]
    order += [s for s in sections if s.title not in {k.title for k in earlier}]
    targets = [
        f
        for part in order
        for f in (part.figures if isinstance(part, Section) else part.targets)
        if f.met is not None
    ]
    when = f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {_commit()}"
    lines = [
        "# Benchmarks",
        "",
        "Generated by `make bench` (`python -m tests.benchmarks`); do not edit by hand: the",
        "analysis, the optimisations these figures led to and what bounds the missed targets are",
        "in [performance.md](performance.md).",
        "",
        f"- Run: `{command}` at {when}."
        + (
            " Sections it did not measure are kept from earlier runs; each section says when it "
            "was measured."
            if kept
            else ""
        ),
        f"- Machine: {machine()}. It is shared with other jobs and was busy throughout: "
        "each section says how busy. Figures that compare two things (ratios) were taken in "
        "alternating rounds so that the load hits both sides alike.",
        "",
        "## The issue's targets",
        "",
        "| target | measured | verdict |",
        "|---|---|---|",
    ]
    for f in targets:
        lines.append(f"| {_cell(f.measure)}: {f.target} | {_cell(f.value)} | {f.verdict} |")
    for part in order:
        if isinstance(part, Section):
            lines += _section_lines(part, f"{MEASURED}`{command}` at {when}.")
        else:
            lines += ["", f"## {part.title}", "", *part.body]
    lines += ["", *recorded_elsewhere()]
    if notes:
        lines += ["", "## Notes", "", notes]
    return "\n".join(lines) + "\n"
