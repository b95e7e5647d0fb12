"""Make targets in the order a newcomer runs them: `make run` installs only the runtime, so
`make lint` afterwards must install the test tools (ruff, mypy) itself."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _dry_run(target: str) -> list[str]:
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is not installed (scripts/setup-debian.sh installs it)")
    proc = subprocess.run(
        [make, "-n", "-C", str(REPO), "--no-print-directory", target],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return proc.stdout.splitlines()


def test_lint_installs_the_test_tools_first() -> None:
    lines = _dry_run("lint")
    setup = next(i for i, line in enumerate(lines) if "setup-debian.sh test" in line)
    ruff = next(i for i, line in enumerate(lines) if "-m ruff check" in line)
    mypy = next(i for i, line in enumerate(lines) if "-m mypy" in line)
    assert setup < ruff < mypy


def test_run_installs_only_the_runtime() -> None:
    """The reason lint needs its own dependency: run's setup does not bring ruff."""
    lines = _dry_run("run")
    assert any("setup-debian.sh run" in line for line in lines)
    assert not any("setup-debian.sh test" in line for line in lines)
