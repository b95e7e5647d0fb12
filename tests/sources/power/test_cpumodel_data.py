"""exporter/sources/power/cpumodel/boavizta.json is what tests/support/estimatedata.py makes from
the pinned boaviztapi: regenerated here, byte for byte (`make estimate-data` after a bump)."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from exporter.sources.power.cpumodel import data
from tests.support import estimatedata
from tests.support.realparts import missing


def _require_boaviztapi() -> None:
    try:
        metadata.version("boaviztapi")
    except metadata.PackageNotFoundError:
        missing("boaviztapi (pyproject's test extra)")


@pytest.mark.slow  # imports boaviztapi's model code (pandas, scipy): 3 to 7 s here
def test_shipped_data_has_no_drift() -> None:
    _require_boaviztapi()
    shipped = estimatedata.OUT.read_text(encoding="utf-8")
    assert estimatedata.generated() == shipped, "boavizta.json drifted: run `make estimate-data`"


def test_pinned_version_and_licence_are_recorded() -> None:
    raw = json.loads(estimatedata.OUT.read_text(encoding="utf-8"))
    assert raw["source"]["version"] == estimatedata.PINNED
    assert raw["source"]["licence"] == "AGPL-3.0-only"
    with (estimatedata.REPO / "pyproject.toml").open(encoding="utf-8") as f:
        assert f'"boaviztapi=={estimatedata.PINNED}"' in f.read()


def test_other_version_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(estimatedata, "PINNED", "0.0.1")
    _require_boaviztapi()
    with pytest.raises(estimatedata.WrongVersion):
        estimatedata.data_dir()


def test_tables_parse_what_the_generator_wrote() -> None:
    t = data.tables()
    assert t.version == estimatedata.PINNED
    assert len(t.cpus) > 1000 and len(t.instances) > 2000
    assert {i.provider for i in t.instances} == set(estimatedata.PROVIDERS)
    # every instance's platform is shipped (the generator keeps only the platforms used)
    assert all(t.platform(i.platform) is not None for i in t.instances)
    assert t.tdp_loads == (0.0, 10.0, 50.0, 100.0)


def test_unknown_format_is_refused() -> None:
    raw = json.loads(estimatedata.OUT.read_text(encoding="utf-8"))
    raw["format"] = 99
    with pytest.raises(ValueError, match="format"):
        data.parse(raw)


def test_agent_never_imports_boaviztapi() -> None:
    """The agent's code names boaviztapi nowhere but in comments and strings about it."""
    import ast  # noqa: PLC0415

    for path in (estimatedata.REPO / "exporter").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(
                n.split(".")[0] in {"boaviztapi", "pandas", "scipy", "numpy"} for n in names
            ), path
