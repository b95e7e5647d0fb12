"""--format png needs matplotlib, an optional extra: without it, one line saying how to get it."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from exporter.app.report import ReportError
from exporter.app.report.compute import compute
from exporter.app.report.period import parse_period
from exporter.app.report.png import write_png


def test_without_matplotlib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    period = parse_period("2025-03", datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(
        ReportError, match=r"^--format png needs matplotlib: pip install 'wattprobe\[report\]'"
    ):
        write_png(compute([]), period, tmp_path / "r.png")
    assert not (tmp_path / "r.png").exists()


def test_the_agent_does_not_import_the_report() -> None:
    """`wattprobe serve` loads the CLI module: the report (and matplotlib) load only when used."""
    import subprocess  # noqa: PLC0415

    code = (
        "import sys, exporter.app.cli; "
        "print(any(m.startswith(('exporter.app.report', 'matplotlib')) for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
