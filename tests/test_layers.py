"""The import contract: exporter's modules import only downward (pyproject.toml
[tool.importlinter], docs/architecture.md). Runs import-linter, so `make test` fails on an
upward import."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.running import REPO

# import-linter's command, run with this interpreter so the checkout's exporter is analysed
LINT = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def lint_imports(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", LINT, "--no-cache", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_layers_contract_is_kept() -> None:
    result = lint_imports()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 1 kept, 0 broken." in result.stdout


def test_an_upward_import_breaks_a_contract(tmp_path: Path) -> None:
    # the monitor imports readings: with readings declared above it, that import points up
    config = tmp_path / ".importlinter"
    config.write_text(
        "[importlinter]\nroot_package = exporter\n\n"
        "[importlinter:contract:upside-down]\nname = upside down\ntype = layers\n"
        "layers =\n    exporter.readings\n    exporter.accounting.monitor\n"
    )
    result = lint_imports(str(config), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "exporter.accounting.monitor -> exporter.readings" in result.stdout
    assert "Contracts: 0 kept, 1 broken." in result.stdout
