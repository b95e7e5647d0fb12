"""The docs' generated picture is current, and their links lead somewhere."""

from __future__ import annotations

import importlib.util
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

import pytest

from tests.benchmarks.report import recorded_elsewhere
from tests.support.running import REPO

DOCS = REPO / "docs"
SVG = DOCS / "attribution.svg"
GENERATOR = DOCS / "diagrams" / "attribution.py"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("attribution_diagram", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_the_committed_svg_is_the_generators_output() -> None:
    assert SVG.read_text() == generator().render(), "docs/attribution.svg is stale: run `make docs`"


def test_the_svg_is_well_formed_and_its_numbers_add_up() -> None:
    root = ET.fromstring(SVG.read_text())
    ns = {"svg": "http://www.w3.org/2000/svg"}
    assert root.find("svg:title", ns) is not None
    texts = [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]
    module = generator()
    shares = [s for _, s in module.CPU_SECONDS.values()]
    active = sum(module.PACKAGE_J.values()) - 2 * module.PACKAGE_IDLE_W * module.INTERVAL_S
    container_j = [float(m.group(1)) for t in texts if (m := re.search(r"CPU time: ([\d.]+) J", t))]
    assert len(container_j) == len(shares)
    assert sum(container_j) == pytest.approx(active)
    gpu_j = [float(m.group(1)) for t in texts if (m := re.search(r"SM use: ([\d.]+) J", t))]
    assert sum(gpu_j) == pytest.approx(module.GPU_J - module.GPU_IDLE_W * module.INTERVAL_S)


def markdown_files() -> list[Path]:
    return [REPO / "README.md", *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: p.name)
def test_relative_links_resolve(path: Path) -> None:
    broken = []
    for match in LINK.finditer(path.read_text()):
        target = match.group(1)
        if target.startswith(("http://", "https://", "#", "mailto:")):
            continue
        if not (path.parent / target.split("#")[0]).exists():
            broken.append(target)
    assert not broken, f"{path.name} links to missing files: {broken}"


def test_benchmarks_md_leads_to_every_benchmark_record() -> None:
    """docs/benchmarks.md is where figures are looked up: it links every benchmarks-*.md, and
    the harness writes the same list (tests/benchmarks/report.py)."""
    docs = REPO / "docs"
    text = (docs / "benchmarks.md").read_text()
    records = sorted(p.name for p in docs.glob("benchmarks-*.md"))
    assert records, "the topic benchmark records are under docs/"
    assert [r for r in records if f"]({r})" not in text] == []
    assert "\n".join(recorded_elsewhere()) in text
