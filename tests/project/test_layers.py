"""The import contracts (pyproject.toml [tool.importlinter], docs/architecture.md): each top-level
package of exporter/ is one layer and imports only downward, sources are independent of each other,
and the application's parts import downward. Runs import-linter, so `make test` fails on an
upward import."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support.running import REPO

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
    assert "Contracts: 3 kept, 0 broken." in result.stdout


def test_the_layers_are_the_top_level_packages() -> None:
    """Folders are the layers: every row of the layers contract names whole top-level packages,
    and every top-level package of exporter/ has a row."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = (c for c in config["contracts"] if c["id"] == "layers")
    named = {m.strip() for row in layers["layers"] for m in row.split("|")}
    packages = {
        f"exporter.{p.name}" for p in (REPO / "exporter").iterdir() if (p / "__init__.py").is_file()
    }
    assert named == packages | {"exporter.__main__"}


def test_a_source_importing_another_breaks_independence(tmp_path: Path) -> None:
    config = tmp_path / ".importlinter"
    config.write_text(
        "[importlinter]\nroot_package = exporter\n\n"
        "[importlinter:contract:pair]\nname = pair\ntype = independence\n"
        "modules =\n    exporter.sources.activity.procfs\n    exporter.host.procstat\n"
    )
    result = lint_imports(str(config), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "exporter.sources.activity.procfs.source -> exporter.host.procstat" in result.stdout


def test_an_upward_import_breaks_a_contract(tmp_path: Path) -> None:
    # the monitor imports readings: with readings declared above it, that import points up
    config = tmp_path / ".importlinter"
    config.write_text(
        "[importlinter]\nroot_package = exporter\n\n"
        "[importlinter:contract:upside-down]\nname = upside down\ntype = layers\n"
        "layers =\n    exporter.model.readings\n    exporter.accounting.monitor\n"
    )
    result = lint_imports(str(config), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "exporter.accounting.monitor -> exporter.model.readings" in result.stdout
    assert "Contracts: 0 kept, 1 broken." in result.stdout
